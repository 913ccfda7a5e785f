// ModelEma: the average it keeps, when it updates, its refusals, and a fit that validates and
// resumes it.
#include <crucible/model_ema.h>

#include "catch.h"
#include "context_fixture.h"
#include "fit_helpers.h"

using namespace crucible::testing;
using crucible::ModelEma;
using crucible::ModelEmaOptions;

namespace {

torch::nn::Sequential network() {
  return torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
}

// Every tensor of `m`'s state, parameters then buffers, detached copies.
std::vector<torch::Tensor> state_of(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  for (const auto& b : m.buffers()) out.push_back(b.detach().clone());
  return out;
}

const char* kContext = R"(name: c
entrypoint: l:T
hyperparameters: {global_batch_size: 4}
max_length: {batches: 1}
)";

}  // namespace

TEST_CASE(
    "ModelEma moves the average's parameters and batch-norm statistics toward the model's after "
    "each step of its optimizer (the first copies) and copies num_batches_tracked",
    "[train][ema]") {
  ContextFixture f(kContext);
  auto model = network();
  auto average = network();
  crucible::Optimizer opt = std::make_shared<torch::optim::SGD>(model->parameters(), 0.1);
  ModelEma ema(f.ctx, model.ptr(), average.ptr(), opt, ModelEmaOptions().decay(0.75));
  for (const auto& p : average->parameters()) CHECK_FALSE(p.requires_grad());

  std::vector<torch::Tensor> expected;
  const std::vector<bool> steps = {false, true, true, false, true, true};
  for (size_t b = 0; b < steps.size(); ++b) {
    const auto batch = static_cast<int64_t>(b);
    f.state.steps.begin_batch();
    opt->zero_grad();
    (model->forward(torch::randn({5, 3})) * torch::randn({5, 4})).sum().backward();
    if (steps[b]) {
      opt->step();
      f.state.steps.record(opt.get(), batch);
    }
    ema.on_training_batch_end(batch, {});
    if (!steps[b]) continue;
    const auto now = state_of(*model);
    if (expected.empty()) {
      expected = now;
    } else {
      for (size_t i = 0; i < now.size(); ++i) {
        if (expected[i].is_floating_point()) {
          expected[i].lerp_(now[i], 0.25);
        } else {
          expected[i] = now[i];
        }
      }
    }
  }
  CHECK(ema.updates() == 4);
  const auto got = state_of(*average);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("tensor " << i << ": " << got[i] << "\nexpected " << expected[i]);
    CHECK(torch::equal(got[i], expected[i]));
  }
  // The average is not the model: with decay 0.75 it lags behind.
  CHECK_FALSE(torch::equal(got[0], state_of(*model)[0]));
  // num_batches_tracked (the last buffer) counts all 6 forward passes in train mode.
  CHECK(got.back().item<int64_t>() == 6);
}

TEST_CASE("ModelEma refuses an average of another shape, the model itself and a bad decay",
          "[train][ema]") {
  ContextFixture f(kContext);
  auto model = network();
  crucible::Optimizer opt = std::make_shared<torch::optim::SGD>(model->parameters(), 0.1);
  const auto message = [&](std::shared_ptr<torch::nn::Module> average, double decay) {
    return error_of([&] {
      ModelEma(f.ctx, model.ptr(), std::move(average), opt, ModelEmaOptions().decay(decay));
    });
  };
  auto wider = torch::nn::Sequential(torch::nn::Linear(3, 5), torch::nn::BatchNorm1d(5));
  CHECK(message(wider.ptr(), 0.9) ==
        "ModelEma: parameters '0.weight' is [5, 3] of float in the average, [4, 3] of float in the "
        "model");
  CHECK(message(torch::nn::Linear(3, 4).ptr(), 0.9) ==
        "ModelEma: the average has 2 parameters, the model 4");
  CHECK(message(model.ptr(), 0.9) ==
        "ModelEma: the average must be a second instance of the model's network");
  CHECK(message(network().ptr(), 1.5) == "ModelEma: decay 1.5 is outside [0, 1]");
}

TEST_CASE(
    "a fit with a ModelEma validates the average and a resume from an earlier checkpoint ends "
    "with the same average bitwise",
    "[train][ema]") {
  TempDir tmp;
  const auto config = crucible::parse_experiment_config(R"(name: ema
entrypoint: crucible_test_trials:EmaTrial
hyperparameters: {global_batch_size: 8, records: 96, ema_decay: 0.8}
max_length: {epochs: 2}
min_validation_period: {epochs: 1}
min_checkpoint_period: {epochs: 1}
optimizations: {aggregation_frequency: 2}
reproducibility: {experiment_seed: 5}
searcher: {name: single, metric: loss, smaller_is_better: true}
checkpoint_policy: none
checkpoint_storage: {save_trial_latest: 10}
)",
                                                        "ema.yaml");
  const auto factory = crucible::TrialFactory::of<EmaTrial>("EmaTrial");
  const auto full = crucible::Trainer(config, factory)
                        .fit(crucible::FitOptions().output_dir(tmp / "full").console(false));
  // The average lags the trained network, so the two validate differently.
  REQUIRE(full.last_validation.count("validation_loss"));
  REQUIRE(full.last_validation.count("validation_model_loss"));
  CHECK(full.last_validation.at("validation_loss") !=
        full.last_validation.at("validation_model_loss"));

  copy_tree(tmp / "full", tmp / "cut");
  crucible::util::remove_all(tmp / "cut/checkpoints/batch-0000000024");
  crucible::Trainer(config, factory)
      .fit(crucible::FitOptions().resume_dir(tmp / "cut").console(false));
  for (const char* file : {"model_0.safetensors", "model_1.safetensors", "trial_state.pt"}) {
    INFO(file);
    const std::string last = std::string("/checkpoints/batch-0000000024/") + file;
    REQUIRE(crucible::util::exists(tmp / "full" + last));
    CHECK(read_file(tmp / "cut" + last) == read_file(tmp / "full" + last));
  }
}
