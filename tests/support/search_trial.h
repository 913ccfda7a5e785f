#pragma once

// SearchTrial: a small regression for hyperparameter searches.

#include <chrono>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <ostream>
#include <string>
#include <thread>

#include <crucible/crucible.h>

#include "trial_pieces.h"

namespace crucible::testing {

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
