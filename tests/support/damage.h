#pragma once

// Seeded damage of a file's bytes, for tests that a reader refuses every damaged copy cleanly.

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <random>
#include <string>

#include "catch.h"

namespace crucible::testing {

// Damaged copy number `i` of `good`, drawn from `rng`: a few bytes overwritten (i % 4 == 0), 8
// bytes of 0xff such as a huge length field (1), a truncation (2), or bytes inserted (3).
inline std::string damaged_copy(const std::string& good, int i, std::mt19937_64& rng) {
  const auto below = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  std::string bad = good;
  switch (i % 4) {
    case 0:
      for (size_t k = 0, n = 1 + below(4); k < n; ++k) bad[below(bad.size())] = char(rng());
      break;
    case 1: {
      const size_t at = below(bad.size());
      for (size_t k = at; k < std::min(at + 8, bad.size()); ++k) bad[k] = '\xff';
      break;
    }
    case 2:
      bad.resize(below(bad.size()));
      break;
    case 3:
      bad.insert(below(bad.size()), std::string(1 + below(16), char(rng())));
      break;
  }
  return bad;
}

// Calls `read` on `count` damaged copies of `good` (seeded, so every run sees the same ones) and
// returns how many it refused. A refusal must be an `Error` whose message contains `name`; any
// other exception fails the calling test (and a crash ends it).
template <typename Error>
int damaged_copies_refused(const std::string& good, const std::string& name, int count,
                           const std::function<void(const std::string& bad)>& read) {
  std::mt19937_64 rng(20261124);
  int refused = 0;
  for (int i = 0; i < count; ++i) {
    const std::string bad = damaged_copy(good, i, rng);
    try {
      read(bad);
    } catch (const Error& e) {
      INFO("damage " << i << ": " << e.what());
      CHECK_THAT(std::string(e.what()), Catch::Contains(name));
      ++refused;
    } catch (const std::exception& e) {
      FAIL("damage " << i << " of " << name << " escaped as another exception: " << e.what());
    }
  }
  return refused;
}

}  // namespace crucible::testing
