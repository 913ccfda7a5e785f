// The Crucible side of the overhead and DDP benchmarks; each trial writes its step times to
// hparam `timing_file` (with ".rank<R>" appended in a distributed run).
//   BenchMLPTrial        the MLP; hparams workers, worker_threads (DataLoaderOptions), loop_data
//   BenchEmbeddingTrial  the embedding workload, sparse gradients unless hparam sparse is false
#include <optional>

#include <crucible/crucible.h>

#include "bench_model.h"

namespace bench {

// What both trials share: the step clock, written out when the trial ends, and loaders over
// in-memory tensors.
class TimedTrial : public crucible::Trial {
 public:
  explicit TimedTrial(crucible::TrialContext& ctx) : ctx_(ctx) {}
  ~TimedTrial() override {
    const auto& dist = ctx_.distributed();
    const std::string suffix = dist.distributed() ? ".rank" + std::to_string(dist.rank()) : "";
    clock_.write(ctx_.hparam<std::string>("timing_file") + suffix, ctx_.hparam<int64_t>("warmup"));
  }

 protected:
  // A shuffling loader of `data` at the per-slot batch size, with hparams workers and
  // worker_threads (default 0 and 1).
  crucible::DataLoader loader(std::pair<torch::Tensor, torch::Tensor> data) {
    return crucible::DataLoader(
        std::make_shared<crucible::TensorDataset>(
            std::vector<torch::Tensor>{std::move(data.first), std::move(data.second)}),
        crucible::DataLoaderOptions(ctx_.per_slot_batch_size())
            .shuffle(true)
            .num_workers(ctx_.hparams().value("workers", int64_t{0}))
            .worker_threads(ctx_.hparams().value("worker_threads", int64_t{1})));
  }

  crucible::TrialContext& ctx_;
  bench::StepClock clock_;
};

// One classifier step (cross-entropy) of `model`, timed.
template <class Model>
class ClassifierBench : public TimedTrial {
 public:
  ClassifierBench(crucible::TrialContext& ctx, Model model,
                  const std::function<crucible::Optimizer(Model&)>& make_optimizer)
      : TimedTrial(ctx), model_(ctx.wrap_model(std::move(model))), opt_(make_optimizer(model_)) {}

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

 protected:
  Model model_;
  crucible::Optimizer opt_;
};

}  // namespace bench

// With hparam loop_data: true, the training loader carries 9 bytes a record (a byte and an
// index) and train_batch makes each batch itself as the hand-written loop does (index_select of
// a randperm's slice on the CPU, then a blocking copy to the device): the batch's payload does not
// travel the trainer's data path, though the path's fixed cost per batch remains.
class BenchMLPTrial : public bench::ClassifierBench<bench::MLP> {
 public:
  explicit BenchMLPTrial(crucible::TrialContext& ctx)
      : ClassifierBench(
            ctx, bench::MLP(),
            [&](bench::MLP& m) { return ctx.wrap_optimizer(bench::make_optimizer(m)); }),
        loop_data_(ctx.hparams().value("loop_data", false)) {}
  crucible::DataLoader build_training_data_loader() override {
    if (!loop_data_) return loader(bench::make_data(ctx_.trial_seed()));
    batches_.emplace(bench::make_data(ctx_.trial_seed()), ctx_.per_slot_batch_size(),
                     ctx_.device());
    return loader({torch::zeros({bench::kRecords, 1}, torch::kUInt8),
                   torch::zeros({bench::kRecords}, torch::kLong)});
  }
  crucible::DataLoader build_validation_data_loader() override {
    return loader(bench::make_data(ctx_.trial_seed()));
  }
  crucible::Metrics train_batch(crucible::Batch& batch, int64_t epoch_idx,
                                int64_t batch_idx) override {
    if (!loop_data_) return ClassifierBench::train_batch(batch, epoch_idx, batch_idx);
    const auto [x, y] = batches_->get(batch_idx);
    crucible::Batch made{x, y};
    return ClassifierBench::train_batch(made, epoch_idx, batch_idx);
  }

 private:
  bool loop_data_;
  std::optional<bench::IndexSelectBatches> batches_;  // with loop_data
};

class BenchEmbeddingTrial : public bench::ClassifierBench<bench::EmbeddingNet> {
 public:
  explicit BenchEmbeddingTrial(crucible::TrialContext& ctx)
      : ClassifierBench(ctx, bench::EmbeddingNet(ctx.hparams().value("sparse", true)),
                        [&](bench::EmbeddingNet& m) {
                          return ctx.wrap_optimizer(torch::optim::SGD(m->parameters(), 0.1));
                        }) {}
  crucible::DataLoader build_training_data_loader() override {
    return loader(bench::make_lookup_data(ctx_.trial_seed()));
  }
  crucible::DataLoader build_validation_data_loader() override {
    return build_training_data_loader();
  }
};

CRUCIBLE_REGISTER_TRIAL(BenchMLPTrial);
CRUCIBLE_REGISTER_TRIAL(BenchEmbeddingTrial);
