// util::first_invalid_utf8 against RFC 3629's well-formed byte sequences; valid_utf8 and the
// error text that uses it.
#include "catch.h"

#include <stdexcept>
#include <string>

#include "util/error_text.h"
#include "util/utf8.h"

using crucible::util::first_invalid_utf8;
using crucible::util::first_line;
using crucible::util::valid_utf8;

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

TEST_CASE("valid_utf8 replaces each rejected byte, and error text is valid UTF-8", "[util]") {
  CHECK(valid_utf8("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(valid_utf8("a\xFF\xFE"
                   "b") ==
        "a\xEF\xBF\xBD\xEF\xBF\xBD"
        "b");
  CHECK(valid_utf8("ok \xE2\x82") == "ok \xEF\xBF\xBD\xEF\xBF\xBD");
  // first_line: the first line that is not blank, its bytes made valid.
  CHECK(first_line(std::runtime_error("found '\xFF' here\n  at frame 1")) ==
        "found '\xEF\xBF\xBD' here");
  CHECK(first_line(std::runtime_error("\n  \nthe cause\nmore")) == "the cause");
  CHECK(first_line(std::runtime_error("")) == "(an error without a message)");
  CHECK(first_line(std::runtime_error(" \n\t")) == "(an error without a message)");
}
