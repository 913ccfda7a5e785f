#pragma once

#include <cstdint>
#include <vector>

namespace crucible::data {

// SplitMix64: a fast, portable 64-bit mixer; the same output on every platform and compiler.
uint64_t mix64(uint64_t x);

// A permutation of [0, n) that depends only on (seed, epoch): Fisher-Yates driven by SplitMix64.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace crucible::data
