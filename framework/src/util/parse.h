#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace crucible::util {

// The integer that a prefix of `text` spells (an optional sign, then digits), and how many
// characters it used; nullopt when `text` does not start with one or it overflows int64.
inline std::optional<std::pair<int64_t, size_t>> integer_prefix(const std::string& text) {
  size_t used = 0;
  try {
    const int64_t v = std::stoll(text, &used);
    return std::make_pair(v, used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// `text` as an integer when the whole of it is one.
inline std::optional<int64_t> whole_integer(const std::string& text) {
  const auto p = integer_prefix(text);
  if (!p || p->second != text.size()) return std::nullopt;
  return p->first;
}

// Whether `text` ends with `suffix`.
inline bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace crucible::util
