#pragma once

// Pieces the test trials share: a crash on request, small datasets, a reducer, a logging
// callback, and helpers for distributed checks.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <crucible/crucible.h>

namespace crucible::testing {

// The int64 scalar tensor `key` of a trial's state archive.
inline int64_t read_int64(torch::serialize::InputArchive& archive, const char* key) {
  torch::Tensor t;
  archive.read(key, t);
  return t.item<int64_t>();
}

// Crashes the process when environment variable CRUCIBLE_TEST_CRASH names `kind` and `at`, as
// KIND@AT or, for rank RANK alone, KIND@AT/RANK: kind "abort" calls std::abort(); any other writes
// at address 0x8, as to a field of a struct reached through a null pointer (SIGSEGV; a sanitizer's
// null-pointer check lets it through to fault). A process without the variable (a resume) goes on.
inline void crash_if_asked(const std::string& kind, int64_t at, int64_t rank) {
  const char* spec = std::getenv("CRUCIBLE_TEST_CRASH");
  if (spec == nullptr) return;
  const std::string s = spec;
  const size_t sign = s.find('@');
  const size_t slash = s.find('/');
  if (s.substr(0, sign) != kind || std::stoll(s.substr(sign + 1)) != at) return;
  if (slash != std::string::npos && std::stoll(s.substr(slash + 1)) != rank) return;
  if (kind == "abort") std::abort();
  volatile uintptr_t address = 8;  // volatile: the compiler cannot make it a trap
  *reinterpret_cast<volatile int*>(address) = 1;
}

// Dataset whose example i is {x = [i], y = [2 i]}: batch contents reveal the indices.
inline std::shared_ptr<TensorDataset> index_dataset(int64_t n) {
  auto x = torch::arange(n, torch::kFloat).unsqueeze(1);
  return std::make_shared<TensorDataset>(std::vector<torch::Tensor>{x, 2 * x});
}

// The records of `inner`, except that reading record `bad` (-1: none) throws "bad record <bad>",
// as a corrupt record would.
class BrokenRecordDataset : public Dataset {
 public:
  BrokenRecordDataset(std::shared_ptr<Dataset> inner, int64_t bad)
      : inner_(std::move(inner)), bad_(bad) {}
  int64_t size() const override { return inner_->size(); }
  Batch get(int64_t index) const override {
    check(index);
    return inner_->get(index);
  }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    for (const int64_t index : indices) check(index);
    return inner_->get_batch(indices);
  }

 private:
  void check(int64_t index) const {
    if (index == bad_) throw std::runtime_error("bad record " + std::to_string(index));
  }
  std::shared_ptr<Dataset> inner_;
  int64_t bad_;
};

// The exact median of the validation examples' x (their indices), which per-batch reduction
// cannot give. cross_slot_reduce appends "<median> <ranks>" to `file` when it is not empty.
class MedianReducer : public MetricReducer {
 public:
  explicit MedianReducer(std::string file) : file_(std::move(file)) {}
  void update(const torch::Tensor& x) {
    for (int64_t i = 0; i < x.size(0); ++i) values_.push_back(x[i].item<double>());
  }
  void reset() override { values_.clear(); }
  nlohmann::json per_slot_reduce() override { return values_; }
  double cross_slot_reduce(const std::vector<nlohmann::json>& per_slot) override {
    std::vector<double> all;
    for (const auto& slot : per_slot) {
      for (const auto& v : slot) all.push_back(v.get<double>());
    }
    std::sort(all.begin(), all.end());
    const size_t n = all.size();
    const double median = n == 0       ? std::nan("")
                          : n % 2 == 1 ? all[n / 2]
                                       : (all[n / 2 - 1] + all[n / 2]) / 2;
    if (!file_.empty())
      std::ofstream(file_, std::ios::app) << median << " " << per_slot.size() << "\n";
    return median;
  }

 private:
  std::string file_;
  std::vector<double> values_;
};

// A callback that logs every hook it sees (into events(), for in-process tests) and counts the
// validations it saw: state that checkpoints carry. Throws from the hook named `throw_in`. With
// `batches`, it logs the batch hooks too, a batch's end with its metrics' names and, when
// `optimizer` stepped in it (as ctx.optimizer_stepped says), "stepped"; a batch hook where
// ctx.current_train_batch() is not the batch's index logs it.
class EventLog : public Callback {
 public:
  explicit EventLog(std::string throw_in = "", bool batches = false,
                    const TrialContext* ctx = nullptr, Optimizer optimizer = nullptr)
      : throw_in_(std::move(throw_in)),
        batches_(batches),
        ctx_(ctx),
        optimizer_(std::move(optimizer)) {}

