#pragma once

// Small trials the tests drive, in process (TrialFactory::of) and as a plugin library
// (libcrucible_test_trials.so, registered in test_trials.cpp).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
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

// Records what the fit loop asks of it. Hyperparameters: records, validation_records,
// validation_batch_size, and optional fail_at / hang_at / nan_at / stop_at / sigterm_at (batch
// indices, -1 = never: throw, sleep forever, report a NaN loss, call ctx.set_stop_requested,
// send the process SIGTERM, after stop_at's request when both are at one batch), nan_grad_at and
// nan_grad_from (a NaN loss before backward on that batch, or on every batch from it),
// inf_grad_at (a finite loss whose weight gradient is NaN on that batch),
// fail_rank (the only rank that fails, hangs or requests a stop; default every rank), and
// bad_record / bad_validation_record (a training or validation record whose read throws).
class RecordingTrial : public Trial {
 public:
  struct Call {
    int64_t batch_idx, epoch_idx;
    bool epoch_start, epoch_end;
    std::vector<int64_t> indices;
    double lr;               // the learning rate this batch trained with
    int64_t recorded_batch;  // ctx.current_train_batch() in train_batch
  };

  // Optional hyperparameter step_mode: every_batch | every_optimizer_step | every_epoch | manual
  // wraps a LambdaLR(lr = 0.001 * (1 / (1 + steps))); manual steps it after every batch whose
  // batch_idx + 1 is a multiple of hyperparameter manual_every (default 4). With hyperparameter
  // scheduler: torch_step it is LibTorch's own torch::optim::StepLR(step_size 3, gamma 0.5).
  explicit RecordingTrial(TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(torch::nn::Linear(1, 1))),
        opt_(ctx.wrap_optimizer(torch::optim::SGD(model_->parameters(), 0.001))) {
    if (!ctx.hparams().contains("step_mode")) return;
    const auto name = ctx.hparam<std::string>("step_mode");
    const StepMode mode = name == "every_batch"            ? StepMode::kEveryBatch
                          : name == "every_optimizer_step" ? StepMode::kEveryOptimizerStep
                          : name == "every_epoch"          ? StepMode::kEveryEpoch
                                                           : StepMode::kManual;
    if (ctx.hparam("scheduler", "lambda") == "torch_step") {
      torch_scheduler_ = ctx.wrap_lr_scheduler(torch::optim::StepLR(*opt_, 3, 0.5), mode);
    } else {
      scheduler_ = ctx.wrap_lr_scheduler(
          lr::LambdaLR(opt_, [](int64_t s) { return 1.0 / static_cast<double>(1 + s); }), mode);
    }
  }

  DataLoader build_training_data_loader() override {
    return DataLoader(
        std::make_shared<BrokenRecordDataset>(index_dataset(ctx_.hparam<int64_t>("records")),
                                              ctx_.hparam<int64_t>("bad_record", -1)),
        DataLoaderOptions(ctx_.per_slot_batch_size()).shuffle(true));
  }
  // Counted in validation_loaders_built(); hyperparameters validation_workers (default 0) and
  // validation_shuffle (default false).
  DataLoader build_validation_data_loader() override {
    ++validation_loaders_built();
    return DataLoader(std::make_shared<BrokenRecordDataset>(
                          index_dataset(ctx_.hparam<int64_t>("validation_records")),
                          ctx_.hparam<int64_t>("bad_validation_record", -1)),
                      DataLoaderOptions(ctx_.hparam<int64_t>("validation_batch_size"))
                          .num_workers(ctx_.hparam<int64_t>("validation_workers", 0))
                          .shuffle(ctx_.hparam<bool>("validation_shuffle", false)));
  }
  static int64_t& validation_loaders_built() {
    static int64_t count = 0;
    return count;
  }

