#pragma once

// The workloads both sides of the overhead and DDP benchmarks run: an MLP on in-memory synthetic
// Fashion-MNIST-shaped data, SGD with momentum; and a bag of embeddings from a large table on
// synthetic lookups, plain SGD; and the hand-written loops' batches. One definition, so the C++
// sides cannot drift (ddp_pytorch.py builds the same shapes).

#include <chrono>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace bench {

constexpr int64_t kRecords = 16384;
constexpr int64_t kFeatures = 784;
constexpr int64_t kClasses = 10;

struct MLPImpl : torch::nn::Module {
  MLPImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kFeatures, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 128))),
        out(register_module("out", torch::nn::Linear(128, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) { return out(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1, fc2, out;
};
TORCH_MODULE(MLP);

inline std::pair<torch::Tensor, torch::Tensor> make_data(uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randn({kRecords, kFeatures}, gen, torch::kFloat),
          torch::randint(0, kClasses, {kRecords}, gen, torch::kLong)};
}

inline torch::optim::SGD make_optimizer(MLP& model) {
  return torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
}

// The batches of the hand-written loops: batch `b` (counted across epochs) holds `batch_size`
// records of `data` (inputs, labels), taken in the order of a randperm that the global generator
// draws whenever b starts an epoch (whole batches only), index_select-ed on the CPU and copied to
// `device` (blocking, from pageable memory).
class IndexSelectBatches {
 public:
  IndexSelectBatches(std::pair<torch::Tensor, torch::Tensor> data, int64_t batch_size,
                     torch::Device device)
      : data_(std::move(data)),
        batch_size_(batch_size),
        per_epoch_(data_.first.size(0) / batch_size),
        device_(device) {}
  // Batch `b`; an epoch's batches come from the permutation drawn at its first.
  std::pair<torch::Tensor, torch::Tensor> get(int64_t b) {
    const int64_t i = b % per_epoch_;
    if (i == 0) perm_ = torch::randperm(data_.first.size(0), torch::kLong);
    const auto idx = perm_.slice(0, i * batch_size_, (i + 1) * batch_size_);
    return {data_.first.index_select(0, idx).to(device_),
            data_.second.index_select(0, idx).to(device_)};
  }

 private:
  std::pair<torch::Tensor, torch::Tensor> data_;
  int64_t batch_size_;
  int64_t per_epoch_;
  torch::Device device_;
  torch::Tensor perm_;
};

// The embedding workload: each record is kLookups rows of a kTableRows x kEmbeddingDim table
// (64 MiB of floats), averaged (EmbeddingBag, mean), then a linear layer to kClasses. With
// `sparse`, backward gives the table a sparse gradient (the rows looked up); without, a dense one
// of the whole table.
constexpr int64_t kTableRows = 262144;
constexpr int64_t kEmbeddingDim = 64;
constexpr int64_t kLookups = 16;

struct EmbeddingNetImpl : torch::nn::Module {
  explicit EmbeddingNetImpl(bool sparse)
      : bag(register_module(
            "bag", torch::nn::EmbeddingBag(torch::nn::EmbeddingBagOptions(kTableRows, kEmbeddingDim)
                                               .mode(torch::kMean)
                                               .sparse(sparse)))),
        out(register_module("out", torch::nn::Linear(kEmbeddingDim, kClasses))) {}
  torch::Tensor forward(const torch::Tensor& rows) { return out(bag(rows)); }
  torch::nn::EmbeddingBag bag;
  torch::nn::Linear out;
};
TORCH_MODULE(EmbeddingNet);

// kRecords records of kLookups row indices each, uniform over the table, and their labels.
inline std::pair<torch::Tensor, torch::Tensor> make_lookup_data(uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randint(0, kTableRows, {kRecords, kLookups}, gen, torch::kLong),
          torch::randint(0, kClasses, {kRecords}, gen, torch::kLong)};
}

// Records the start time of every step; step i's duration is start[i+1] - start[i].
class StepClock {
 public:
  void tick() { starts_.push_back(std::chrono::steady_clock::now()); }
  // Step durations in seconds, skipping the first `warmup`.
  std::vector<double> durations(size_t warmup) const {
    std::vector<double> out;
    for (size_t i = warmup + 1; i < starts_.size(); ++i) {
      out.push_back(std::chrono::duration<double>(starts_[i] - starts_[i - 1]).count());
    }
    return out;
  }
  void write(const std::string& path, size_t warmup) const {
    std::ofstream out(path);
    for (double d : durations(warmup)) out << d << '\n';
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> starts_;
};

}  // namespace bench
