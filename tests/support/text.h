#pragma once

// Reading a command's output in tests.

#include <cstddef>
#include <string>

namespace crucible::testing {

// How many times `what` (not empty) occurs in `text`, overlapping occurrences counted.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace crucible::testing
