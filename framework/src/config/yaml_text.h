#pragma once

// Checks of YAML text that yaml-cpp does not make, or reports only as a later error.

#include <cstdint>
#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

namespace crucible::config {

// The line (1-based) where a second YAML document of `text` starts its content, if one does: a
// "---" or "..." line at column 0 after the first document's content, then a line of content.
std::optional<int64_t> second_document_line(const std::string& text);

// The number of the first line up to `last` (1-based) whose indentation holds a tab, which YAML
// forbids there; a block scalar's text lines are passed over.
std::optional<int64_t> tab_indented_line(const std::string& text, int64_t last);

// Where a quoted scalar of `root`, the document yaml-cpp loaded from `text`, opens a quote that
// `text` never closes: yaml-cpp then reads the rest of the text, every line after it included,
// as that one value. The mark is the opening quote's (line and column 0-based). nullopt when
// every quote closes, or where a mark does not match `text` (it is then not checked).
std::optional<YAML::Mark> unclosed_quote(const YAML::Node& root, const std::string& text);

}  // namespace crucible::config
