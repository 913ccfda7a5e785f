// The Crucible side of the overhead and DDP benchmarks; writes its step times to hparam
// `timing_file` (with ".rank<R>" appended in a distributed run).
#include <crucible/crucible.h>

#include "bench_model.h"

class BenchMLPTrial : public crucible::Trial {
 public:
  explicit BenchMLPTrial(crucible::TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(bench::MLP())),
        opt_(ctx.wrap_optimizer(bench::make_optimizer(model_))) {}
  ~BenchMLPTrial() override {
    const auto& dist = ctx_.distributed();
    const std::string suffix = dist.distributed() ? ".rank" + std::to_string(dist.rank()) : "";
    clock_.write(ctx_.hparam<std::string>("timing_file") + suffix, ctx_.hparam<int64_t>("warmup"));
  }

  crucible::DataLoader build_training_data_loader() override {
    auto [x, y] = bench::make_data(ctx_.trial_seed());
    return crucible::DataLoader(
        std::make_shared<crucible::TensorDataset>(std::vector<torch::Tensor>{x, y}),
        crucible::DataLoaderOptions(ctx_.per_slot_batch_size())
            .shuffle(true)
            .num_workers(ctx_.hparam<int64_t>("workers"))
            .worker_threads(ctx_.hparam<int64_t>("worker_threads", 1)));
  }
  crucible::DataLoader build_validation_data_loader() override {
    return build_training_data_loader();
  }

  crucible::Metrics train_batch(crucible::Batch& batch, int64_t, int64_t) override {
    clock_.tick();
    auto loss = torch::nn::functional::cross_entropy(model_->forward(batch[0]), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(opt_);
    return {{"loss", loss}};
  }
  crucible::Metrics evaluate_batch(crucible::Batch& batch, int64_t) override {
    return {{"loss", torch::nn::functional::cross_entropy(model_->forward(batch[0]), batch[1])}};
  }

 private:
  crucible::TrialContext& ctx_;
  bench::MLP model_;
  crucible::Optimizer opt_;
  bench::StepClock clock_;
};

CRUCIBLE_REGISTER_TRIAL(BenchMLPTrial);
