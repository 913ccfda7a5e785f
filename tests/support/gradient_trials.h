#pragma once

// Trials for gradient synchronisation across ranks: batch norm buffers, a model EMA, layers
// idle, frozen or added mid-run, and gradient clipping.

#include <cstdint>
#include <vector>

#include <crucible/crucible.h>

#include "trial_pieces.h"

namespace crucible::testing {

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

}  // namespace crucible::testing
