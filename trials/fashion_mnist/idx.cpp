#include "idx.h"

#include <unistd.h>
#include <zlib.h>

#include <memory>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace fashion_mnist {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

void read_exact(gzFile f, void* out, size_t n, const std::string& path) {
  const int got = gzread(f, out, static_cast<unsigned>(n));
  if (got < 0 || static_cast<size_t>(got) != n) {
    throw crucible::TrainingError(fmt::format("{}: truncated or corrupt IDX file", path));
  }
}

}  // namespace

torch::Tensor read_idx_gz(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) {
    throw crucible::TrainingError(fmt::format(
        "Fashion-MNIST file {} not found. Install the Debian package dataset-fashion-mnist "
        "(apt-get install dataset-fashion-mnist, which puts it in "
        "/usr/share/datasets/fashion-mnist) or point data.path at a directory holding it",
        path));
  }
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) throw crucible::TrainingError(fmt::format("{}: cannot open", path));
  unsigned char magic[4];
  read_exact(f.get(), magic, 4, path);
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4) {
    throw crucible::TrainingError(fmt::format("{}: not an IDX file of unsigned bytes", path));
  }
  std::vector<int64_t> shape;
  int64_t total = 1;
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    read_exact(f.get(), b, 4, path);
    shape.push_back((int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3]);
    total *= shape.back();
  }
  auto out = torch::empty(shape, torch::kUInt8);
  read_exact(f.get(), out.data_ptr<uint8_t>(), static_cast<size_t>(total), path);
  return out;
}

std::pair<torch::Tensor, torch::Tensor> load_split(const std::string& dir,
                                                   const std::string& split) {
  auto images = read_idx_gz(fmt::format("{}/{}-images-idx3-ubyte.gz", dir, split));
  auto labels = read_idx_gz(fmt::format("{}/{}-labels-idx1-ubyte.gz", dir, split));
  if (images.dim() != 3 || labels.dim() != 1 || images.size(0) != labels.size(0)) {
    throw crucible::TrainingError(
        fmt::format("{}: {} images and labels do not match in shape", dir, split));
  }
  constexpr double kMean = 0.2860, kStd = 0.3530;  // of the training images, in [0, 1]
  auto x = ((images.to(torch::kFloat) / 255.0 - kMean) / kStd).unsqueeze(1).contiguous();
  return {x, labels.to(torch::kLong)};
}

}  // namespace fashion_mnist
