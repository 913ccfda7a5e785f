#include "metrics/event_file.h"

#include <system_error>
#include <utility>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "util/crc32c.h"
#include "util/file_system.h"

namespace crucible::metrics {

namespace {

// Protocol buffer wire types.
constexpr int kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5;

void put_fixed(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field << 3 | wire_type));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out += bytes;
}

template <class To, class From>
To bit_cast(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

// Reads the fields of one protocol buffer in order.
class FieldReader {
 public:
  explicit FieldReader(const std::string& data) : data_(data) {}

  struct Field {
    int number = 0;
    int wire_type = 0;
    uint64_t number_value = 0;  // a varint or fixed field
    std::string bytes;          // a length-delimited field
  };

  // The next field; nullopt at the end. Sets failed() when the data is malformed.
  std::optional<Field> next() {
    if (failed_ || at_ == data_.size()) return std::nullopt;
    uint64_t key = 0;
    if (!varint(key) || (key >> 3) == 0 || (key >> 3) > (1u << 29)) return fail();
    Field f;
    f.number = static_cast<int>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    switch (f.wire_type) {
      case kVarint:
        if (!varint(f.number_value)) return fail();
        break;
      case kFixed64:
      case kFixed32: {
        const size_t n = f.wire_type == kFixed64 ? 8 : 4;
        if (data_.size() - at_ < n) return fail();
        for (size_t i = 0; i < n; ++i) {
          f.number_value |= uint64_t{static_cast<unsigned char>(data_[at_ + i])} << (8 * i);
        }
        at_ += n;
        break;
      }
      case kBytes: {
        uint64_t n = 0;
        if (!varint(n) || n > data_.size() - at_) return fail();
        f.bytes = data_.substr(at_, n);
        at_ += n;
        break;
      }
      default:
        return fail();
    }
    return f;
  }
  bool failed() const { return failed_; }

 private:
  bool varint(uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64 && at_ < data_.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(data_[at_++]);
      value |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  std::optional<Field> fail() {
    failed_ = true;
    return std::nullopt;
  }

  const std::string& data_;
  size_t at_ = 0;
  bool failed_ = false;
};

// Summary.Value: the tag and the simple value; nullopt when malformed or not a simple value.
std::optional<Scalar> decode_value(const std::string& data) {
  FieldReader r(data);
  Scalar s;
  bool has_value = false;
  while (auto f = r.next()) {
    if (f->number == 1 && f->wire_type == kBytes) s.tag = f->bytes;
    if (f->number == 2 && f->wire_type == kFixed32) {
      s.value = bit_cast<float>(static_cast<uint32_t>(f->number_value));
      has_value = true;
    }
  }
  if (r.failed() || !has_value) return std::nullopt;
  return s;
}

uint64_t read_fixed(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  return v;
}

// The data and decoded event of each good record of `path`, in order (see read_event_file), and
// whether they are all of it.
struct Records {
  std::vector<std::pair<std::string, Event>> records;
  bool whole = true;
};

Records read_records(const std::string& path) {
  Records out;
  if (!util::exists(path)) return out;
  std::string bytes;
  try {
    bytes = util::read_file(path);
  } catch (const std::system_error& e) {
    throw TrainingError(
        fmt::format("cannot read TensorBoard file {}: {}", path, e.code().message()));
  }
  size_t at = 0;
  while (bytes.size() - at >= 12) {
    const std::string length_bytes = bytes.substr(at, 8);
    if (read_fixed(bytes, at + 8, 4) != util::masked_crc32c(length_bytes)) break;
    const uint64_t length = read_fixed(bytes, at, 8);
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) break;
    std::string data = bytes.substr(at + 12, length);
    if (read_fixed(bytes, at + 12 + length, 4) != util::masked_crc32c(data)) break;
    auto event = decode_event(data);
    if (!event) break;
    out.records.emplace_back(std::move(data), std::move(*event));
    at += 16 + length;
  }
  out.whole = at == bytes.size();
  return out;
}

// A SessionLog whose status is START (1).
const std::string kSessionStart = std::string("\x08\x01", 2);

}  // namespace

std::string encode_event(const Event& event) {
  std::string out;
  put_key(out, 1, kFixed64);
  put_fixed(out, bit_cast<uint64_t>(event.wall_time), 8);
  if (event.step != 0) {
    put_key(out, 2, kVarint);
    put_varint(out, static_cast<uint64_t>(event.step));
  }
  if (!event.file_version.empty()) {
    put_bytes(out, 3, event.file_version);
    return out;
  }
  if (event.session_start) {
    put_bytes(out, 7, kSessionStart);
    return out;
  }
  std::string summary;
  for (const Scalar& s : event.scalars) {
    std::string value;
    put_bytes(value, 1, s.tag);
    put_key(value, 2, kFixed32);
    put_fixed(value, bit_cast<uint32_t>(s.value), 4);
    put_bytes(summary, 1, value);
  }
  put_bytes(out, 5, summary);
  return out;
}

std::optional<Event> decode_event(const std::string& data) {
  FieldReader r(data);
  Event e;
  while (auto f = r.next()) {
    if (f->number == 1 && f->wire_type == kFixed64) e.wall_time = bit_cast<double>(f->number_value);
    if (f->number == 2 && f->wire_type == kVarint) e.step = static_cast<int64_t>(f->number_value);
    if (f->number == 3 && f->wire_type == kBytes) e.file_version = f->bytes;
    if (f->number == 7 && f->wire_type == kBytes) {
      FieldReader log(f->bytes);
      while (auto status = log.next()) {
        if (status->number == 1 && status->wire_type == kVarint) {
          e.session_start = status->number_value == 1;
        }
      }
      if (log.failed()) return std::nullopt;
    }
    if (f->number == 5 && f->wire_type == kBytes) {
      FieldReader values(f->bytes);
      while (auto v = values.next()) {
        if (v->number != 1 || v->wire_type != kBytes) continue;
        if (auto scalar = decode_value(v->bytes)) e.scalars.push_back(std::move(*scalar));
      }
      if (values.failed()) return std::nullopt;
    }
  }
  if (r.failed()) return std::nullopt;
  return e;
}

std::string frame_record(const std::string& data) {
  std::string length;
  put_fixed(length, data.size(), 8);
  std::string out = length;
  put_fixed(out, util::masked_crc32c(length), 4);
  out += data;
  put_fixed(out, util::masked_crc32c(data), 4);
  return out;
}

std::vector<Event> read_event_file(const std::string& path) {
  std::vector<Event> events;
  for (auto& record : read_records(path).records) events.push_back(std::move(record.second));
  return events;
}

KeptEvents events_until(const std::string& path, int64_t step) {
  const Records read = read_records(path);
  KeptEvents kept;
  kept.whole = read.whole;
  for (const auto& [data, event] : read.records) {
    if (!event.file_version.empty() && !kept.started) kept.started = event.wall_time;
    if (!event.file_version.empty() || event.session_start) continue;
    if (event.step <= step) {
      kept.records += frame_record(data);
    } else {
      kept.whole = false;
    }
  }
  return kept;
}

}  // namespace crucible::metrics
