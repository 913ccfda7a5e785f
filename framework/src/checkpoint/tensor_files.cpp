#include "checkpoint/tensor_files.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <crucible/errors.h>

#include "checkpoint/zip_layout.h"

namespace crucible::checkpoint {

namespace {

// The names a dtype has in Python's storage classes and in safetensors ("" where it has none).
struct DtypeNames {
  c10::ScalarType type;
  const char* storage;
  const char* safetensors;
};

constexpr DtypeNames kDtypes[] = {
    {torch::kBool, "BoolStorage", "BOOL"},
    {torch::kUInt8, "ByteStorage", "U8"},
    {torch::kInt8, "CharStorage", "I8"},
    {torch::kInt16, "ShortStorage", "I16"},
    {torch::kInt32, "IntStorage", "I32"},
    {torch::kInt64, "LongStorage", "I64"},
    {torch::kFloat16, "HalfStorage", "F16"},
    {torch::kBFloat16, "BFloat16Storage", "BF16"},
    {torch::kFloat32, "FloatStorage", "F32"},
    {torch::kFloat64, "DoubleStorage", "F64"},
    {torch::kComplexFloat, "ComplexFloatStorage", ""},
    {torch::kComplexDouble, "ComplexDoubleStorage", ""},
};

const DtypeNames& names_of(const std::string& tensor, c10::ScalarType type) {
  for (const auto& names : kDtypes) {
    if (names.type == type) return names;
  }
  throw TrainingError(fmt::format("tensor '{}': dtype {} cannot be written to a weights file",
                                  tensor, c10::toString(type)));
}

torch::Tensor cpu_contiguous(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU).contiguous();
}

// The subset of pickle protocol 2 that a dict of tensors needs.
class PickleWriter {
 public:
  void proto() {
    op(0x80);
    byte(2);
  }
  void stop() { op('.'); }
  void mark() { op('('); }
  void tuple() { op('t'); }
  void empty_tuple() { op(')'); }
  void empty_dict() { op('}'); }
  void set_items() { op('u'); }
  void reduce() { op('R'); }
  void persistent_id() { op('Q'); }
  void new_false() { op(0x89); }
  void global(const std::string& module, const std::string& name) {
    op('c');
    raw(module + "\n" + name + "\n");
  }
  void string(const std::string& s) {
    op('X');
    uint32(static_cast<uint32_t>(s.size()));
    raw(s);
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op('K');
      byte(static_cast<uint8_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      uint32(static_cast<uint32_t>(static_cast<int32_t>(v)));
    } else {  // LONG1: 8 bytes of little-endian two's complement
      op(0x8a);
      byte(8);
      for (int i = 0; i < 8; ++i) byte(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
    }
  }
  const std::string& bytes() const { return out_; }

 private:
  void op(uint8_t code) { byte(code); }
  void byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  void uint32(uint32_t v) {
    for (int i = 0; i < 4; ++i) byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void raw(const std::string& s) { out_ += s; }

  std::string out_;
};

// torch._utils._rebuild_tensor_v2(storage, 0, sizes, strides, False, OrderedDict()) over the
// storage record `key`.
void pickle_tensor(PickleWriter& p, const std::string& key, const torch::Tensor& t,
                   const char* storage_class) {
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.mark();
  p.mark();  // persistent id: ('storage', torch.<Type>Storage, key, 'cpu', numel)
  p.string("storage");
  p.global("torch", storage_class);
  p.string(key);
  p.string("cpu");
  p.integer(t.numel());
  p.tuple();
  p.persistent_id();
  p.integer(0);
  p.mark();
  for (const int64_t s : t.sizes()) p.integer(s);
  p.tuple();
  p.mark();
  for (const int64_t s : t.strides()) p.integer(s);
  p.tuple();
  p.new_false();
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.reduce();
  p.tuple();
  p.reduce();
}

}  // namespace

std::vector<char> torch_dict_bytes(const NamedTensors& tensors) {
  std::vector<torch::Tensor> data;
  PickleWriter p;
  p.proto();
  p.empty_dict();
  p.mark();
  for (const auto& [name, tensor] : tensors) {
    const char* storage_class = names_of(name, tensor.scalar_type()).storage;
    data.push_back(cpu_contiguous(tensor));
    p.string(name);
    pickle_tensor(p, std::to_string(data.size() - 1), data.back(), storage_class);
  }
  p.set_items();
  p.stop();
  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) -> size_t {
    const char* c = static_cast<const char*>(bytes);
    out.insert(out.end(), c, c + size);
    return size;
  });
  writer.writeRecord("data.pkl", p.bytes().data(), p.bytes().size());
  writer.writeRecord("byteorder", "little", 6);
  for (size_t i = 0; i < data.size(); ++i) {
    writer.writeRecord("data/" + std::to_string(i), data[i].data_ptr(), data[i].nbytes());
  }
  writer.writeEndOfFile();
  return out;
}

void write_safetensors(const NamedTensors& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata,
                       const ByteSink& sink) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& meta = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
  }
  std::vector<torch::Tensor> data;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const char* dtype = names_of(name, tensor.scalar_type()).safetensors;
    if (!*dtype) {
      throw TrainingError(fmt::format("tensor '{}': safetensors has no dtype {}", name,
                                      c10::toString(tensor.scalar_type())));
    }
    TORCH_INTERNAL_ASSERT(seen.insert(name).second, "duplicate tensor name ", name);
    data.push_back(cpu_contiguous(tensor));
    const uint64_t size = data.back().nbytes();
    header[name] = {{"dtype", dtype},
                    {"shape", data.back().sizes().vec()},
                    {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  sink(length, sizeof(length));
  sink(text.data(), text.size());
  for (const auto& t : data) {
    if (t.nbytes() > 0) sink(t.data_ptr(), t.nbytes());
  }
}

namespace {

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}

}  // namespace

