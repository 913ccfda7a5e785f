#pragma once

// ResumableTrial: everything exact resume must get right, in one trial.

#include <chrono>
#include <csignal>
#include <cstdint>
#include <thread>

#include <crucible/crucible.h>

#include "trial_pieces.h"

namespace crucible::testing {

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

}  // namespace crucible::testing
