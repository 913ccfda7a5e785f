#pragma once

// The pieces of a report page. Everything here returns well-formed XHTML fragments (every element
// closed, text escaped, valid UTF-8), so that a page is also an XML document and a test can parse
// it.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crucible::report {

// `text` with &, <, >, " and ' escaped, control characters other than tab, newline and carriage
// return (which XML forbids) written as \uXXXX, and each byte that is not part of well-formed
// UTF-8 replaced by U+FFFD. Safe as element text and as an attribute value.
std::string escape(std::string_view text);

// A relative path as a URL path: each byte outside letters, digits, "-._~/" percent-encoded, and
// "./" put before a first segment holding ':' (which would read as a URL scheme).
std::string url_path(std::string_view path);

// A number for people: 6 significant digits, "nan", "inf", "-inf".
std::string number_text(double value);
std::string number_text(const std::optional<double>& value);  // "-" when absent
// A count (batches, records): a whole number below 1e15 in full, "1234567"; anything else as
// number_text.
std::string count_text(double value);

// An element: <tag attributes>inner</tag>. `inner` is HTML; `attributes` is written as given.
std::string element(std::string_view tag, std::string_view inner, std::string_view attributes = "");

// <a href="url_path(href)">text</a>, `text` escaped.
std::string hyperlink(const std::string& href, const std::string& text);

struct Table {
  std::vector<std::string> header;             // text
  std::vector<std::vector<std::string>> rows;  // HTML cells, each row as long as the header
  std::vector<bool> marked;                    // per row: highlighted (the best one); may be short
  std::vector<bool> numeric;                   // per column: right-aligned; may be short
};

// The table as HTML.
std::string table(const Table& table);

// Name/value pairs as a two-column table; values are HTML.
std::string facts(const std::vector<std::pair<std::string, std::string>>& pairs);

// `text` as a preformatted block.
std::string preformatted(const std::string& text);

// A whole page: doctype, UTF-8, the report's style sheet, <h1>title</h1>, `body` (HTML), and a
// footer naming the Crucible version that wrote it. No scripts, nothing fetched.
std::string page(const std::string& title, const std::string& body);

}  // namespace crucible::report
