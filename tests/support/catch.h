#pragma once

// Catch2 behind one include, so that the tests compile against Catch2 2 (Debian 12) and Catch2 3
// (Debian 13). Tests use Catch2 2's spelling: Catch::Contains, Catch::StartsWith and Approx; under
// Catch2 3 those names are provided here over its Catch::Matchers.

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>

#include <string>

namespace Catch {
inline Matchers::StringContainsMatcher Contains(const std::string& text) {
  return Matchers::ContainsSubstring(text);
}
using Matchers::EndsWith;
using Matchers::StartsWith;
}  // namespace Catch
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
