// check_zip_layout and check_pickle: the extents of torch.save's zip archives and of their
// pickles, checked before LibTorch reads them.
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include "catch.h"

#include <crucible/errors.h>

#include "checkpoint/pickle_layout.h"
#include "checkpoint/tensor_files.h"
#include "checkpoint/zip_layout.h"

namespace ckpt = crucible::checkpoint;

namespace {

// The message of the TrainingError `read` throws, or "" when it throws none.
template <class Read>
std::string refusal_of(const Read& read) {
  try {
    read();
  } catch (const crucible::TrainingError& e) {
    return e.what();
  }
  return "";
}

std::string layout_error(const std::string& bytes) {
  return refusal_of([&] { ckpt::check_zip_layout(bytes, "f.pt"); });
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
    return refusal_of([&] { ckpt::check_pickle(pickle, "f.pt"); });
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
  // Objects nested deeper than 1000 (destroyed recursively, they would overflow the C++ stack):
  // by lists on the stack appended into each other, or by one list put in the memo and appended
  // to a new one over and over. A flat list of many appends, or of many items, is 2 deep.
  const auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  CHECK_THAT(refusal("\x80\x02" + repeat("]", 1100) + repeat("a", 1099) + "."),
             Catch::Contains("nests objects more than 1000 deep"));
  CHECK(refusal("\x80\x02" + repeat("]", 900) + repeat("a", 899) + ".") == "");
  CHECK_THAT(refusal("\x80\x02]q\x00"s +
                     repeat("]h\x00"
                            "aq\x00"s,
                            1100) +
                     "."),
             Catch::Contains("nests objects more than 1000 deep"));
  CHECK_THAT(refusal("\x80\x02]p0\n" + repeat("]g0\naq\x00"s, 1100) + "."),
             Catch::Contains("nests objects more than 1000 deep"));
  // Lists that each gain one item, all put in the memo first, then appended into each other
  // through it: the second takes items after it went inside the first.
  const auto le32 = [](uint32_t v) {
    std::string out;
    for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
    return out;
  };
  std::string aliased = "\x80\x02";
  for (uint32_t i = 0; i < 1100; ++i) aliased += "]r" + le32(i) + "0";
  for (uint32_t i = 0; i + 1 < 1100; ++i) aliased += "j" + le32(i) + "j" + le32(i + 1) + "a0";
  CHECK_THAT(refusal(aliased + "N."),
             Catch::Contains("opcode 0x61 at offset") &&
                 Catch::Contains("adds items to an object already inside another"));
  CHECK(refusal("\x80\x02]" + repeat("Na", 5000) + "(" + repeat("N", 5000) + "e.") == "");
  CHECK(refusal("\x80\x02}" + repeat("NNs", 5000) + "(" + repeat("NN", 5000) + "u.") == "");

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

TEST_CASE("a tensor whose pickled sizes, strides or offset reach past its storage is refused",
          "[checkpoint]") {
  using namespace std::string_literals;
  // A whole archive of w = ones(3) and b = zeros(2) whose data.pkl is then edited, with its zip
  // rewritten (CRCs and all) as a crafted file would be.
  const auto written = ckpt::torch_dict_bytes({{"w", torch::ones({3})}, {"b", torch::zeros(2)}});
  caffe2::serialize::PyTorchStreamReader reader(
      std::make_unique<caffe2::serialize::MemoryReadAdapter>(written.data(), written.size()));
  const auto record = [&](const std::string& name) {
    const auto [data, size] = reader.getRecord(name);
    return std::string(static_cast<const char*>(data.get()), size);
  };
  const std::string pickle = record("data.pkl");
  const auto rewritten = [&](const std::string& from, const std::string& to) {
    std::string edited = pickle;
    const size_t at = edited.find(from);
    REQUIRE(at != std::string::npos);
    edited.replace(at, from.size(), to);
    std::string out;
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) -> size_t {
      out.append(static_cast<const char*>(bytes), size);
      return size;
    });
    writer.writeRecord("data.pkl", edited.data(), edited.size());
    for (const char* name : {"byteorder", "data/0", "data/1"}) {
      const std::string bytes = record(name);
      writer.writeRecord(name, bytes.data(), bytes.size());
    }
    writer.writeEndOfFile();
    return out;
  };
  const auto refusal = [](const std::string& bytes) {
    return refusal_of([&] { ckpt::read_torch_dict(bytes, "f.pt"); });
  };
  // Unedited, through the same rewriting: read whole.
  CHECK(refusal(rewritten("(K\x03t"s, "(K\x03t"s)) == "");
  // w's sizes (3,) become (1000000,), then (4,): past its 3 elements either way.
  CHECK_THAT(refusal(rewritten("(K\x03t"s, "(J\x40\x42\x0f\x00t"s)),
             Catch::Contains("f.pt: tensor 'w' (sizes [1000000], strides [1], offset 0) reaches "
                             "element 999999 of a storage of 3"));
  CHECK_THAT(refusal(rewritten("(K\x03t"s, "(K\x04t"s)),
             Catch::Contains("reaches element 3 of a storage of 3"));
  // Sizes (3,) with stride 2.
  CHECK_THAT(refusal(rewritten("(K\x01t"s, "(K\x02t"s)),
             Catch::Contains("tensor 'w' (sizes [3], strides [2], offset 0) reaches element 4"));
  // An empty view anywhere is fine.
  CHECK(refusal(rewritten("(K\x03t"s, "(K\x00t"s)) == "");
}
