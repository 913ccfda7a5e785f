// check_zip_layout and check_pickle: the extents of torch.save's zip archives and of their
// pickles, checked before LibTorch reads them.
#include "catch.h"

#include <crucible/errors.h>

#include "checkpoint/pickle_layout.h"
#include "checkpoint/tensor_files.h"
#include "checkpoint/zip_layout.h"

namespace ckpt = crucible::checkpoint;

namespace {

std::string layout_error(const std::string& bytes) {
  try {
    ckpt::check_zip_layout(bytes, "f.pt");
  } catch (const crucible::TrainingError& e) {
    return e.what();
  }
  return "";
}

void put_le(std::string& bytes, size_t at, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

}  // namespace

TEST_CASE("a zip archive whose extents leave the file is refused before LibTorch reads it",
          "[checkpoint]") {
  const auto written = ckpt::torch_dict_bytes({{"w", torch::ones({3, 4})}, {"b", torch::zeros(4)}});
  const std::string good(written.begin(), written.end());
  CHECK(layout_error(good).empty());
  const size_t end = good.rfind("PK\x05\x06");
  REQUIRE(end + 22 == good.size());  // no comment

  CHECK_THAT(layout_error(good.substr(0, good.size() - 1)),
             Catch::StartsWith("f.pt: not a zip archive torch.save wrote, or a damaged one: no end "
                               "of central directory record ends the file"));
  CHECK_THAT(layout_error(good + "x"), Catch::Contains("no end of central directory record"));
  CHECK_THAT(layout_error("PK"), Catch::Contains("2 bytes"));

  // Each field the reader would follow, pointed outside the file in turn. LibTorch's writer adds a
  // zip64 end record; a reader may take either record's values, so they must agree.
  REQUIRE(good.compare(end - 20, 4, "PK\x06\x07") == 0);
  const size_t end64 = good.rfind("PK\x06\x06");
  std::string bad = good;
  put_le(bad, end + 16, good.size() - 30, 4);
  put_le(bad, end64 + 48, good.size() - 30, 8);
  CHECK_THAT(layout_error(bad), Catch::Contains("the central directory at ["));
  bad = good;
  put_le(bad, end - 20 + 8, good.size() + 100, 8);
  CHECK_THAT(layout_error(bad), Catch::Contains("the zip64 end record at ["));
  bad = good;
  put_le(bad, end + 16, 0xFFFFFFFF, 4);  // now the zip64 record's offset counts
  CHECK(layout_error(bad).empty());
  put_le(bad, end64 + 48, good.size(), 8);
  CHECK_THAT(layout_error(bad), Catch::Contains("the central directory at ["));
  // The fuzzer's case: a zip64 offset of -1 beside a sound 32-bit one (miniz read before the
  // buffer).
  bad = good;
  put_le(bad, end64 + 48, ~uint64_t{0}, 8);
  CHECK_THAT(layout_error(bad),
             Catch::Contains("the end record gives the central directory's offset as " +
                             std::to_string(good.find("PK\x01\x02")) +
                             ", the zip64 end record as 18446744073709551615"));
  bad = good;
  put_le(bad, end64 + 32, 3, 8);
  CHECK_THAT(layout_error(bad), Catch::Contains("gives the number of entries as"));
  const size_t central = good.find("PK\x01\x02");
  REQUIRE(central != std::string::npos);
  bad = good;
  put_le(bad, central + 42, central + 10, 4);  // the first entry's local header, into the directory
  CHECK_THAT(layout_error(bad), Catch::Contains("a local header at ["));
  bad = good;
  put_le(bad, central + 10, 8, 2);  // deflated
  CHECK_THAT(layout_error(bad), Catch::Contains("entry 0 is compressed (method 8)"));
  bad = good;
  put_le(bad, central + 20, 0xFFFFFFF0, 4);
  put_le(bad, central + 24, 0xFFFFFFF0, 4);
  CHECK_THAT(layout_error(bad), Catch::Contains("an entry's data at ["));
  bad = good;
  bad[central] = 'Q';
  CHECK_THAT(layout_error(bad), Catch::Contains("entry 0 has no header signature"));
}

TEST_CASE(
    "a pickle that declares sizes past its end or stack items it lacks is refused before LibTorch "
    "reads it",
    "[checkpoint]") {
  const auto refusal = [](const std::string& pickle) {
    try {
      ckpt::check_pickle(pickle, "f.pt");
    } catch (const crucible::TrainingError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  using namespace std::string_literals;
  // PROTO 2, BINUNICODE "abc", SHORT_BINUNICODE "de", GLOBAL, BININT1, STOP: whole.
  CHECK(refusal("\x80\x02X\x03\x00\x00\x00"
                "abc\x8c\x02"
                "dec"
                "torch\nFloatStorage\nK\x05."s) == "");
  CHECK(refusal("\x80\x02X\xff\xff\xff\xff"
                "abc."s) ==
        "f.pt: a damaged pickle: opcode 0x58 at offset 2 declares 4294967295 bytes, 4 follow");
  CHECK_THAT(refusal("\x8c\x05"
                     "ab"s),
             Catch::Contains("opcode 0x8c at offset 0 declares 5 bytes"));
  CHECK_THAT(refusal("\x8e\x01\x00"s), Catch::Contains("declares 8 bytes, 0 follow"));
  CHECK_THAT(refusal("J\x01\x02"s), Catch::Contains("opcode 0x4a at offset 0 declares 4 bytes"));
  // A frame's bytes are opcodes: walked, not skipped.
  CHECK_THAT(refusal("\x95\x06\x00\x00\x00\x00\x00\x00\x00X\x09\x00\x00\x00"
                     "a"s),
             Catch::Contains("opcode 0x58 at offset 9"));
  CHECK_THAT(refusal("\x95\x60\x00\x00\x00\x00\x00\x00\x00."s),
             Catch::Contains("declares 96 bytes, 1 follow"));
  // A memo index past the pickle's size (LibTorch would grow its table to it).
  CHECK(refusal("N}q\x05r\x02\x00\x00\x00p1\n."s) == "");
  CHECK(refusal("Nr\xff\xff\xff\x7f."s) ==
        "f.pt: a damaged pickle: opcode 0x72 at offset 1 stores memo entry 2147483647 in a pickle "
        "of 7 bytes");
  CHECK_THAT(refusal("Np99\n."s), Catch::Contains("opcode 0x70 at offset 1 stores memo entry 99"));
  // Each opcode finds the stack items and the mark it takes, above the innermost mark.
  CHECK(refusal("}(R."s) ==
        "f.pt: a damaged pickle: opcode 0x52 at offset 2 takes 2 stack items, 0 are above the "
        "mark");
  CHECK_THAT(refusal("NNt."s), Catch::Contains("opcode 0x74 at offset 2 takes the items up to a "
                                               "mark, and there is none"));
  CHECK_THAT(refusal("(Nu."s), Catch::Contains("adds items to an object below the mark, and "
                                               "there is none"));
  CHECK_THAT(refusal("(o."s), Catch::Contains("takes an item above the mark, and none is"));
  CHECK_THAT(refusal("."s), Catch::Contains("takes 1 stack items, 0 are above the mark"));
  CHECK(refusal("](NNeN(NN\x86t\x85."s) == "");
  // What follows STOP, an unknown opcode or a line without its end is LibTorch's to refuse.
  CHECK(refusal("N.X\xff\xff\xff\xff"s) == "");
  CHECK(refusal("\xffX\xff\xff\xff\xff"s) == "");
  CHECK(refusal("ctorch"s) == "");

  // In an archive: the zip check finds data.pkl and checks it (its CRC is not read).
  const auto written = ckpt::torch_dict_bytes({{"w", torch::ones({3})}, {"b", torch::zeros(2)}});
  std::string bad(written.begin(), written.end());
  const size_t pickle = bad.find("\x80\x02}(X");
  REQUIRE(pickle != std::string::npos);
  put_le(bad, pickle + 5, 0xFFFFFFFF, 4);
  CHECK_THAT(layout_error(bad),
             Catch::StartsWith("f.pt: a damaged pickle: opcode 0x58 at offset 4 declares "
                               "4294967295 bytes"));
  CHECK_THROWS_WITH(ckpt::read_torch_dict(bad, "f.pt"), Catch::Contains("a damaged pickle"));
}
