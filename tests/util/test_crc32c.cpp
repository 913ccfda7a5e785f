// CRC-32C against published check values (the CRC catalogue's "123456789", RFC 3720's iSCSI
// vectors) and TFRecord's masking.
#include <string>

#include "catch.h"

#include "util/crc32c.h"

using crucible::util::crc32c;
using crucible::util::masked_crc32c;

TEST_CASE("CRC-32C gives the published check values", "[util]") {
  CHECK(crc32c("") == 0u);
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(crc32c(std::string(32, '\xFF')) == 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  CHECK(crc32c(ascending) == 0x46DD794Eu);
  CHECK(crc32c(descending) == 0x113FDB5Cu);
}

TEST_CASE("the masked CRC rotates right by 15 bits and adds TFRecord's constant", "[util]") {
  // 0xE3069283 rotated right by 15 bits is 0x2507C60D; plus 0xA282EAD8 is 0xC78AB0E5.
  CHECK(masked_crc32c("123456789") == 0xC78AB0E5u);
  CHECK(masked_crc32c("") == 0xA282EAD8u);
}
