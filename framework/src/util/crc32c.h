#pragma once

#include <cstdint>
#include <string_view>

namespace crucible::util {

// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final xor all ones) of
// `bytes`. crc32c("123456789") is 0xE3069283.
uint32_t crc32c(std::string_view bytes);

// The masked form TFRecord files store: the CRC rotated right by 15 bits plus 0xA282EAD8, so
// that a CRC computed over data that itself holds CRCs is not trivially related to them.
uint32_t masked_crc32c(std::string_view bytes);

}  // namespace crucible::util
