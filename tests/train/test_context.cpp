#include "catch.h"

#include <crucible/crucible.h>

#include "context_fixture.h"
#include "files.h"

namespace {

struct Fixture : crucible::testing::ContextFixture {
  Fixture()
      : ContextFixture(R"(name: c
entrypoint: l:T
hyperparameters: {global_batch_size: 12, lr: 0.1, layers: 3, act: relu, sizes: [1, 2], none: null}
max_length: {batches: 1}
)") {}
};

// A wrapped Linear(2, 1) of zero weights and its wrapped SGD of rate 1.
std::pair<torch::nn::Linear, crucible::Optimizer> zeroed_linear(Fixture& f) {
  auto model = f.ctx.wrap_model(torch::nn::Linear(2, 1));
  {
    torch::NoGradGuard no_grad;
    model->weight.zero_();
    model->bias.zero_();
  }
  return {model, f.ctx.wrap_optimizer(torch::optim::SGD(model->parameters(), 1.0))};
}

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
  CHECK_THROWS_WITH(f.ctx.hparam<double>("none"), "hyperparameter 'none' is null, expected float");
  CHECK_THROWS_WITH(f.ctx.hparam<double>("momentum"),
                    Catch::Contains("hyperparameter 'momentum' is not in the experiment file's "
                                    "hyperparameters (it has: act, global_batch_size, layers, "
                                    "lr, none, sizes)"));
  CHECK_THROWS_AS(f.ctx.hparam<bool>("layers"), crucible::ConfigError);
  // An integer the type cannot hold is refused, not wrapped.
  using crucible::detail::json_as;
  CHECK_THROWS_WITH(json_as<int32_t>(nlohmann::json(int64_t{5000000000}), "x"),
                    "x is integer 5000000000, expected integer from -2147483648 to 2147483647");
  CHECK_THROWS_WITH(json_as<uint32_t>(nlohmann::json(-1), "x"),
                    "x is integer -1, expected integer from 0 to 4294967295");
  CHECK_THROWS_AS(json_as<int64_t>(nlohmann::json(uint64_t{1} << 63), "x"), crucible::ConfigError);
  CHECK(json_as<int64_t>(nlohmann::json(uint64_t{1} << 62), "x") == int64_t{1} << 62);
  CHECK(json_as<int32_t>(nlohmann::json(-2147483648LL), "x") == INT32_MIN);
  // With a default: the file's value when present (typed as strictly), else the default.
  CHECK(f.ctx.hparam("lr", 0.9) == 0.1);
  CHECK(f.ctx.hparam("momentum", 0.9) == 0.9);
  CHECK(f.ctx.hparam<int64_t>("depth", 4) == 4);
  CHECK(f.ctx.hparam("act", "tanh") == "relu");
  CHECK(f.ctx.hparam("activation", "tanh") == std::string("tanh"));
  CHECK(f.ctx.hparam<std::vector<int>>("widths", {8, 8}) == std::vector<int>{8, 8});
  CHECK_THROWS_WITH(f.ctx.hparam("act", 1.0),
                    "hyperparameter 'act' is string \"relu\", expected float");
  CHECK(f.ctx.global_batch_size() == 12);
  CHECK(f.ctx.per_slot_batch_size() == 12);
}

TEST_CASE("data<T> is typed and names the key at its place on error", "[train]") {
  const std::string yaml =
      std::string(crucible::testing::kMinimalExperiment) + "data:\n  path: /d\n  workers: two\n";
  crucible::testing::TempDir tmp;
  crucible::testing::write_file(tmp / "fixture.yaml", yaml);
  crucible::testing::ContextFixture f(yaml);
  f.config.source_path = tmp / "fixture.yaml";  // the file errors name places in
  CHECK(f.ctx.data<std::string>("path") == "/d");
  CHECK(f.ctx.data("path", "/elsewhere") == "/d");
  CHECK(f.ctx.data<int64_t>("depth", 3) == 3);
  CHECK_THROWS_WITH(f.ctx.data<int64_t>("workers", 1),
                    tmp / "fixture.yaml:7:12: data.workers is string \"two\", expected integer");
  CHECK_THROWS_WITH(f.ctx.data<std::string>("url"),
                    tmp /
                        "fixture.yaml:6:3: data.url: the trial reads it, and the experiment "
                        "file's data block has data.path, data.workers");
  crucible::testing::ContextFixture none;
  CHECK_THROWS_AS(none.ctx.data<std::string>("path"), crucible::ConfigError);
  CHECK(none.ctx.data<int64_t>("workers", 1) == 1);
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
  // Averaged over the window: three backward passes of d/dw = 1, each divided by 3. An absolute
  // margin: a weight drawn near 0.1 ends near 0, where a relative one is below float's rounding.
  CHECK(model->weight.item<float>() == Approx(before.item<float>() - 0.1).margin(1e-6));
}