bool looks_like_safetensors(const std::string& bytes) {
  return bytes.size() >= 10 && header_length(bytes) <= bytes.size() - 8 && bytes[8] == '{';
}

NamedTensors read_safetensors(const std::string& bytes, const std::string& source) {
  if (!looks_like_safetensors(bytes)) {
    throw TrainingError(fmt::format("{}: not a safetensors file", source));
  }
  const uint64_t length = header_length(bytes);
  const nlohmann::json header =
      nlohmann::json::parse(bytes.substr(8, length), nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) {
    throw TrainingError(fmt::format("{}: the safetensors header is not a JSON object", source));
  }
  const uint64_t data_size = bytes.size() - 8 - length;
  std::vector<std::pair<uint64_t, std::pair<std::string, torch::Tensor>>> tensors;
  for (const auto& item : header.items()) {  // a lambda below: no structured binding
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    if (name == "__metadata__") continue;
    const auto malformed = [&](const std::string& why) {
      return TrainingError(fmt::format("{}: tensor '{}': {}", source, name, why));
    };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      throw malformed("needs dtype, shape and data_offsets");
    }
    const std::string dtype = entry["dtype"].is_string() ? entry["dtype"].get<std::string>() : "";
    const DtypeNames* names = nullptr;
    for (const auto& d : kDtypes) {
      if (*d.safetensors && dtype == d.safetensors) names = &d;
    }
    if (!names) throw malformed("unknown dtype " + entry["dtype"].dump());
    std::vector<int64_t> shape;
    uint64_t elements = 1;
    for (const auto& d : entry["shape"]) {
      // The element count may not pass the file's data: checked before anything is allocated.
      if (!d.is_number_unsigned() || d.get<uint64_t>() > data_size + 1 ||
          (d.get<uint64_t>() > 0 && elements > (data_size + 1) / d.get<uint64_t>())) {
        throw malformed("shape " + entry["shape"].dump() + " does not fit the file's data");
      }
      shape.push_back(d.get<int64_t>());
      elements *= d.get<uint64_t>();
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      throw malformed("data_offsets " + offsets.dump());
    }
    const uint64_t begin = offsets[0], end = offsets[1];
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(names->type));
    if (begin > end || end > data_size || end - begin != t.nbytes()) {
      throw malformed(
          fmt::format("data_offsets [{}, {}] do not hold {} bytes within the {} of "
                      "the file's data",
                      begin, end, t.nbytes(), data_size));
    }
    if (t.nbytes() > 0) std::memcpy(t.data_ptr(), bytes.data() + 8 + length + begin, t.nbytes());
    tensors.push_back({begin, {name, t}});
  }
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  NamedTensors out;
  for (auto& [offset, named] : tensors) out.push_back(std::move(named));
  return out;
}

NamedTensors read_torch_dict(const std::string& bytes, const std::string& source) {
  check_zip_layout(bytes, source);
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    const std::string why = message_without_trace(e);
    // Python pickles a dict of one entry with SETITEM (0x73), which LibTorch 1.x cannot read.
    if (why.find("Unknown opcode for unpickling at 0x73") != std::string::npos) {
      throw TrainingError(fmt::format(
          "{}: this LibTorch's unpickler cannot read a dict of one entry (pickle opcode SETITEM); "
          "save two or more tensors in it, or save it as safetensors",
          source));
    }
    throw TrainingError(fmt::format("{}: not a file torch.save wrote ({})", source, why));
  }
  if (!value.isGenericDict()) {
    throw TrainingError(
        fmt::format("{}: holds a {}, not a dict of tensors", source, value.tagKind()));
  }
  NamedTensors out;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      throw TrainingError(fmt::format("{}: the dict maps {} to {}; expected names to tensors",
                                      source, entry.key().tagKind(), entry.value().tagKind()));
    }
    check_extent(entry.value().toTensor(), source, entry.key().toStringRef());
    out.emplace_back(entry.key().toStringRef(), entry.value().toTensor().to(torch::kCPU));
  }
  return out;
}

void check_extent(const torch::Tensor& t, const std::string& source, const std::string& name) {
  if (!t.defined() || t.layout() != torch::kStrided || !t.has_storage()) return;
  const auto outside = [&](const std::string& why) {
    throw TrainingError(fmt::format("{}: tensor '{}' (sizes {}, strides {}, offset {}) {}", source,
                                    name, t.sizes(), t.strides(), t.storage_offset(), why));
  };
  int64_t last = t.storage_offset();  // the last element the view reaches
  if (last < 0) outside("starts before its storage");
  bool empty = false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) < 0 || t.stride(d) < 0) outside("has a negative size or stride");
    empty = empty || t.size(d) == 0;
  }
  if (empty) return;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t span = 0;
    if (__builtin_mul_overflow(t.size(d) - 1, t.stride(d), &span) ||
        __builtin_add_overflow(last, span, &last)) {
      outside("reaches past any storage");
    }
  }
  const auto elements = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
  if (last >= elements) {
    outside(fmt::format("reaches element {} of a storage of {}", last, elements));
  }
}

}  // namespace crucible::checkpoint
