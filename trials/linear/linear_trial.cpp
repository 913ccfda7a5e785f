// The sanity trial: fit y = w*x + b to noisy samples of a known line. Training must recover
// `true_weight` and `true_bias`; validation reports the learned values beside the loss.
#include <crucible/crucible.h>

namespace {

std::shared_ptr<crucible::TensorDataset> line_samples(int64_t n, double w, double b, double noise,
                                                      uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto x = torch::rand({n, 1}, gen, torch::kFloat) * 4.0 - 2.0;
  auto y = w * x + b + noise * torch::randn({n, 1}, gen, torch::kFloat);
  return std::make_shared<crucible::TensorDataset>(std::vector<torch::Tensor>{x, y});
}

class LinearTrial : public crucible::Trial {
 public:
  explicit LinearTrial(crucible::TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(torch::nn::Linear(1, 1))),
        opt_(ctx.wrap_optimizer(
            torch::optim::SGD(model_->parameters(), ctx.hparam<double>("learning_rate")))) {}

  crucible::DataLoader build_training_data_loader() override {
    return loader(ctx_.hparam<int64_t>("train_samples"), 1, true);
  }
  crucible::DataLoader build_validation_data_loader() override {
    return loader(ctx_.hparam<int64_t>("validation_samples"), 2, false);
  }

  crucible::Metrics train_batch(crucible::Batch& batch, int64_t, int64_t) override {
    auto loss = torch::mse_loss(model_->forward(batch[0]), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(opt_);
    return {{"loss", loss}};
  }

  crucible::Metrics evaluate_batch(crucible::Batch& batch, int64_t) override {
    return {{"loss", torch::mse_loss(model_->forward(batch[0]), batch[1])},
            {"weight", model_->weight.reshape({})},
            {"bias", model_->bias.reshape({})}};
  }

  // The fitted line at each sample's x.
  torch::Tensor predict_batch(crucible::Batch& batch, int64_t) override {
    return model_->forward(batch[0]);
  }

 private:
  crucible::DataLoader loader(int64_t n, uint64_t stream, bool shuffle) {
    auto data =
        line_samples(n, ctx_.hparam<double>("true_weight"), ctx_.hparam<double>("true_bias"),
                     ctx_.hparam<double>("noise"), ctx_.trial_seed() + stream);
    return crucible::DataLoader(
        data, crucible::DataLoaderOptions(ctx_.per_slot_batch_size()).shuffle(shuffle));
  }

  crucible::TrialContext& ctx_;
  torch::nn::Linear model_;
  crucible::Optimizer opt_;
};

}  // namespace

CRUCIBLE_REGISTER_TRIAL(LinearTrial);
