// Logistic regression on two Gaussian blobs: a trial written against the installed headers only.
#include <crucible/crucible.h>

class BlobsTrial : public crucible::Trial {
 public:
  explicit BlobsTrial(crucible::TrialContext& ctx)
      : ctx_(ctx),
        model_(ctx.wrap_model(torch::nn::Linear(2, 2))),
        opt_(ctx.wrap_optimizer(
            torch::optim::Adam(model_->parameters(), ctx.hparam<double>("lr")))) {}

  crucible::DataLoader build_training_data_loader() override { return blobs(1); }
  crucible::DataLoader build_validation_data_loader() override { return blobs(2); }

  crucible::Metrics train_batch(crucible::Batch& b, int64_t, int64_t) override {
    auto loss = torch::nn::functional::cross_entropy(model_->forward(b[0]), b[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(opt_);
    return {{"loss", loss}};
  }

  crucible::Metrics evaluate_full_dataset(crucible::DataLoader& loader) override {
    int64_t correct = 0, total = 0;
    for (const crucible::Batch& cpu : loader) {  // this loader yields CPU batches
      crucible::Batch b = ctx_.to_device(cpu);
      correct += model_->forward(b[0]).argmax(1).eq(b[1].tensor()).sum().item<int64_t>();
      total += b[1].tensor().size(0);
    }
    return {{"accuracy", torch::tensor(static_cast<double>(correct) / total)}};
  }

 private:
  crucible::DataLoader blobs(uint64_t stream) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(ctx_.trial_seed() + stream);
    auto labels = torch::randint(0, 2, {1000}, gen, torch::kLong);
    auto centers = labels.to(torch::kFloat).unsqueeze(1) * 4.0 - 2.0;
    auto x = centers + torch::randn({1000, 2}, gen, torch::kFloat);
    return crucible::DataLoader(
        std::make_shared<crucible::TensorDataset>(std::vector<torch::Tensor>{x, labels}),
        crucible::DataLoaderOptions(ctx_.per_slot_batch_size()).shuffle(true));
  }

  crucible::TrialContext& ctx_;
  torch::nn::Linear model_;
  crucible::Optimizer opt_;
};

CRUCIBLE_REGISTER_TRIAL(BlobsTrial);
