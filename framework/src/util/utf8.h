#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace crucible::util {

// The offset of the first byte of `text` that does not begin a well-formed UTF-8 sequence (RFC
// 3629: no overlong forms, no surrogates, nothing past U+10FFFF), or nullopt when all of it is
// UTF-8. A sequence cut off by the end of `text` is malformed at its first byte.
std::optional<size_t> first_invalid_utf8(std::string_view text);

// `text` with each byte that first_invalid_utf8 rejects replaced by U+FFFD.
std::string valid_utf8(std::string_view text);

}  // namespace crucible::util