TEST_CASE("accumulating k batches of B equals one batch of k x B for a mean loss", "[train]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const auto x = torch::randn({6, 3}, gen, torch::kFloat);
  const auto y = torch::randn({6, 1}, gen, torch::kFloat);
  // Two optimizer steps of SGD with momentum over the same 6 rows per step.
  auto train = [&](int64_t k, bool average) {
    Fixture f;
    f.config.optimizations.aggregation_frequency = k;
    f.config.optimizations.average_aggregated_gradients = average;
    torch::manual_seed(1);
    auto model = f.ctx.wrap_model(torch::nn::Linear(3, 1));
    auto opt = f.ctx.wrap_optimizer(
        torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)));
    for (int64_t step = 0; step < 2; ++step) {
      for (int64_t b = 0; b < k; ++b) {
        f.state.batch_idx = step * k + b;
        const auto rows = torch::arange(b * 6 / k, (b + 1) * 6 / k);
        f.ctx.backward(
            torch::mse_loss(model->forward(x.index_select(0, rows)), y.index_select(0, rows)));
        f.ctx.step_optimizer(opt);
      }
    }
    return torch::cat({model->weight.detach().flatten(), model->bias.detach()});
  };
  const auto whole = train(1, true);
  CHECK(torch::allclose(train(3, true), whole, 1e-6, 1e-7));
  CHECK(torch::allclose(train(2, true), whole, 1e-6, 1e-7));
  CHECK_FALSE(torch::allclose(train(3, false), whole, 1e-3, 1e-4));  // summed, not averaged
}

TEST_CASE("step_optimizer clips per call, by norm or by value, and records the norm", "[train]") {
  // loss = w . (3, 4) + b: gradients (3, 4) and 1, total 2-norm sqrt(26); SGD with rate 1 from
  // zero weights leaves minus the clipped gradients.
  auto step = [](const crucible::GradientClipping& clipping) {
    Fixture f;
    auto [model, opt] = zeroed_linear(f);
    f.ctx.backward(model->forward(torch::tensor({{3.0f, 4.0f}})).sum());
    f.ctx.step_optimizer(opt, clipping);
    CHECK(f.state.step_metrics.at("grad_norm").item<double>() == Approx(std::sqrt(26.0)));
    return torch::cat({model->weight.detach().flatten(), model->bias.detach()});
  };
  crucible::GradientClipping by_norm;
  by_norm.max_norm = 1.0;
  const auto normed = step(by_norm);
  CHECK(torch::allclose(normed, -torch::tensor({3.0f, 4.0f, 1.0f}) / std::sqrt(26.0f)));
  crucible::GradientClipping by_value;
  by_value.max_value = 0.5;
  CHECK(torch::equal(step(by_value), torch::tensor({-0.5f, -0.5f, -0.5f})));

  // What the experiment file refuses is refused per call too, before any step.
  Fixture f;
  auto model = f.ctx.wrap_model(torch::nn::Linear(2, 1));
  auto opt = f.ctx.wrap_optimizer(torch::optim::SGD(model->parameters(), 1.0));
  crucible::GradientClipping both = by_norm;
  both.max_value = 0.5;
  crucible::GradientClipping negative;
  negative.max_norm = -1;
  crucible::GradientClipping low_p = by_norm;
  low_p.norm_type = 0.5;
  CHECK_THROWS_WITH(f.ctx.step_optimizer(opt, both),
                    Catch::Contains("sets both max_norm and max_value"));
  CHECK_THROWS_WITH(f.ctx.step_optimizer(opt, negative), Catch::Contains("max_norm is -1"));
  CHECK_THROWS_WITH(f.ctx.step_optimizer(opt, low_p), Catch::Contains("norm_type is 0.5"));
}