  void on_training_start() override { add("on_training_start", ""); }
  void on_training_epoch_start(int64_t e) override {
    add("on_training_epoch_start", std::to_string(e));
  }
  void on_training_batch_start(int64_t b) override {
    if (batches_) add("on_training_batch_start", batch(b));
  }
  void on_training_batch_end(int64_t b, const Metrics& metrics) override {
    if (!batches_) return;
    std::string detail = batch(b);
    for (const auto& [name, value] : metrics) detail += " " + name;
    if (ctx_ && ctx_->optimizer_stepped(optimizer_)) detail += " stepped";
    add("on_training_batch_end", detail);
  }
  void on_training_epoch_end(int64_t e) override {
    add("on_training_epoch_end", std::to_string(e));
  }
  void on_validation_start() override { add("on_validation_start", ""); }
  void on_validation_end(const crucible::MetricValues& metrics) override {
    ++validations_;
    std::string names;
    for (const auto& [k, v] : metrics) names += " " + k;
    add("on_validation_end", "#" + std::to_string(validations_) + names);
  }
  void on_checkpoint_end(const std::string& dir) override {
    add("on_checkpoint_end", dir.substr(dir.rfind('/') + 1));
  }
  void on_training_end() override { add("on_training_end", ""); }

  void save_state(torch::serialize::OutputArchive& archive) override {
    archive.write("validations", torch::tensor(validations_));
  }
  void load_state(torch::serialize::InputArchive& archive) override {
    validations_ = read_int64(archive, "validations");
  }

  // Every hook call of every EventLog in this process: "<hook> <detail>".
  static std::vector<std::string>& events() {
    static std::vector<std::string> all;
    return all;
  }

 private:
  void add(const std::string& hook, const std::string& detail) {
    events().push_back(detail.empty() ? hook : hook + " " + detail);
    if (hook == throw_in_) throw std::runtime_error("injected callback failure");
  }
  // `b`, and ctx.current_train_batch() after it when that differs.
  std::string batch(int64_t b) const {
    const int64_t current = ctx_ ? ctx_->current_train_batch() : b;
    return std::to_string(b) + (current == b ? "" : " current " + std::to_string(current));
  }
  std::string throw_in_;
  bool batches_;
  const TrialContext* ctx_;
  Optimizer optimizer_;
  int64_t validations_ = 0;
};

// Noisy regression data; get_batch adds random jitter drawn from batch_generator().
class JitteredDataset : public Dataset {
 public:
  JitteredDataset(int64_t n, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    x_ = torch::randn({n, 8}, gen, torch::kFloat);
    y_ = x_.sum(1, true) * 0.5 + 0.1 * torch::randn({n, 1}, gen, torch::kFloat);
  }
  int64_t size() const override { return x_.size(0); }
  Batch get(int64_t i) const override { return Batch{x_[i], y_[i]}; }
  // CRUCIBLE_TEST_CRASH=loader@N crashes the Nth call (from 0) of any JitteredDataset.
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    crash_if_asked("loader", calls_++, -1);
    auto idx = torch::tensor(indices, torch::kLong);
    auto x = x_.index_select(0, idx);
    return Batch{x + 0.05 * torch::randn(x.sizes(), batch_generator(), torch::kFloat),
                 y_.index_select(0, idx)};
  }

 private:
  torch::Tensor x_, y_;
  mutable std::atomic<int64_t> calls_{0};
};

// Shuffled batches of hyperparameter `records` JitteredDataset examples (seed 3), and the 64
// validation examples (seed 4) in batches of 16: BatchNormTrial's and EmaTrial's data and
// network.
inline DataLoader jittered_training_loader(const TrialContext& ctx) {
  return DataLoader(std::make_shared<JitteredDataset>(ctx.hparam<int64_t>("records"), 3),
                    DataLoaderOptions(ctx.per_slot_batch_size()).shuffle(true));
}
inline DataLoader jittered_validation_loader() {
  return DataLoader(std::make_shared<JitteredDataset>(64, 4), DataLoaderOptions(16));
}
// The values of `params`, flat, in one tensor of their own.
inline torch::Tensor flat_values(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : params) parts.push_back(p.detach().flatten().clone());
  return torch::cat(parts);
}
// How far `value` differs between the ranks: the largest difference of an element between two
// ranks, as a double scalar (0 in one process, and when every rank holds the same).
inline torch::Tensor rank_spread(const TrialContext& ctx, const torch::Tensor& value) {
  torch::Tensor high = value.detach().to(torch::kDouble).flatten().clone();
  torch::Tensor low = high.clone();
  ctx.distributed().allreduce(high, ReduceOp::kMax);
  ctx.distributed().allreduce(low, ReduceOp::kMin);
  return (high - low).abs().max();
}
// Their network: an MLP over JitteredDataset's 8 features with batch norm.
inline torch::nn::Sequential batch_norm_mlp() {
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16),
                               torch::nn::ReLU(), torch::nn::Linear(16, 1));
}

}  // namespace crucible::testing