  Metrics train_batch(Batch& batch, int64_t epoch_idx, int64_t batch_idx) override {
    auto x = batch[0].tensor();
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < x.size(0); ++i) idx.push_back(x[i][0].item<int64_t>());
    calls().push_back({batch_idx, epoch_idx, ctx_.is_epoch_start(), ctx_.is_epoch_end(), idx,
                       opt_->param_groups()[0].options().get_lr(), ctx_.current_train_batch()});
    ++trained_;
    if ((scheduler_ || torch_scheduler_) && ctx_.hparam<std::string>("step_mode") == "manual" &&
        (batch_idx + 1) % ctx_.hparam<int64_t>("manual_every", 4) == 0) {
      scheduler_ ? scheduler_->step() : torch_scheduler_->step();
    }
    const bool failing_rank =
        ctx_.hparam<int64_t>("fail_rank", ctx_.distributed().rank()) == ctx_.distributed().rank();
    if (batch_idx == ctx_.hparam<int64_t>("fail_at", -1) && failing_rank) {
      throw std::runtime_error("injected failure");
    }
    while (batch_idx == ctx_.hparam<int64_t>("hang_at", -1) && failing_rank) {
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
    const double scale = static_cast<double>(ctx_.hparam<int64_t>("records"));
    auto loss = torch::mse_loss(model_->forward(x / scale), batch[1].tensor() / scale);
    const int64_t nan_from = ctx_.hparam<int64_t>("nan_grad_from", -1);
    if (batch_idx == ctx_.hparam<int64_t>("nan_grad_at", -1) ||
        (nan_from >= 0 && batch_idx >= nan_from)) {
      loss = loss * std::nan("");
    }
    // A term of value 0 whose gradient is not finite (sqrt's at 0): the loss stays finite.
    if (batch_idx == ctx_.hparam<int64_t>("inf_grad_at", -1)) {
      loss = loss + torch::sqrt(model_->weight * 0).sum();
    }
    ctx_.backward(loss);
    if (batch_idx == ctx_.hparam<int64_t>("stop_at", -1) && failing_rank) {
      ctx_.set_stop_requested("stop_at reached");
    }
    if (batch_idx == ctx_.hparam<int64_t>("sigterm_at", -1)) ::raise(SIGTERM);
    ctx_.step_optimizer(opt_);
    if (batch_idx == ctx_.hparam<int64_t>("nan_at", -1)) loss = loss * std::nan("");
    return {{"loss", loss}};
  }

  // x is the example index, so the reduced values are known in closed form.
  Metrics evaluate_batch(Batch& batch, int64_t) override {
    evaluated_at().push_back({ctx_.current_train_batch(), ctx_.current_train_epoch(),
                              ctx_.is_epoch_start(), ctx_.is_epoch_end()});
    const torch::Tensor& x = batch[0];
    Metrics m = {{"avg_x", x.mean()},
                 {"sum_len", x.size(0)},  // a plain number
                 {"max_x", x.max()},
                 {"min_x", x.min()}};
    // Optional hyperparameter also_report: one more metric's name (its value 0, or NaN while
    // fewer batches than hyperparameter also_report_nan_until were trained, or infinity while
    // fewer than also_report_inf_until were).
    if (ctx_.hparams().contains("also_report")) {
      const int64_t trained = ctx_.current_train_batch();
      m[ctx_.hparam<std::string>("also_report")] =
          trained < ctx_.hparam<int64_t>("also_report_nan_until", 0) ? std::nan("")
          : trained < ctx_.hparam<int64_t>("also_report_inf_until", 0)
              ? std::numeric_limits<double>::infinity()
              : 0.0;
    }
    return m;
  }
  EvaluationReducer evaluation_reducer() override {
    return EvaluationReducer(
        {{"sum_len", ReduceOp::kSum}, {"max_x", ReduceOp::kMax}, {"min_x", ReduceOp::kMin}});
  }
  // The model's output for x scaled as in training.
  torch::Tensor predict_batch(Batch& batch, int64_t) override {
    return model_->forward(batch[0].tensor() /
                           static_cast<double>(ctx_.hparam<int64_t>("records")));
  }

  // Counts batches this trial object trained, plus what a restored checkpoint said it had.
  void save_state(torch::serialize::OutputArchive& archive) override {
    archive.write("trained", torch::tensor(trained_));
  }
  void load_state(torch::serialize::InputArchive& archive) override {
    trained_ = read_int64(archive, "trained");
    restored_trained() = trained_;
  }
  static int64_t& restored_trained() {
    static int64_t value = -1;
    return value;
  }

  // The training position each evaluate_batch call of this process saw, in order.
  struct Position {
    int64_t batch, epoch;  // current_train_batch(), current_train_epoch()
    bool epoch_start, epoch_end;
    bool operator==(const Position& o) const {
      return std::tie(batch, epoch, epoch_start, epoch_end) ==
             std::tie(o.batch, o.epoch, o.epoch_start, o.epoch_end);
    }
    friend std::ostream& operator<<(std::ostream& out, const Position& p) {
      return out << "{batch " << p.batch << ", epoch " << p.epoch << ", start " << p.epoch_start
                 << ", end " << p.epoch_end << "}";
    }
  };
  static std::vector<Position>& evaluated_at() {
    static std::vector<Position> all;
    return all;
  }

