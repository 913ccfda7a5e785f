#include "config/yaml_text.h"

#include <algorithm>
#include <functional>
#include <regex>
#include <sstream>

namespace crucible::config {
namespace {

// Whether `line` ends with a block scalar's indicator (`key: |`, `- >-`, `text: |2 # note`): the
// lines indented under it are text, in which a tab after the indentation is a character.
bool opens_block_scalar(const std::string& line) {
  static const std::regex indicator(R"((^|[:-][ \t]+)[|>][0-9+-]*[ \t]*(#.*)?$)");
  return std::regex_search(line, indicator);
}

// Whether the quote at text[open] (' or ") is closed later in `text`, by YAML's rules: in double
// quotes a backslash escapes the next character; in single quotes '' is a quote.
bool quote_closes(const std::string& text, size_t open) {
  const char quote = text[open];
  for (size_t i = open + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;
      } else {
        return true;
      }
    }
  }
  return false;
}

// Whether `mark` is where it says in `text`: its byte offset on its line and column.
bool mark_matches(const YAML::Mark& mark, const std::string& text) {
  if (mark.pos < 0 || static_cast<size_t>(mark.pos) >= text.size()) return false;
  const size_t pos = static_cast<size_t>(mark.pos);
  const size_t line_start = pos == 0 ? 0 : text.rfind('\n', pos - 1) + 1;  // npos + 1 == 0
  const auto line = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n');
  return line == mark.line && static_cast<int>(pos - line_start) == mark.column;
}

}  // namespace

// yaml-cpp's LoadAll is not used: it loops without end on some damaged input. YAML forbids "---"
// at column 0 inside a scalar.
std::optional<int64_t> second_document_line(const std::string& text) {
  std::istringstream lines(text);
  bool content = false;    // the first document has content
  bool separated = false;  // a --- followed it
  int64_t number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const bool marker =
        line.rfind("---", 0) == 0 && (line.size() == 3 || line[3] == ' ' || line[3] == '\t');
    const size_t first = line.find_first_not_of(" \t", marker ? 3 : 0);
    const bool blank = first == std::string::npos || line[first] == '#';
    if (marker) {
      separated = separated || content;
      if (separated && !blank) return number;  // "--- value": content on the marker's line
      continue;
    }
    if (line.rfind("...", 0) == 0 && (line.size() == 3 || blank)) {  // the end of a document
      separated = separated || content;
      continue;
    }
    if (blank || (!content && line[0] == '%')) continue;
    if (separated) return number;
    content = true;
  }
  return std::nullopt;
}

std::optional<int64_t> tab_indented_line(const std::string& text, int64_t last) {
  std::istringstream lines(text);
  int64_t number = 0;
  std::optional<size_t> block;  // the indentation of the line that opened a block scalar
  for (std::string line; number < last && std::getline(lines, line);) {
    ++number;
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    const size_t spaces = line.find_first_not_of(' ');
    if (block && spaces > *block) continue;
    block.reset();
    if (line.find('\t') < first) return number;
    if (opens_block_scalar(line)) block = spaces;
  }
  return std::nullopt;
}

std::optional<YAML::Mark> unclosed_quote(const YAML::Node& root, const std::string& text) {
  // yaml-cpp's marks count bytes after a byte-order mark, which it skips.
  const std::string body = text.rfind("\xEF\xBB\xBF", 0) == 0 ? text.substr(3) : text;
  std::optional<YAML::Mark> found;
  int64_t budget = 100000;  // nodes visited: aliases of aliases make a tree too large to walk
  const std::function<void(const YAML::Node&)> walk = [&](const YAML::Node& node) {
    if (found || --budget < 0) return;
    if (node.IsMap()) {
      for (const auto& item : node) {
        walk(item.first);
        walk(item.second);
      }
    } else if (node.IsSequence()) {
      for (const auto& item : node) walk(item);
    } else if (node.IsScalar() && node.Tag() == "!") {  // quoted, or a block scalar
      const YAML::Mark mark = node.Mark();
      if (!mark_matches(mark, body)) return;
      const char opening = body[static_cast<size_t>(mark.pos)];
      if ((opening == '"' || opening == '\'') &&
          !quote_closes(body, static_cast<size_t>(mark.pos))) {
        found = mark;
      }
    }
  };
  walk(root);
  return found;
}

}  // namespace crucible::config
