#include <crucible/datasets.h>

#include <zlib.h>

#include <algorithm>
#include <memory>
#include <system_error>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/tensor_files.h"
#include "util/file_system.h"
#include "util/parse.h"

namespace crucible {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

void read_exact(gzFile f, void* out, size_t n, const std::string& path) {
  const int got = gzread(f, out, static_cast<unsigned>(n));
  if (got < 0 || static_cast<size_t>(got) != n) {
    throw TrainingError(fmt::format("{}: truncated or corrupt IDX file", path));
  }
}

void require_file(const std::string& path, const std::string& what, const std::string& hint) {
  if (!util::is_regular_file(path)) {
    throw TrainingError(
        fmt::format("{} {} not found{}{}", what, path, hint.empty() ? "" : ". ", hint));
  }
}

// The bytes of `path`, which require_file has found.
std::string file_bytes(const std::string& path) {
  try {
    return util::read_file(path);
  } catch (const std::system_error& e) {
    throw TrainingError(fmt::format("{}: cannot be read: {}", path, e.code().message()));
  }
}

}  // namespace

torch::Tensor read_idx(const std::string& path, const std::string& missing_hint) {
  require_file(path, "IDX file", missing_hint);
  // gzread reads a file that is not gzip-compressed as it is.
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) throw TrainingError(fmt::format("{}: cannot open", path));
  unsigned char magic[4];
  read_exact(f.get(), magic, 4, path);
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4) {
    throw TrainingError(fmt::format("{}: not an IDX file of unsigned bytes", path));
  }
  std::vector<int64_t> shape;
  int64_t total = 1;
  int64_t nonzero = 1;  // the product of the sizes other than 0: a tensor's strides
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    read_exact(f.get(), b, 4, path);
    shape.push_back((int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3]);
    // Each size is below 2^32: past 2^40 elements the product is no dataset (and could overflow,
    // in the strides too when another size is 0).
    if (shape.back() > 0 && nonzero > (int64_t{1} << 40) / shape.back()) {
      throw TrainingError(fmt::format("{}: the shape {} is implausibly large", path,
                                      c10::str(c10::IntArrayRef(shape))));
    }
    nonzero *= std::max<int64_t>(shape.back(), 1);
    total *= shape.back();
  }
  // The header's size is not trusted for an allocation: the bytes are read in chunks, and the
  // tensor is made only once the file has held them all.
  std::string body;
  constexpr int64_t kChunk = int64_t{1} << 20;
  while (static_cast<int64_t>(body.size()) < total) {
    const size_t at = body.size();
    body.resize(at + static_cast<size_t>(std::min(kChunk, total - static_cast<int64_t>(at))));
    read_exact(f.get(), body.data() + at, body.size() - at, path);
  }
  auto out = torch::empty(shape, torch::kUInt8);
  std::copy(body.begin(), body.end(), reinterpret_cast<char*>(out.data_ptr<uint8_t>()));
  unsigned char extra;
  if (gzread(f.get(), &extra, 1) != 0) {
    throw TrainingError(fmt::format("{}: more bytes than its shape {} holds", path,
                                    c10::str(c10::IntArrayRef(shape))));
  }
  return out;
}

std::pair<torch::Tensor, torch::Tensor> read_mnist(const std::string& dir, const std::string& split,
                                                   const std::string& missing_hint) {
  const auto file = [&](const char* kind) {
    const std::string plain = util::join(dir, fmt::format("{}-{}-ubyte", split, kind));
    return util::exists(plain) ? plain : plain + ".gz";
  };
  const torch::Tensor images = read_idx(file("images-idx3"), missing_hint);
  const torch::Tensor labels = read_idx(file("labels-idx1"), missing_hint);
  if (images.dim() != 3 || labels.dim() != 1 || images.size(0) != labels.size(0)) {
    throw TrainingError(fmt::format("{}: the {} images {} and labels {} do not match", dir, split,
                                    c10::str(images.sizes()), c10::str(labels.sizes())));
  }
  return {images, labels.to(torch::kLong)};
}