  // Every train_batch call of every RecordingTrial in this process, in order.
  static std::vector<Call>& calls() {
    static std::vector<Call> all;
    return all;
  }

 protected:
  TrialContext& context() const { return ctx_; }
  const Optimizer& optimizer() const { return opt_; }

 private:
  TrialContext& ctx_;
  torch::nn::Linear model_;
  Optimizer opt_;
  std::shared_ptr<lr::LambdaLR> scheduler_;
  std::shared_ptr<torch::optim::StepLR> torch_scheduler_;
  int64_t trained_ = 0;
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

// Everything exact resume must get right: dropout (the CPU generator), random augmentation in
// loader worker threads, Adam state, an epoch LR schedule and a per-batch one, its own state and
// a callback's state.
// Hyperparameters: records, hidden, workers, sleep_ms (per batch, to give tests time to act); with
// sparse: true, also a 16 x 1 Embedding of sparse gradients, indexed by the first feature, added
// to the output and trained by a SparseAdam of its own.
// CRUCIBLE_TEST_CRASH=segv@N or abort@N (crash_if_asked) crashes train_batch at batch N,
// evaluate@N evaluate_batch at validation batch N, predict@N predict_batch at batch N, and
// predict_loader@0 build_predict_data_loader.
class ResumableTrial : public Trial {
 public:
  explicit ResumableTrial(TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(torch::nn::Sequential(
            torch::nn::Linear(8, ctx.hparam<int64_t>("hidden")), torch::nn::ReLU(),
            torch::nn::Dropout(0.2), torch::nn::Linear(ctx.hparam<int64_t>("hidden"), 1)))),
        opt_(ctx.wrap_optimizer(torch::optim::Adam(model_->parameters(), 0.01))),
        head_opt_(ctx.wrap_optimizer(torch::optim::SGD(model_->parameters(), 0.0))) {
    // With hyperparameter warmup (steps), a warm-up into cosine annealing per optimizer step.
    if (ctx.hparams().contains("warmup")) {
      ctx.wrap_lr_scheduler(
          lr::LinearWarmup(lr::CosineAnnealingLR(opt_, 200), ctx.hparam<int64_t>("warmup"), 0.1),
          StepMode::kEveryOptimizerStep);
    } else {
      ctx.wrap_lr_scheduler(lr::StepLR(opt_, 1, 0.8), StepMode::kEveryEpoch);
    }
    ctx.wrap_lr_scheduler(lr::LambdaLR(head_opt_, [](int64_t s) { return 1.0 + s; }),
                          StepMode::kEveryBatch);
    if (ctx.hparams().value("sparse", false)) {
      embed_ =
          ctx.wrap_model(torch::nn::Embedding(torch::nn::EmbeddingOptions(16, 1).sparse(true)));
      embed_opt_ = ctx.wrap_optimizer(optim::SparseAdam(embed_->parameters(), 0.05));
    }
  }

  DataLoader build_training_data_loader() override {
    return DataLoader(std::make_shared<JitteredDataset>(ctx_.hparam<int64_t>("records"), 1),
                      DataLoaderOptions(ctx_.per_slot_batch_size())
                          .shuffle(true)
                          .num_workers(ctx_.hparam<int64_t>("workers")));
  }
  DataLoader build_validation_data_loader() override {
    return DataLoader(std::make_shared<JitteredDataset>(64, 2), DataLoaderOptions(16));
  }

