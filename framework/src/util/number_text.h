#pragma once

// Numbers as the console, logs and pages show them.

#include <cmath>
#include <string>

#include <fmt/format.h>

namespace crucible::util {

// `value` with `digits` significant digits, as "{:.<digits>g}" writes it; "nan" for any NaN (fmt
// writes "-nan" for one whose sign bit is set, as 0/0 gives on x86), "inf" or "-inf".
inline std::string number_text(double value, int digits) {
  if (std::isnan(value)) return "nan";
  return fmt::format("{:.{}g}", value, digits);
}

}  // namespace crucible::util
