#pragma once

#include <exception>
#include <string>

#include <crucible/errors.h>

namespace crucible::util {

// The first line of an exception's message: LibTorch and c10d append C++ stack traces and
// context lines after it that a user does not need.
inline std::string first_line(const std::exception& e) {
  const std::string message = message_without_trace(e);
  return message.substr(0, message.find('\n'));
}

// first_line without its final period, for a message that goes on after it.
inline std::string first_sentence(const std::exception& e) {
  std::string line = first_line(e);
  while (!line.empty() && (line.back() == '.' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace crucible::util