  Metrics train_batch(Batch& batch, int64_t, int64_t batch_idx) override {
    crash_if_asked("segv", batch_idx, ctx_.distributed().rank());
    crash_if_asked("abort", batch_idx, ctx_.distributed().rank());
    const auto sleep_ms = ctx_.hparam<int64_t>("sleep_ms");
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    auto loss = torch::mse_loss(forward(batch[0].tensor()), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(opt_);
    ctx_.step_optimizer(head_opt_);
    if (embed_) ctx_.step_optimizer(embed_opt_);
    ++seen_;
    return {{"loss", loss}, {"seen", seen_}};  // a plain number
  }
  Metrics evaluate_batch(Batch& batch, int64_t batch_idx) override {
    crash_if_asked("evaluate", batch_idx, ctx_.distributed().rank());
    return {{"loss", torch::mse_loss(forward(batch[0].tensor()), batch[1])}};
  }
  DataLoader build_predict_data_loader() override {
    crash_if_asked("predict_loader", 0, ctx_.distributed().rank());
    return build_validation_data_loader();
  }
  torch::Tensor predict_batch(Batch& batch, int64_t batch_idx) override {
    crash_if_asked("predict", batch_idx, ctx_.distributed().rank());
    return forward(batch[0].tensor());
  }

  // Its state (validations seen) must survive a kill too.
  Callbacks build_callbacks() override { return {{"log", std::make_shared<EventLog>()}}; }

  // With hyperparameter save_delay_ms, a slow save: checkpoints spend that long being written
  // (after the model and optimizer files), for tests that interrupt one.
  void save_state(torch::serialize::OutputArchive& archive) override {
    if (ctx_.hparams().contains("save_delay_ms")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ctx_.hparam<int64_t>("save_delay_ms")));
    }
    archive.write("seen", torch::tensor(seen_));
  }
  void load_state(torch::serialize::InputArchive& archive) override {
    seen_ = read_int64(archive, "seen");
  }

 private:
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor out = model_->forward(x);
    if (!embed_) return out;
    const auto index = torch::remainder((x.select(1, 0) * 4).floor(), 16).to(torch::kLong);
    return out + embed_->forward(index);
  }

  TrialContext& ctx_;
  torch::nn::Sequential model_;
  Optimizer opt_;
  Optimizer head_opt_;
  torch::nn::Embedding embed_{nullptr};  // with hyperparameter sparse
  Optimizer embed_opt_;
  int64_t seen_ = 0;
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

// An MLP with batch norm and one optimizer, for distributed runs: its validation reports the sum
// of the running means reduced with MAX and with MIN over the ranks, equal when every rank holds
// the same buffers; its training, how far the ranks' gradients differ after ctx.backward.
// Hyperparameters: records.
class BatchNormTrial : public Trial {
 public:
  explicit BatchNormTrial(TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(batch_norm_mlp())),
        opt_(ctx.wrap_optimizer(torch::optim::SGD(model_->parameters(), 0.05))) {}

  DataLoader build_training_data_loader() override { return jittered_training_loader(ctx_); }
  DataLoader build_validation_data_loader() override { return jittered_validation_loader(); }
  // grad_spread: how far the ranks' gradients differ when ctx.backward returns (0: averaged).
  Metrics train_batch(Batch& batch, int64_t, int64_t) override {
    auto loss = torch::mse_loss(model_->forward(batch[0].tensor()), batch[1]);
    ctx_.backward(loss);
    torch::Tensor sum = torch::zeros({1}, torch::dtype(torch::kDouble).device(ctx_.device()));
    for (const auto& p : model_->parameters()) sum += p.grad().abs().sum().to(torch::kDouble);
    const torch::Tensor spread = rank_spread(ctx_, sum);
    ctx_.step_optimizer(opt_);
    return {{"loss", loss}, {"grad_spread", spread}};
  }
  Metrics evaluate_batch(Batch& batch, int64_t) override {
    const torch::Tensor stats = model_[1]->as<torch::nn::BatchNorm1d>()->running_mean.sum();
    return {{"loss", torch::mse_loss(model_->forward(batch[0].tensor()), batch[1])},
            {"stats_max", stats},
            {"stats_min", stats}};
  }
  EvaluationReducer evaluation_reducer() override {
    return EvaluationReducer({{"stats_max", ReduceOp::kMax}, {"stats_min", ReduceOp::kMin}});
  }

 private:
  TrialContext& ctx_;
  torch::nn::Sequential model_;
  Optimizer opt_;
};

// BatchNormTrial's network trained by Adam, and a second instance of it that a ModelEma named
// "ema" keeps as the moving average of the first (decay: hyperparameter ema_decay, 0.9 by
// default). evaluate_batch measures the average ("loss") and the trained network ("model_loss").
class EmaTrial : public Trial {
 public:
  explicit EmaTrial(TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(batch_norm_mlp())),
        average_(ctx.wrap_model(batch_norm_mlp())),
        opt_(ctx.wrap_optimizer(torch::optim::Adam(model_->parameters(), 0.01))) {}

