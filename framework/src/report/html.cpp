#include "report/html.h"

#include <cctype>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include <crucible/version.h>

#include "util/number_text.h"
#include "util/utf8.h"

namespace crucible::report {
namespace {

constexpr const char* kStyle = R"(
body { font: 14px/1.45 system-ui, sans-serif; color: #1d2433; margin: 2em auto; max-width: 72em;
       padding: 0 1.5em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #d8dce5; padding-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #e6e9ef; text-align: left;
         vertical-align: top; }
th { background: #f3f5f9; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.best td { background: #e7f5ea; font-weight: 600; }
table.facts th { background: none; font-weight: 400; color: #5a6478; }
pre { background: #f6f8fa; border: 1px solid #e6e9ef; padding: 0.8em; overflow-x: auto; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
svg.chart { border: 1px solid #e6e9ef; background: #fff; }
footer { margin-top: 3em; color: #8a93a6; font-size: 0.9em; }
)";

}  // namespace

std::string escape(std::string_view raw) {
  const std::string text = util::valid_utf8(raw);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string number_text(double value) { return util::number_text(value, 6); }

std::string url_path(std::string_view path) {
  std::string out;
  const size_t first_slash = path.find('/');
  if (path.substr(0, first_slash).find(':') != std::string_view::npos) out = "./";
  for (const char c : path) {
    if (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-._~/", c) != nullptr) {
      out += c;
    } else {
      out += fmt::format("%{:02X}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

std::string count_text(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::abs(value) < 1e15) {
    return fmt::format("{:.0f}", value);
  }
  return number_text(value);
}

std::string number_text(const std::optional<double>& value) {
  return value ? number_text(*value) : "-";
}

std::string element(std::string_view tag, std::string_view inner, std::string_view attributes) {
  return fmt::format("<{}{}{}>{}</{}>", tag, attributes.empty() ? "" : " ", attributes, inner, tag);
}

std::string hyperlink(const std::string& href, const std::string& text) {
  return element("a", escape(text), "href=\"" + escape(url_path(href)) + "\"");
}

std::string table(const Table& t) {
  std::string head;
  for (const std::string& h : t.header) head += element("th", escape(h));
  std::string body = element("tr", head);
  for (size_t r = 0; r < t.rows.size(); ++r) {
    std::string cells;
    for (size_t c = 0; c < t.rows[r].size(); ++c) {
      const bool numeric = c < t.numeric.size() && t.numeric[c];
      cells += element("td", t.rows[r][c], numeric ? "class=\"num\"" : "");
    }
    const bool marked = r < t.marked.size() && t.marked[r];
    body += element("tr", cells, marked ? "class=\"best\"" : "");
  }
  return element("table", body) + "\n";
}

std::string facts(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string rows;
  for (const auto& [name, value] : pairs) {
    rows += element("tr", element("th", escape(name)) + element("td", value));
  }
  return element("table", rows, "class=\"facts\"") + "\n";
}

std::string preformatted(const std::string& text) { return element("pre", escape(text)) + "\n"; }

std::string page(const std::string& title, const std::string& body) {
  return fmt::format(
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
      "<meta charset=\"utf-8\"/>\n<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n"
      "<h1>{}</h1>\n{}<footer>Written by Crucible {} (<code>trainer report</code>).</footer>\n"
      "</body>\n</html>\n",
      escape(title), kStyle, escape(title), body, CRUCIBLE_VERSION_STRING);
}

}  // namespace crucible::report
