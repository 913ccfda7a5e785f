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

}  // namespace crucible::util