  DataLoader build_training_data_loader() override { return jittered_training_loader(ctx_); }
  DataLoader build_validation_data_loader() override { return jittered_validation_loader(); }
  Metrics train_batch(Batch& batch, int64_t, int64_t) override {
    auto loss = torch::mse_loss(model_->forward(batch[0].tensor()), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(opt_);
    return {{"loss", loss}};
  }
  Metrics evaluate_batch(Batch& batch, int64_t) override {
    return {{"loss", torch::mse_loss(average_->forward(batch[0].tensor()), batch[1])},
            {"model_loss", torch::mse_loss(model_->forward(batch[0].tensor()), batch[1])}};
  }
  Callbacks build_callbacks() override {
    return {{"ema",
             std::make_shared<ModelEma>(ctx_, model_.ptr(), average_.ptr(), opt_,
                                        ModelEmaOptions().decay(ctx_.hparam("ema_decay", 0.9)))}};
  }

 private:
  TrialContext& ctx_;
  torch::nn::Sequential model_;
  torch::nn::Sequential average_;
  Optimizer opt_;
};

// A linear model and an `idle` linear layer added to its output only in the first
// accumulation window (batch_idx < aggregation_frequency), both trained by one SGD with momentum
// and weight decay, either of which would move `idle` on any later step that gave it a gradient,
// even a zero one. Training reports idle_step, how far `idle` moved on that window's last batch,
// and idle_later, how far it moved on any later batch (0 when it is skipped). Validation reports
// the model's loss and `idle`'s weights and bias (idle_sum). Hyperparameters: records.
class IdleLayerTrial : public Trial {
 public:
  explicit IdleLayerTrial(TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(torch::nn::Linear(8, 1))),
        idle_(ctx.wrap_model(torch::nn::Linear(8, 1))),
        opt_(ctx.wrap_optimizer(torch::optim::SGD(
            parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.1)))) {}

  DataLoader build_training_data_loader() override { return jittered_training_loader(ctx_); }
  DataLoader build_validation_data_loader() override { return jittered_validation_loader(); }
  Metrics train_batch(Batch& batch, int64_t, int64_t batch_idx) override {
    const int64_t window = ctx_.experiment_config().optimizations.aggregation_frequency;
    const bool use_idle = batch_idx < window;
    const torch::Tensor before = idle_sum().detach().clone();
    torch::Tensor out = model_->forward(batch[0].tensor());
    if (use_idle) out = out + idle_->forward(batch[0].tensor());
    auto loss = torch::mse_loss(out, batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(opt_);
    const torch::Tensor moved = (idle_sum().detach() - before).abs();
    const bool first_step = batch_idx == window - 1;
    return {{"loss", loss},
            {"idle_step", first_step ? moved : torch::zeros_like(moved)},
            {"idle_later", use_idle ? torch::zeros_like(moved) : moved}};
  }
  Metrics evaluate_batch(Batch& batch, int64_t) override {
    return {{"loss", torch::mse_loss(model_->forward(batch[0].tensor()), batch[1])},
            {"idle_sum", idle_sum()}};
  }

 private:
  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> all = model_->parameters();
    for (const auto& p : idle_->parameters()) all.push_back(p);
    return all;
  }
  torch::Tensor idle_sum() const { return idle_->weight.sum() + idle_->bias.sum(); }
  TrialContext& ctx_;
  torch::nn::Linear model_;
  torch::nn::Linear idle_;
  Optimizer opt_;
};

