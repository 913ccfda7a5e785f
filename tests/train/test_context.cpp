#include "catch.h"

#include <crucible/crucible.h>

#include "train/trial_state.h"

namespace {

struct Fixture {
  crucible::ExperimentConfig config = crucible::parse_experiment_config(R"(name: c
entrypoint: l:T
hyperparameters: {global_batch_size: 12, lr: 0.1, layers: 3, act: relu, sizes: [1, 2]}
max_length: {batches: 1}
)",
                                                                        "c.yaml");
  crucible::detail::TrialState state;
  std::unique_ptr<crucible::TrialContext> context =
      crucible::detail::TrialContextAccess::make(&state);
  crucible::TrialContext& ctx = *context;
  Fixture() {
    state.config = &config;
    state.hparams = config.constant_hyperparameters();
  }
};

}  // namespace

TEST_CASE("hparam<T> is typed and names the hyperparameter on error", "[train]") {
  Fixture f;
  CHECK(f.ctx.hparam<double>("lr") == 0.1);
  CHECK(f.ctx.hparam<double>("layers") == 3.0);  // an integer is a valid double
  CHECK(f.ctx.hparam<int64_t>("layers") == 3);
  CHECK(f.ctx.hparam<std::string>("act") == "relu");
  CHECK(f.ctx.hparam<std::vector<int>>("sizes") == std::vector<int>{1, 2});
  CHECK_THROWS_WITH(f.ctx.hparam<int64_t>("lr"),
                    "hyperparameter 'lr' is float 0.1, expected integer");
  CHECK_THROWS_WITH(f.ctx.hparam<double>("act"),
                    "hyperparameter 'act' is string \"relu\", expected float");
  CHECK_THROWS_WITH(f.ctx.hparam<double>("momentum"),
                    Catch::Contains("hyperparameter 'momentum' is not in the experiment file's "
                                    "hyperparameters (it has: act, global_batch_size, layers, "
                                    "lr, sizes)"));
  CHECK_THROWS_AS(f.ctx.hparam<bool>("layers"), crucible::ConfigError);
  CHECK(f.ctx.global_batch_size() == 12);
  CHECK(f.ctx.per_slot_batch_size() == 12);
}

TEST_CASE("gradient accumulation steps the optimizer every k batches", "[train]") {
  Fixture f;
  f.config.optimizations.aggregation_frequency = 3;
  auto model = f.ctx.wrap_model(torch::nn::Linear(1, 1));
  auto opt = f.ctx.wrap_optimizer(torch::optim::SGD(model->parameters(), 0.1));
  auto before = model->weight.detach().clone();
  for (int64_t b = 0; b < 3; ++b) {
    f.state.batch_idx = b;
    f.ctx.backward(model->forward(torch::ones({1, 1})).sum());
    f.ctx.step_optimizer(opt);
    const bool stepped = !torch::equal(model->weight.detach(), before);
    CHECK(stepped == (b == 2));
  }
  // Averaged over the window: three backward passes of d/dw = 1, each divided by 3.
  CHECK(model->weight.item<float>() == Approx(before.item<float>() - 0.1).epsilon(1e-6));
}

TEST_CASE("LR schedulers compute rates from their step count", "[train]") {
  auto model = torch::nn::Linear(1, 1);
  crucible::Optimizer opt = std::make_shared<torch::optim::SGD>(model->parameters(), 1.0);
  crucible::lr::StepLR step(opt, 2, 0.5);
  step.step();
  CHECK(step.get_last_lr()[0] == 1.0);
  step.step();
  CHECK(step.get_last_lr()[0] == 0.5);
  step.set_step_count(6);
  CHECK(step.get_last_lr()[0] == 0.125);
  crucible::lr::LambdaLR lambda(opt, [](int64_t s) { return 1.0 / (1 + s); });
  lambda.set_step_count(3);
  CHECK(lambda.get_last_lr()[0] == Approx(0.125 / 4));
}

TEST_CASE("wrap_lr_scheduler refuses an optimizer that was not wrapped", "[train]") {
  Fixture f;
  auto model = torch::nn::Linear(1, 1);
  crucible::Optimizer loose = std::make_shared<torch::optim::SGD>(model->parameters(), 1.0);
  CHECK_THROWS_WITH(
      f.ctx.wrap_lr_scheduler(crucible::lr::StepLR(loose, 1), crucible::StepMode::kEveryEpoch),
      Catch::Contains("was not wrapped with wrap_optimizer"));
}
