#pragma once

#include <algorithm>
#include <exception>
#include <string>

#include <crucible/errors.h>

#include "util/utf8.h"

namespace crucible::util {

// The first line of an exception's message that is not blank, as valid UTF-8 (each byte that
// is not UTF-8 replaced by U+FFFD): LibTorch and c10d append C++ stack traces and context lines
// after it that a user does not need. "(an error without a message)" when every line is blank.
inline std::string first_line(const std::exception& e) {
  const std::string message = message_without_trace(e);
  for (size_t at = 0; at < message.size();) {
    const size_t end = std::min(message.find('\n', at), message.size());
    const std::string line = message.substr(at, end - at);
    if (line.find_first_not_of(" \t\r") != std::string::npos) return valid_utf8(line);
    at = end + 1;
  }
  return "(an error without a message)";
}

// first_line without its final period, for a message that goes on after it.
inline std::string first_sentence(const std::exception& e) {
  std::string line = first_line(e);
  while (!line.empty() && (line.back() == '.' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace crucible::util
