// Fashion-MNIST classifiers over the IDX files of dataset-fashion-mnist: an MLP, a CNN and the
// network of Determined's MNIST tutorial (TutorialCNN, with its hyperparameter names). They share
// one trial body; the network and its optimizer differ.
#include <crucible/crucible.h>

#include "idx.h"
#include "networks.h"

namespace fashion_mnist {

// The network with the sizes of the experiment's hyperparameters.
template <class Net>
Net make_network(const crucible::TrialContext& ctx);
template <>
MLP make_network<MLP>(const crucible::TrialContext& ctx) {
  return MLP(ctx.hparam<int64_t>("hidden1"), ctx.hparam<int64_t>("hidden2"),
             ctx.hparam<double>("dropout"));
}
template <>
CNN make_network<CNN>(const crucible::TrialContext& ctx) {
  return CNN(ctx.hparam<int64_t>("filters1"), ctx.hparam<int64_t>("filters2"),
             ctx.hparam<int64_t>("hidden"), ctx.hparam<double>("dropout"));
}
template <>
TutorialNet make_network<TutorialNet>(const crucible::TrialContext& ctx) {
  return TutorialNet(ctx.hparam<int64_t>("n_filters1"), ctx.hparam<int64_t>("n_filters2"),
                     ctx.hparam<double>("dropout1"), ctx.hparam<double>("dropout2"));
}

// The learning-rate schedule that hyperparameter lr_schedule names: step_decay (default; lr
// times lr_decay after every epoch) or warmup_cosine (warmup_steps of linear warm-up from a tenth
// of lr, then cosine annealing to 0 over cosine_steps, per optimizer step).
void wrap_schedule(crucible::TrialContext& ctx, const crucible::Optimizer& opt) {
  const auto schedule = ctx.hparams().value("lr_schedule", std::string("step_decay"));
  if (schedule == "step_decay") {
    ctx.wrap_lr_scheduler(crucible::lr::StepLR(opt, 1, ctx.hparam<double>("lr_decay")),
                          crucible::StepMode::kEveryEpoch);
  } else if (schedule == "warmup_cosine") {
    ctx.wrap_lr_scheduler(crucible::lr::LinearWarmup(crucible::lr::CosineAnnealingLR(
                                                         opt, ctx.hparam<int64_t>("cosine_steps")),
                                                     ctx.hparam<int64_t>("warmup_steps"), 0.1),
                          crucible::StepMode::kEveryOptimizerStep);
  } else {
    throw crucible::ConfigError("hyperparameter 'lr_schedule' is '" + schedule +
                                "'; expected step_decay or warmup_cosine");
  }
}

// The wrapped optimizer of a network: Adam at hyperparameter lr with the schedule above, or for the
// tutorial network Adadelta at learning_rate with no schedule, as in Determined's tutorial.
template <class Net>
crucible::Optimizer make_optimizer(crucible::TrialContext& ctx, Net& model) {
  auto opt = ctx.wrap_optimizer(
      torch::optim::Adam(model->parameters(), torch::optim::AdamOptions(ctx.hparam<double>("lr"))));
  wrap_schedule(ctx, opt);
  return opt;
}
template <>
crucible::Optimizer make_optimizer<TutorialNet>(crucible::TrialContext& ctx, TutorialNet& model) {
  return ctx.wrap_optimizer(crucible::optim::Adadelta(
      model->parameters(), crucible::optim::AdadeltaOptions(ctx.hparam<double>("learning_rate"))));
}

// The network and optimizer above, cross-entropy loss, accuracy on the 10k test images (the first
// data.validation_records of them when that is set).
template <class Net>
class ClassifierTrial : public crucible::Trial {
 public:
  explicit ClassifierTrial(crucible::TrialContext& ctx)
      : ctx_(checked(ctx)),
        data_dir_(ctx.data("path", "/usr/share/datasets/fashion-mnist")),
        model_(ctx.wrap_model(make_network<Net>(ctx))),
        opt_(make_optimizer(ctx, model_)) {}

  crucible::DataLoader build_training_data_loader() override { return loader("train", true); }
  crucible::DataLoader build_validation_data_loader() override { return loader("t10k", false); }

  crucible::Metrics train_batch(crucible::Batch& batch, int64_t, int64_t) override {
    auto loss = torch::nn::functional::cross_entropy(model_->forward(batch[0]), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(opt_);
    return {{"loss", loss}};
  }

  // Class probabilities, [batch, 10].
  torch::Tensor predict_batch(crucible::Batch& batch, int64_t) override {
    return torch::softmax(model_->forward(batch[0]), 1);
  }

  crucible::Metrics evaluate_batch(crucible::Batch& batch, int64_t) override {
    auto logits = model_->forward(batch[0]);
    const torch::Tensor& labels = batch[1];
    return {{"loss", torch::nn::functional::cross_entropy(logits, labels)},
            {"accuracy", logits.argmax(1).eq(labels).to(torch::kFloat).mean()}};
  }

 private:
  // `ctx`, once its data block holds only keys this trial reads. Determined's tutorial files
  // carry data.url, where its trial downloads MNIST from; this one reads the files at data.path.
  static crucible::TrialContext& checked(crucible::TrialContext& ctx) {
    ctx.check_data_keys({"path", "workers", "validation_records", "url"});
    return ctx;
  }

  crucible::DataLoader loader(const std::string& split, bool train) {
    auto [x, y] = load_split(data_dir_, split);
    const auto limit = ctx_.data<int64_t>("validation_records", 0);
    if (!train && limit > 0 && limit < x.size(0)) {
      x = x.narrow(0, 0, limit);
      y = y.narrow(0, 0, limit);
    }
    auto options = crucible::DataLoaderOptions(train ? ctx_.per_slot_batch_size() : 1000)
                       .shuffle(train)
                       .num_workers(ctx_.data<int64_t>("workers", 1));
    return crucible::DataLoader(
        std::make_shared<crucible::TensorDataset>(std::vector<torch::Tensor>{x, y}), options);
  }

  crucible::TrialContext& ctx_;
  std::string data_dir_;
  Net model_;
  crucible::Optimizer opt_;
};

using FashionMLP = ClassifierTrial<MLP>;
using FashionCNN = ClassifierTrial<CNN>;
using TutorialCNN = ClassifierTrial<TutorialNet>;

}  // namespace fashion_mnist

CRUCIBLE_REGISTER_TRIAL(fashion_mnist::FashionMLP);
CRUCIBLE_REGISTER_TRIAL(fashion_mnist::FashionCNN);
CRUCIBLE_REGISTER_TRIAL(fashion_mnist::TutorialCNN);
