#include "data/shuffle.h"

#include <cstddef>
#include <numeric>
#include <utility>

namespace crucible::data {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  uint64_t state = mix64(seed ^ mix64(static_cast<uint64_t>(epoch) + 0x5851F42D4C957F2DULL));
  for (int64_t i = n - 1; i > 0; --i) {
    state = mix64(state);
    // Multiply-shift gives an unbiased-enough index in [0, i] without division.
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(state) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

}  // namespace crucible::data