// A two-layer MLP trained by one SGD with momentum and weight decay (either would move a layer
// stepped with a zero gradient), whose first layer is frozen (requires_grad false) until batch
// hyperparameter unfreeze_at and whose second is frozen from batch freeze_at on. Training
// reports, per layer, how far the ranks' copies differ after the batch (first_spread,
// second_spread: 0 when its gradients are averaged) and how far the batch moved it (first_moved,
// second_moved). Hyperparameters: records, unfreeze_at, freeze_at; optional freeze_after_backward
// (the second layer's requires_grad is set after backward instead of before it) and grow_at (the
// optimizer starts with the second layer alone and gets the first as a parameter group added at
// that batch, before backward, its gradient cleared then; the first layer then requires gradients
// from the start, so the change is to the optimizer's parameters alone).
class FreezeTrial : public Trial {
 public:
  explicit FreezeTrial(TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                                                    torch::nn::Linear(16, 1)))),
        grow_at_(ctx.hparam<int64_t>("grow_at", -1)),
        opt_(ctx.wrap_optimizer(
            torch::optim::SGD(grow_at_ >= 0 ? model_[2]->parameters() : model_->parameters(),
                              torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.1)))) {
    for (auto& p : model_[0]->parameters()) p.set_requires_grad(grow_at_ >= 0);
  }

  DataLoader build_training_data_loader() override { return jittered_training_loader(ctx_); }
  DataLoader build_validation_data_loader() override { return jittered_validation_loader(); }
  Metrics train_batch(Batch& batch, int64_t, int64_t batch_idx) override {
    // Set at every batch, so that a resumed run has them as the uninterrupted one.
    if (grow_at_ < 0) {
      for (auto& p : model_[0]->parameters()) {
        p.set_requires_grad(batch_idx >= ctx_.hparam<int64_t>("unfreeze_at"));
      }
    } else if (batch_idx == grow_at_) {
      for (auto& p : model_[0]->parameters()) p.mutable_grad() = torch::Tensor();
      opt_->add_param_group(torch::optim::OptimizerParamGroup(model_[0]->parameters()));
    }
    const auto freeze_second = [&] {
      for (auto& p : model_[2]->parameters()) {
        p.set_requires_grad(batch_idx < ctx_.hparam<int64_t>("freeze_at"));
      }
    };
    const bool after_backward = ctx_.hparam<bool>("freeze_after_backward", false);
    if (!after_backward) freeze_second();
    const torch::Tensor first_before = layer(0), second_before = layer(2);
    auto loss = torch::mse_loss(model_->forward(batch[0].tensor()), batch[1]);
    ctx_.backward(loss);
    if (after_backward) freeze_second();
    ctx_.step_optimizer(opt_);
    const torch::Tensor first = layer(0), second = layer(2);
    return {{"loss", loss},
            {"first_spread", rank_spread(ctx_, first)},
            {"first_moved", (first - first_before).abs().sum()},
            {"second_spread", rank_spread(ctx_, second)},
            {"second_moved", (second - second_before).abs().sum()}};
  }
  Metrics evaluate_batch(Batch& batch, int64_t) override {
    return {{"loss", torch::mse_loss(model_->forward(batch[0].tensor()), batch[1])}};
  }

 private:
  // Layer `index`'s weights and bias, flat.
  torch::Tensor layer(size_t index) { return flat_values(model_[index]->parameters()); }
  TrialContext& ctx_;
  torch::nn::Sequential model_;
  int64_t grow_at_;
  Optimizer opt_;
};

// A two-layer MLP with one SGD optimizer (rate 1, no momentum) per layer, for gradient clipping
// across ranks: each step moves a layer's weights by exactly its clipped gradient. Reports the
// norm of each layer's update and how far the ranks' updates differ (0: the same everywhere).
// Hyperparameters: records.
class ClippingTrial : public Trial {
 public:
  explicit ClippingTrial(TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                                                    torch::nn::Linear(16, 1)))),
        first_(ctx.wrap_optimizer(torch::optim::SGD(model_[0]->parameters(), 1.0))),
        second_(ctx.wrap_optimizer(torch::optim::SGD(model_[2]->parameters(), 1.0))) {}

  DataLoader build_training_data_loader() override {
    return DataLoader(std::make_shared<JitteredDataset>(ctx_.hparam<int64_t>("records"), 5),
                      DataLoaderOptions(ctx_.per_slot_batch_size()).shuffle(true));
  }
  DataLoader build_validation_data_loader() override {
    return DataLoader(std::make_shared<JitteredDataset>(64, 6), DataLoaderOptions(16));
  }
  Metrics train_batch(Batch& batch, int64_t, int64_t) override {
    const auto before = flat_values(model_[0]->parameters());
    const auto before_second = flat_values(model_[2]->parameters());
    auto loss = torch::mse_loss(model_->forward(batch[0].tensor()), batch[1]) * 100;
    ctx_.backward(loss);
    ctx_.step_optimizer(first_);
    ctx_.step_optimizer(second_);
    const auto update = flat_values(model_[0]->parameters()) - before;
    const auto update_second = flat_values(model_[2]->parameters()) - before_second;
    return {{"loss", loss},
            {"update_norm", update.norm()},
            {"update_norm_second", update_second.norm()},
            {"update_spread", rank_spread(ctx_, torch::cat({update, update_second}))}};
  }
  Metrics evaluate_batch(Batch& batch, int64_t) override {
    return {{"loss", torch::mse_loss(model_->forward(batch[0].tensor()), batch[1])}};
  }

 private:
  TrialContext& ctx_;
  torch::nn::Sequential model_;
  Optimizer first_;
  Optimizer second_;
};

