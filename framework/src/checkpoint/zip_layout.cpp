#include "checkpoint/zip_layout.h"

#include <cstdint>
#include <initializer_list>
#include <string>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/pickle_layout.h"
#include "util/parse.h"

namespace crucible::checkpoint {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEnd = 0x06054b50;
constexpr uint32_t kEnd64 = 0x06064b50;
constexpr uint32_t kEnd64Locator = 0x07064b50;
constexpr uint64_t kEndSize = 22, kEnd64Size = 56, kLocatorSize = 20;
constexpr uint64_t kCentralSize = 46, kLocalSize = 30;

// Little-endian reads at offsets the caller has checked.
class Bytes {
 public:
  Bytes(std::string_view bytes, const std::string& source) : b_(bytes), source_(source) {}

  uint64_t size() const { return b_.size(); }

  uint64_t le(uint64_t at, int width) const {
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b_[at + i]);
    return v;
  }

  // Throws unless [at, at + length) lies inside [begin, end).
  void require_within(uint64_t at, uint64_t length, uint64_t begin, uint64_t end,
                      const char* what) const {
    if (at < begin || at > end || length > end - at) {
      fail(fmt::format("{} at [{}, +{}) lies outside [{}, {})", what, at, length, begin, end));
    }
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw TrainingError(
        fmt::format("{}: not a zip archive torch.save wrote, or a damaged one: {}", source_, why));
  }

 private:
  std::string_view b_;
  const std::string& source_;
};

// The zip64 extended-information extra field replaces each 32-bit field that is all ones, in the
// order given, with 8 bytes.
void read_zip64_extra(const Bytes& b, uint64_t extra, uint64_t extra_end,
                      std::initializer_list<uint64_t*> fields) {
  while (extra + 4 <= extra_end) {
    const uint64_t id = b.le(extra, 2), length = b.le(extra + 2, 2);
    b.require_within(extra + 4, length, extra + 4, extra_end, "an extra field");
    if (id == 0x0001) {
      uint64_t at = extra + 4;
      for (uint64_t* field : fields) {
        if (*field != 0xFFFFFFFF) continue;
        b.require_within(at, 8, extra + 4, extra + 4 + length, "a zip64 size or offset");
        *field = b.le(at, 8);
        at += 8;
      }
      return;
    }
    extra += 4 + length;
  }
}

}  // namespace

void check_zip_layout(std::string_view bytes, const std::string& source) {
  const Bytes b(bytes, source);
  if (b.size() < kEndSize) b.fail(fmt::format("{} bytes", b.size()));
  // The end record is the last signature whose comment reaches exactly to the end of the file.
  uint64_t end = b.size() - kEndSize;
  const uint64_t lowest = end > 0xFFFF ? end - 0xFFFF : 0;
  while (!(b.le(end, 4) == kEnd && end + kEndSize + b.le(end + 20, 2) == b.size())) {
    if (end == lowest) b.fail("no end of central directory record ends the file");
    --end;
  }
  uint64_t entries = b.le(end + 10, 2), directory_size = b.le(end + 12, 4);
  uint64_t directory = b.le(end + 16, 4);
  uint64_t directory_end_limit = end;
  if (end >= kLocatorSize && b.le(end - kLocatorSize, 4) == kEnd64Locator) {
    const uint64_t locator = end - kLocatorSize;
    const uint64_t end64 = b.le(locator + 8, 8);
    b.require_within(end64, kEnd64Size, 0, locator, "the zip64 end record");
    if (b.le(end64, 4) != kEnd64) b.fail("the zip64 end record has no signature");
    // Which of the two records a reader takes differs between miniz versions (LibTorch 1.13's
    // reads the zip64 values whenever the record exists), so they must agree: a field is either
    // the same in both or all ones in the end record.
    const auto agree = [&](uint64_t& field, uint64_t all_ones, uint64_t at64, const char* what) {
      const uint64_t value64 = b.le(at64, 8);
      if (field != all_ones && field != value64) {
        b.fail(fmt::format("the end record gives the {} as {}, the zip64 end record as {}", what,
                           field, value64));
      }
      field = value64;
    };
    agree(entries, 0xFFFF, end64 + 32, "number of entries");
    agree(directory_size, 0xFFFFFFFF, end64 + 40, "central directory's size");
    agree(directory, 0xFFFFFFFF, end64 + 48, "central directory's offset");
    directory_end_limit = end64;
  }
  b.require_within(directory, directory_size, 0, directory_end_limit, "the central directory");

  uint64_t at = directory;
  const uint64_t directory_end = directory + directory_size;
  for (uint64_t i = 0; i < entries; ++i) {
    b.require_within(at, kCentralSize, directory, directory_end, "a central directory header");
    if (b.le(at, 4) != kCentralHeader) b.fail(fmt::format("entry {} has no header signature", i));
    const uint64_t method = b.le(at + 10, 2);
    uint64_t compressed = b.le(at + 20, 4), size = b.le(at + 24, 4);
    uint64_t local = b.le(at + 42, 4);
    const uint64_t name = b.le(at + 28, 2), extra = b.le(at + 30, 2), comment = b.le(at + 32, 2);
    b.require_within(at + kCentralSize, name + extra + comment, directory, directory_end,
                     "a central directory entry's name, extra field and comment");
    read_zip64_extra(b, at + kCentralSize + name, at + kCentralSize + name + extra,
                     {&size, &compressed, &local});
    if (method != 0 || compressed != size) {
      b.fail(
          fmt::format("entry {} is compressed (method {}); torch.save stores entries", i, method));
    }
    b.require_within(local, kLocalSize, 0, directory, "a local header");
    if (b.le(local, 4) != kLocalHeader) b.fail(fmt::format("entry {} has no local header", i));
    const uint64_t data = local + kLocalSize + b.le(local + 26, 2) + b.le(local + 28, 2);
    b.require_within(data, compressed, 0, directory, "an entry's data");
    const std::string_view entry_name = bytes.substr(at + kCentralSize, name);
    if (entry_name == "data.pkl" || util::ends_with(entry_name, "/data.pkl")) {
      check_pickle(bytes.substr(data, size), source);
    }
    at += kCentralSize + name + extra + comment;
  }
  if (at != directory_end) {
    b.fail(fmt::format("the central directory holds {} bytes, its {} entries {}", directory_size,
                       entries, at - directory));
  }
}

}  // namespace crucible::checkpoint
