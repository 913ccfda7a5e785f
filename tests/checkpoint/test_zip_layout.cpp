// check_zip_layout: the extents of torch.save's zip archives, checked before LibTorch reads them.
#include "catch.h"

#include <crucible/errors.h>

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
  // zip64 end record whose values miniz reads only for 32-bit fields that are all ones, so the
  // 32-bit offset is checked whatever the zip64 record says.
  REQUIRE(good.compare(end - 20, 4, "PK\x06\x07") == 0);
  std::string bad = good;
  put_le(bad, end + 16, good.size() - 30, 4);
  CHECK_THAT(layout_error(bad), Catch::Contains("the central directory at ["));
  bad = good;
  put_le(bad, end - 20 + 8, good.size() + 100, 8);
  CHECK_THAT(layout_error(bad), Catch::Contains("the zip64 end record at ["));
  bad = good;
  put_le(bad, end + 16, 0xFFFFFFFF, 4);  // now the zip64 record's offset counts
  CHECK(layout_error(bad).empty());
  put_le(bad, good.rfind("PK\x06\x06") + 48, good.size(), 8);
  CHECK_THAT(layout_error(bad), Catch::Contains("the central directory at ["));
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