// RecordingTrial with an EventLog named "log" (or hyperparameter callback_name); hyperparameter
// throw_in is passed to it, and with hyperparameter log_batches: true it logs the batch hooks and
// the batches that stepped the trial's optimizer.
class CallbackTrial : public RecordingTrial {
 public:
  using RecordingTrial::RecordingTrial;
  Callbacks build_callbacks() override {
    const auto& hp = context().hparams();
    return {{hp.value("callback_name", "log"),
             std::make_shared<EventLog>(hp.value("throw_in", ""), hp.value("log_batches", false),
                                        &context(), optimizer())}};
  }
};

// RecordingTrial with a MedianReducer as validation metric median_x (or hyperparameter
// reducer_name); with hyperparameter reducer_dir, each rank's reducer logs to
// <reducer_dir>/rank<R>.
class ReducerTrial : public RecordingTrial {
 public:
  explicit ReducerTrial(TrialContext& ctx)
      : RecordingTrial(ctx),
        median_(ctx.wrap_reducer(
            ctx.hparams().value("reducer_name", "median_x"),
            std::make_shared<MedianReducer>(ctx.hparams().contains("reducer_dir")
                                                ? ctx.hparam<std::string>("reducer_dir") + "/rank" +
                                                      std::to_string(ctx.distributed().rank())
                                                : ""))) {}
  Metrics evaluate_batch(Batch& batch, int64_t batch_idx) override {
    median_->update(batch[0].tensor());
    return RecordingTrial::evaluate_batch(batch, batch_idx);
  }

 private:
  std::shared_ptr<MedianReducer> median_;
};

// Overrides both evaluation methods: must be refused at start-up.
class BothEvalTrial : public RecordingTrial {
 public:
  using RecordingTrial::RecordingTrial;
  Metrics evaluate_full_dataset(DataLoader&) override { return {}; }
};

// Overrides neither evaluation method: must be refused at start-up.
class NeitherEvalTrial : public Trial {
 public:
  explicit NeitherEvalTrial(TrialContext&) {}
  DataLoader build_training_data_loader() override { return {}; }
  DataLoader build_validation_data_loader() override { return {}; }
  Metrics train_batch(Batch&, int64_t, int64_t) override { return {}; }
};

// Evaluates with evaluate_full_dataset, which metrics.jsonl reports as validation_records (the
// examples it saw), validation_sum_x (the sum of their indices) and validation_autocast (1 when a
// float layer's output was bf16 on every batch, else 0). predict_batch gives that layer's output.
// Hyperparameters as RecordingTrial's: records, validation_records, validation_batch_size.
class FullDatasetTrial : public Trial {
 public:
  explicit FullDatasetTrial(TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(torch::nn::Linear(1, 1))),
        opt_(ctx.wrap_optimizer(torch::optim::SGD(model_->parameters(), 0.001))) {}
  DataLoader build_training_data_loader() override {
    return DataLoader(index_dataset(ctx_.hparam<int64_t>("records")),
                      DataLoaderOptions(ctx_.per_slot_batch_size()));
  }
  DataLoader build_validation_data_loader() override {
    return DataLoader(index_dataset(ctx_.hparam<int64_t>("validation_records")),
                      DataLoaderOptions(ctx_.hparam<int64_t>("validation_batch_size")));
  }
  Metrics train_batch(Batch& batch, int64_t, int64_t) override {
    auto loss = torch::mse_loss(model_->forward(batch[0].tensor() / 100).to(torch::kFloat),
                                batch[1].tensor() / 100);
    ctx_.backward(loss);
    ctx_.step_optimizer(opt_);
    return {{"loss", loss}};
  }
  Metrics evaluate_full_dataset(DataLoader& loader) override {
    double records = 0, sum_x = 0;
    bool autocast = true;
    for (Batch& batch : loader) {  // on the CPU: evaluate_full_dataset's loader is the trial's
      const torch::Tensor& x = batch[0];
      records += static_cast<double>(x.size(0));
      sum_x += x.sum().item<double>();
      const torch::Tensor y = model_->forward(x.to(ctx_.device()));
      autocast = autocast && y.scalar_type() == torch::kBFloat16;
    }
    return {{"records", records}, {"sum_x", sum_x}, {"autocast", autocast ? 1.0 : 0.0}};
  }
  torch::Tensor predict_batch(Batch& batch, int64_t) override {
    return model_->forward(batch[0].tensor());
  }