std::pair<torch::Tensor, torch::Tensor> read_cifar10(const std::vector<std::string>& files) {
  constexpr int64_t kImage = 3 * 32 * 32, kRecord = 1 + kImage;
  std::vector<torch::Tensor> records;
  for (const std::string& path : files) {
    require_file(path, "CIFAR-10 file", "");
    const std::string bytes = file_bytes(path);
    if (bytes.empty() || bytes.size() % kRecord != 0) {
      throw TrainingError(
          fmt::format("{}: {} bytes is not a whole number of CIFAR-10 records ({} bytes each)",
                      path, bytes.size(), kRecord));
    }
    const int64_t n = static_cast<int64_t>(bytes.size()) / kRecord;
    auto t = torch::empty({n, kRecord}, torch::kUInt8);
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(t.data_ptr<uint8_t>()));
    records.push_back(t);
  }
  if (records.empty()) throw TrainingError("read_cifar10: no files given");
  const torch::Tensor all = torch::cat(records);
  return {all.slice(1, 1).reshape({-1, 3, 32, 32}).contiguous(), all.select(1, 0).to(torch::kLong)};
}

std::pair<torch::Tensor, torch::Tensor> read_cifar10(const std::string& dir, bool train) {
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 5; ++i)
      files.push_back(util::join(dir, fmt::format("data_batch_{}.bin", i)));
  } else {
    files.push_back(util::join(dir, "test_batch.bin"));
  }
  return read_cifar10(files);
}

std::map<std::string, torch::Tensor> read_tensor_file(const std::string& path) {
  require_file(path, "tensor file", "");
  const std::string bytes = file_bytes(path);
  const checkpoint::NamedTensors tensors = checkpoint::looks_like_safetensors(bytes)
                                               ? checkpoint::read_safetensors(bytes, path)
                                               : checkpoint::read_torch_dict(bytes, path);
  return {tensors.begin(), tensors.end()};
}

std::shared_ptr<TensorDataset> load_tensor_dataset(const std::string& path,
                                                   const std::vector<std::string>& names) {
  std::vector<std::string> files;
  if (util::is_directory(path)) {
    for (const std::string& name : util::list_directory(path)) {
      if (util::ends_with(name, ".pt") || util::ends_with(name, ".pth") ||
          util::ends_with(name, ".safetensors")) {
        files.push_back(util::join(path, name));
      }
    }
    if (files.empty()) {
      throw TrainingError(
          fmt::format("{}: no tensor file (*.pt, *.pth, *.safetensors) in the directory", path));
    }
  } else {
    files.push_back(path);
  }
  std::map<std::string, std::pair<torch::Tensor, std::string>> all;  // name -> tensor, file
  for (const std::string& file : files) {
    for (auto& [name, tensor] : read_tensor_file(file)) {
      const auto [it, fresh] = all.emplace(name, std::make_pair(tensor, file));
      if (!fresh) {
        throw TrainingError(
            fmt::format("tensor '{}' is in both {} and {}", name, it->second.second, file));
      }
    }
  }
  std::vector<torch::Tensor> chosen;
  for (const std::string& name : names) {
    const auto it = all.find(name);
    if (it == all.end()) {
      std::string present;
      for (const auto& [n, t] : all) present += (present.empty() ? "" : ", ") + n;
      throw TrainingError(fmt::format("{}: no tensor '{}'; it has: {}", path, name, present));
    }
    const torch::Tensor& t = it->second.first;
    if (t.dim() == 0) {
      throw TrainingError(
          fmt::format("{}: tensor '{}' is a scalar; a dataset takes rows of it", path, name));
    }
    if (!chosen.empty() && t.size(0) != chosen.front().size(0)) {
      throw TrainingError(fmt::format("{}: tensor '{}' has {} rows, '{}' has {}", path, name,
                                      t.size(0), names.front(), chosen.front().size(0)));
    }
    chosen.push_back(t);
  }
  return std::make_shared<TensorDataset>(std::move(chosen));
}

}  // namespace crucible