TEST_CASE(
    "a step the loss scaler skips is not clipped and reports no grad_norm: its overflow is no "
    "divergence",
    "[train][amp]") {
  // fp16's scaler on the CPU (LibTorch's kernels from 2.3, the tensor-op path before): a gradient
  // of 3e35 times the scale 65536 overflows float32, the step is skipped and the scale backs off;
  // the next batch's gradient fits, steps and reports its norm. Before this, the skipped step's inf
  // norm made the run's grad_norm mean inf, which optimizations.non_finite: stop took for a
  // diverged run.
  Fixture f;
  f.config.optimizations.gradient_clipping.max_norm = 1.0;
  f.state.scaler = std::make_unique<crucible::train::GradScaler>(torch::kCPU);
  auto [model, opt] = zeroed_linear(f);
  f.ctx.backward(model->forward(torch::tensor({{3e35f, 4.0f}})).sum());
  f.ctx.step_optimizer(opt);
  CHECK(f.state.skipped_steps == 1);
  CHECK(f.state.step_metrics.count("grad_norm") == 0);
  CHECK_FALSE(f.ctx.optimizer_stepped(opt));
  CHECK(torch::equal(model->weight.detach(), torch::zeros({1, 2})));
  const auto grad = model->weight.grad();
  CHECK((!grad.defined() || grad.abs().sum().item<float>() == 0));
  f.state.scaler->update();
  CHECK(f.state.scaler->current_scale() == 32768.0);

  f.state.skipped_steps = 0;
  f.state.batch_idx = 1;
  f.ctx.backward(model->forward(torch::tensor({{3.0f, 4.0f}})).sum());
  f.ctx.step_optimizer(opt);
  CHECK(f.state.skipped_steps == 0);
  CHECK(f.state.step_metrics.at("grad_norm").item<double>() == Approx(std::sqrt(26.0)));
  CHECK(torch::allclose(model->weight.detach().flatten(),
                        -torch::tensor({3.0f, 4.0f}) / std::sqrt(26.0f)));
}

TEST_CASE("wrap_lr_scheduler refuses an optimizer that was not wrapped", "[train]") {
  Fixture f;
  auto model = torch::nn::Linear(1, 1);
  crucible::Optimizer loose = std::make_shared<torch::optim::SGD>(model->parameters(), 1.0);
  CHECK_THROWS_WITH(
      f.ctx.wrap_lr_scheduler(crucible::lr::StepLR(loose, 1), crucible::StepMode::kEveryEpoch),
      Catch::Contains("was not wrapped with wrap_optimizer"));
}

TEST_CASE("wrap_lr_scheduler refuses a second scheduler on one optimizer", "[train]") {
  Fixture f;
  auto model = torch::nn::Linear(1, 1);
  auto other = torch::nn::Linear(1, 1);
  auto first = f.ctx.wrap_optimizer(torch::optim::SGD(model->parameters(), 1.0));
  auto second = f.ctx.wrap_optimizer(torch::optim::SGD(other->parameters(), 1.0));
  f.ctx.wrap_lr_scheduler(crucible::lr::StepLR(second, 2, 0.5),
                          crucible::StepMode::kEveryOptimizerStep);
  f.ctx.wrap_lr_scheduler(crucible::lr::ExponentialLR(first, 0.9), crucible::StepMode::kEveryEpoch);
  // Each wrote its own rate over the other's: StepLR's halvings were lost at every epoch, and a
  // resume restored them in wrapping order, not the order they stepped in.
  CHECK_THROWS_WITH(f.ctx.wrap_lr_scheduler(crucible::lr::StepLR(second, 2, 0.5),
                                            crucible::StepMode::kEveryEpoch),
                    Catch::StartsWith("wrap_lr_scheduler: optimizer 1 already has a scheduler"));
  CHECK_THROWS_WITH(f.ctx.wrap_lr_scheduler(torch::optim::StepLR(*first, 1, 0.5),
                                            crucible::StepMode::kEveryEpoch),
                    Catch::StartsWith("wrap_lr_scheduler: optimizer 0 already has a scheduler"));
}

TEST_CASE("clipping measures float64 gradients in float64, as clip_grad_norm_ does", "[train]") {
  Fixture f;
  f.config.optimizations.gradient_clipping.max_norm = 1.0;
  auto [model, opt] = zeroed_linear(f);
  model->to(torch::kDouble);
  // Gradients 3 + 1e-9 and 4 (and 1 for the bias): float32 cannot hold the 1e-9.
  const auto input = torch::tensor({{3.0 + 1e-9, 4.0}}, torch::kDouble);
  f.ctx.backward(model->forward(input).sum());
  const auto expected = torch::cat({model->weight.grad().flatten(), model->bias.grad()}).norm();
  f.ctx.step_optimizer(opt);
  const auto norm = f.state.step_metrics.at("grad_norm");
  CHECK(norm.scalar_type() == torch::kDouble);
  CHECK(norm.item<double>() == expected.item<double>());
  CHECK(norm.item<double>() != static_cast<double>(static_cast<float>(expected.item<double>())));
}