 private:
  TrialContext& ctx_;
  torch::nn::Linear model_;
  Optimizer opt_;
};

// Its constructor throws.
class ThrowingCtorTrial : public NeitherEvalTrial {
 public:
  explicit ThrowingCtorTrial(TrialContext& ctx) : NeitherEvalTrial(ctx) {
    throw std::runtime_error("cannot build the model: out of llamas");
  }
  Metrics evaluate_batch(Batch&, int64_t) override { return {}; }
};

// A small regression for searches: its validation loss depends on its learning rate and on how
// long it trained. Hyperparameters: lr, records, and optional hidden (default 8), sleep_ms (per
// batch), fail_at (a batch index: train_batch throws there; only while the file fail_once names
// does not exist, creating it, when fail_once is given), fail_validation_at (a count of batches
// trained: evaluate_batch throws in the validation after it, under fail_once too), invalid_above
// (the constructor throws InvalidHyperparameters when lr is above it) and sigterm_at (a batch
// index: the process sends itself SIGTERM there, while the file sigterm_once names does not
// exist, creating it).
class SearchTrial : public Trial {
 public:
  explicit SearchTrial(TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(torch::nn::Sequential(
            torch::nn::Linear(8, ctx_.hparam<int64_t>("hidden", 8)), torch::nn::Tanh(),
            torch::nn::Linear(ctx_.hparam<int64_t>("hidden", 8), 1)))),
        opt_(
            ctx.wrap_optimizer(torch::optim::SGD(model_->parameters(), ctx.hparam<double>("lr")))) {
    if (ctx.hparams().contains("invalid_above") &&
        ctx.hparam<double>("lr") > ctx.hparam<double>("invalid_above")) {
      throw InvalidHyperparameters("lr " + std::to_string(ctx.hparam<double>("lr")) +
                                   " is above invalid_above");
    }
  }
  DataLoader build_training_data_loader() override {
    return DataLoader(std::make_shared<JitteredDataset>(ctx_.hparam<int64_t>("records"), 7),
                      DataLoaderOptions(ctx_.per_slot_batch_size()).shuffle(true));
  }
  DataLoader build_validation_data_loader() override {
    return DataLoader(std::make_shared<JitteredDataset>(64, 8), DataLoaderOptions(32));
  }
  Metrics train_batch(Batch& batch, int64_t, int64_t batch_idx) override {
    const int64_t sleep_ms = ctx_.hparam<int64_t>("sleep_ms", 0);
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    if (batch_idx == ctx_.hparam<int64_t>("fail_at", -1) && first_time("fail_once")) {
      throw std::runtime_error("injected failure at batch " + std::to_string(batch_idx));
    }
    if (batch_idx == ctx_.hparam<int64_t>("sigterm_at", -1) && first_time("sigterm_once")) {
      ::raise(SIGTERM);
    }
    auto loss = torch::mse_loss(model_->forward(batch[0].tensor()), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(opt_);
    return {{"loss", loss}};
  }
  Metrics evaluate_batch(Batch& batch, int64_t) override {
    if (ctx_.current_train_batch() == ctx_.hparam<int64_t>("fail_validation_at", -1) &&
        first_time("fail_once")) {
      throw std::runtime_error("injected failure in the validation after batch " +
                               std::to_string(ctx_.current_train_batch()));
    }
    return {{"loss", torch::mse_loss(model_->forward(batch[0].tensor()), batch[1])}};
  }

 private:
  // Whether an injected fault is due: always when hyperparameter `once` is not given, else only
  // while the file it names does not exist, which this then creates.
  bool first_time(const std::string& once) const {
    if (!ctx_.hparams().contains(once)) return true;
    const auto path = ctx_.hparam<std::string>(once);
    if (std::ifstream(path)) return false;
    std::ofstream(path) << "happened once\n";
    return true;
  }

  TrialContext& ctx_;
  torch::nn::Sequential model_;
  Optimizer opt_;
};

}  // namespace crucible::testing
