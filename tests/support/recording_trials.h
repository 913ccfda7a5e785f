#pragma once

// RecordingTrial, which records what the fit loop asks of it, and the trials built on it or
// beside it that test the fit loop's contracts (callbacks, reducers, evaluation methods, a
// throwing constructor).

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <crucible/crucible.h>

#include "trial_pieces.h"

namespace crucible::testing {

// Records what the fit loop asks of it. Hyperparameters: records, validation_records,
// validation_batch_size, and optional fail_at / hang_at / nan_at / stop_at / sigterm_at (batch
// indices, -1 = never: throw, sleep forever, report a NaN loss, call ctx.set_stop_requested,
// send the process SIGTERM, after stop_at's request when both are at one batch), nan_grad_at and
// nan_grad_from (a NaN loss before backward on that batch, or on every batch from it),
// inf_grad_at (a finite loss whose weight gradient is NaN on that batch), enforce_at (a LibTorch
// CAFFE_ENFORCE fails there, as an allocation the machine cannot give does: its message carries a
// native stack of "frame #N" lines),
// fail_rank (the only rank that fails, hangs or requests a stop; default every rank),
// bad_record / bad_validation_record (a training or validation record whose read throws), and
// sigint_in_validation / sigint_parent_in_validation (a validation batch index: SIGINT, as a
// person's Ctrl-C, to this process, or from rank 0 to its parent: a launcher or a search).
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
    CAFFE_ENFORCE(batch_idx != ctx_.hparam<int64_t>("enforce_at", -1), "injected enforce failure");
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
  Metrics evaluate_batch(Batch& batch, int64_t batch_idx) override {
    evaluated_at().push_back({ctx_.current_train_batch(), ctx_.current_train_epoch(),
                              ctx_.is_epoch_start(), ctx_.is_epoch_end()});
    if (batch_idx == ctx_.hparam<int64_t>("sigint_in_validation", -1)) ::raise(SIGINT);
    if (batch_idx == ctx_.hparam<int64_t>("sigint_parent_in_validation", -1) &&
        ctx_.distributed().rank() == 0) {
      ::kill(::getppid(), SIGINT);
    }
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

}  // namespace crucible::testing
