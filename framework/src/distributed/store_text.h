#pragma once

// Text as the c10d store holds values: bytes.

#include <cstdint>
#include <string>
#include <vector>

namespace crucible::dist {

inline std::vector<uint8_t> store_bytes(const std::string& text) {
  return {text.begin(), text.end()};
}

inline std::string store_text(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

}  // namespace crucible::dist
