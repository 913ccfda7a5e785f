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

// Registers `models` and `optimizer` in `f`'s state as ctx.wrap_model and wrap_optimizer would.
void wrap(ContextFixture& f, std::vector<std::shared_ptr<torch::nn::Module>> models,
          crucible::Optimizer optimizer) {
  f.state.models = std::move(models);
  f.state.optimizers = {std::move(optimizer)};
}

}  // namespace

TEST_CASE(
    "ModelEma moves the average's parameters and batch-norm statistics toward the model's after "
    "each step of its optimizer (the first copies) and copies num_batches_tracked",
    "[train][ema]") {
  ContextFixture f;
  auto model = network();
  auto average = network();
  crucible::Optimizer opt = std::make_shared<torch::optim::SGD>(model->parameters(), 0.1);
  wrap(f, {model.ptr(), average.ptr()}, opt);
  ModelEma ema(f.ctx, model.ptr(), average.ptr(), opt, ModelEmaOptions().decay(0.75));
  for (const auto& p : average->parameters()) CHECK_FALSE(p.requires_grad());
  // It starts as the model.
  const auto start = state_of(*model);
  const auto copied = state_of(*average);
  for (size_t i = 0; i < start.size(); ++i) CHECK(torch::equal(copied[i], start[i]));

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

TEST_CASE("a tied weight is averaged once", "[train][ema]") {
  ContextFixture f;
  auto shared = torch::nn::Linear(2, 2);
  auto model = torch::nn::Sequential(shared, shared);  // "0.weight" and "1.weight": one tensor
  auto shared_average = torch::nn::Linear(2, 2);
  auto average = torch::nn::Sequential(shared_average, shared_average);
  crucible::Optimizer opt = std::make_shared<torch::optim::SGD>(model->parameters(), 0.1);
  wrap(f, {model.ptr(), average.ptr()}, opt);
  ModelEma ema(f.ctx, model.ptr(), average.ptr(), opt, ModelEmaOptions().decay(0.5));
  std::vector<torch::Tensor> seen;
  for (int64_t b = 0; b < 2; ++b) {
    f.state.steps.begin_batch();
    opt->zero_grad();
    model->forward(torch::randn({3, 2})).sum().backward();
    opt->step();
    f.state.steps.record(opt.get(), b);
    ema.on_training_batch_end(b, {});
    seen.push_back(shared->weight.detach().clone());
  }
  CHECK(torch::equal(shared_average->weight, seen[0].lerp(seen[1], 0.5)));
}

TEST_CASE(
    "ModelEma refuses an average of another shape or sharing the model's weights, an unwrapped "
    "network or optimizer and a bad decay",
    "[train][ema]") {
  ContextFixture f;
  auto model = network();
  crucible::Optimizer opt = std::make_shared<torch::optim::SGD>(model->parameters(), 0.1);
  const auto message = [&](std::shared_ptr<torch::nn::Module> average, double decay) {
    wrap(f, {model.ptr(), average}, opt);
    return error_of([&] {
      ModelEma(f.ctx, model.ptr(), std::move(average), opt, ModelEmaOptions().decay(decay));
    });
  };
  const torch::nn::Linear first(model->ptr<torch::nn::LinearImpl>(0));
  CHECK(message(torch::nn::Sequential(first, torch::nn::BatchNorm1d(4)).ptr(), 0.9) ==
        "ModelEma: the average shares weights with the model; it must be a second instance of the "
        "model's network");
  auto unwrapped = network();
  wrap(f, {model.ptr()}, opt);
  CHECK(error_of([&] { ModelEma(f.ctx, model.ptr(), unwrapped.ptr(), opt); }) ==
        "ModelEma: the average is not a wrapped model; wrap both networks with ctx.wrap_model "
        "before building the ModelEma");
  wrap(f, {model.ptr(), unwrapped.ptr()}, nullptr);
  CHECK(error_of([&] { ModelEma(f.ctx, model.ptr(), unwrapped.ptr(), opt); }) ==
        "ModelEma: its optimizer is not a wrapped optimizer (ctx.wrap_optimizer)");

  auto wider = torch::nn::Sequential(torch::nn::Linear(3, 5), torch::nn::BatchNorm1d(5));
  CHECK(message(wider.ptr(), 0.9) ==
        "ModelEma: parameter '0.weight' is [5, 3] float on cpu in the average and [4, 3] float on "
        "cpu in the model");
  CHECK(message(torch::nn::Sequential(torch::nn::Linear(3, 4)).ptr(), 0.9) ==
        "ModelEma: the average has no parameter '1.weight', which the model has");
  CHECK(message(model.ptr(), 0.9) ==
        "ModelEma: the average must be a second instance of the model's network");
  CHECK(message(network().ptr(), 1.5) == "ModelEma: decay 1.5 is outside [0, 1]");
}

TEST_CASE(
    "a fit with a ModelEma validates the average and a resume from a checkpoint inside an "
    "accumulation window ends with the same average bitwise",
    "[train][ema]") {
  TempDir tmp;
  const auto config = crucible::parse_experiment_config(R"(name: ema
entrypoint: crucible_test_trials:EmaTrial
hyperparameters: {global_batch_size: 8, records: 96, ema_decay: 0.8}
max_length: {epochs: 2}
min_validation_period: {epochs: 1}
min_checkpoint_period: {batches: 5}
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

  // 12 windows of 2 batches: 12 updates.
  torch::serialize::InputArchive state, ema;
  state.load_from(tmp / "full/checkpoints/batch-0000000024/trial_state.pt");
  REQUIRE(state.try_read("callback_ema", ema));
  torch::Tensor updates;
  ema.read("updates", updates);
  CHECK(updates.item<int64_t>() == 12);

  // Checkpoint 15 lies inside a window (batches 14 and 15).
  copy_tree(tmp / "full", tmp / "cut");
  for (const char* later : {"batch-0000000020", "batch-0000000024"}) {
    crucible::util::remove_all(tmp / "cut/checkpoints" + "/" + later);
  }
  crucible::Trainer(config, factory)
      .fit(crucible::FitOptions().resume_dir(tmp / "cut").console(false));
  for (const char* file : {"model_0.safetensors", "model_1.safetensors", "trial_state.pt"}) {
    INFO(file);
    const std::string last = std::string("/checkpoints/batch-0000000024/") + file;
    REQUIRE(crucible::util::exists(tmp / "full" + last));
    CHECK(read_file(tmp / "cut" + last) == read_file(tmp / "full" + last));
  }
}
