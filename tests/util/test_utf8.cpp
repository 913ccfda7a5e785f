// util::first_invalid_utf8 against RFC 3629's well-formed byte sequences.
#include "catch.h"

#include <string>

#include "util/utf8.h"

using crucible::util::first_invalid_utf8;

TEST_CASE("first_invalid_utf8 accepts UTF-8 and names the first byte of anything else", "[util]") {
  CHECK_FALSE(first_invalid_utf8(""));
  CHECK_FALSE(first_invalid_utf8("plain ASCII: lr = 0.01\n"));
  // 2, 3 and 4 bytes, the ends of each range included: é, €, U+FFFF, U+10000, U+10FFFF.
  CHECK_FALSE(first_invalid_utf8(
      "caf\xC3\xA9 \xE2\x82\xAC \xEF\xBF\xBF \xF0\x90\x80\x80 \xF4\x8F\xBF\xBF"));

  CHECK(first_invalid_utf8("ab\xFF") == 2u);            // never a lead byte
  CHECK(first_invalid_utf8("a\x80") == 1u);             // a continuation byte alone
  CHECK(first_invalid_utf8("x\xC0\xAF") == 1u);         // overlong '/'
  CHECK(first_invalid_utf8("\xE0\x80\xAF") == 0u);      // overlong in three bytes
  CHECK(first_invalid_utf8("\xED\xA0\x80") == 0u);      // a UTF-16 surrogate, U+D800
  CHECK(first_invalid_utf8("\xF4\x90\x80\x80") == 0u);  // past U+10FFFF
  CHECK(first_invalid_utf8("ok \xE2\x82") == 3u);       // cut off by the end
  CHECK(first_invalid_utf8("\xE2\x28\xA1") == 0u);      // a second byte that is ASCII
  CHECK(first_invalid_utf8("\xF0\x90\x80\x28") == 0u);  // a fourth byte that is ASCII
}
