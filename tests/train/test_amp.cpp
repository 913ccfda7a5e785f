// Mixed precision: the gradient scaler's logic on CPU with injected infs, and autocast regions.
#include "catch.h"

#include <cmath>
#include <sstream>

#include <crucible/crucible.h>

#include "context_fixture.h"
#include "fit_helpers.h"
#include "train/grad_scaler.h"

using namespace crucible::testing;
using crucible::train::GradScaler;
using crucible::train::GradScalerOptions;

namespace {

// One parameter whose gradient is `grad`.
torch::Tensor param_with_grad(std::vector<float> grad) {
  auto p = torch::zeros({static_cast<int64_t>(grad.size())}, torch::requires_grad());
  p.mutable_grad() = torch::tensor(grad);
  return p;
}

// Runs the same script of clean and inf steps on a scaler; returns (scale, tracker) after each
// update.
std::vector<std::pair<double, int64_t>> script(GradScaler& scaler) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::pair<double, int64_t>> out;
  for (bool overflow : {false, false, true, false, false, false, false, true}) {
    auto p = param_with_grad({overflow ? inf : 8.0f, 2.0f});
    scaler.unscale({p});
    scaler.update();
    out.emplace_back(scaler.current_scale(), scaler.growth_tracker());
  }
  return out;
}

}  // namespace

TEST_CASE("the gradient scaler unscales, skips on inf/NaN, backs off and grows", "[train][amp]") {
  GradScaler scaler(torch::kCPU, GradScalerOptions().init_scale(4.0).growth_interval(3));
  const auto loss = torch::tensor(1.5);
  CHECK(scaler.scale(loss).item<double>() == 6.0);

  auto clean = param_with_grad({8.0f, -2.0f});
  CHECK_FALSE(scaler.unscale({clean}));
  CHECK(torch::equal(clean.grad(), torch::tensor({2.0f, -0.5f})));
  CHECK(scaler.pending());
  scaler.update();
  CHECK_FALSE(scaler.pending());
  CHECK(scaler.current_scale() == 4.0);
  CHECK(scaler.growth_tracker() == 1);

  // One optimizer's clean gradients and another's NaN in the same batch: the batch backs off.
  auto fine = param_with_grad({1.0f});
  auto bad = param_with_grad({std::nanf("")});
  CHECK_FALSE(scaler.unscale({fine}));
  CHECK(scaler.unscale({bad}));
  scaler.update();
  CHECK(scaler.current_scale() == 2.0);
  CHECK(scaler.growth_tracker() == 0);

  // growth_interval clean batches in a row double it.
  const auto steps = script(scaler);
  const std::vector<std::pair<double, int64_t>> expected = {{2, 1}, {2, 2}, {1, 0}, {1, 1},
                                                            {1, 2}, {2, 0}, {2, 1}, {1, 0}};
  CHECK(steps == expected);
}

TEST_CASE("the scaler refuses float16 gradients, naming the fix, and changes nothing",
          "[train][amp]") {
  GradScaler scaler(torch::kCPU, GradScalerOptions().init_scale(4.0));
  auto p = param_with_grad({8.0f, 2.0f});
  auto half = torch::zeros({2, 3}, torch::dtype(torch::kHalf).requires_grad(true));
  half.mutable_grad() = torch::ones({2, 3}, torch::kHalf);
  CHECK_THROWS_WITH(scaler.unscale({p, half}),
                    Catch::Contains("a parameter of shape [2, 3] has a float16 gradient") &&
                        Catch::Contains("keep the model in float32"));
  CHECK(torch::equal(p.grad(), torch::tensor({8.0f, 2.0f})));
  CHECK_FALSE(scaler.pending());
}

TEST_CASE("the scaler's state round-trips through a checkpoint archive", "[train][amp]") {
  GradScaler a(torch::kCPU, GradScalerOptions().init_scale(1024).growth_interval(5));
  script(a);
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  GradScaler b(torch::kCPU, GradScalerOptions().init_scale(1024).growth_interval(5));
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  b.load(in);
  CHECK(b.current_scale() == a.current_scale());
  CHECK(b.growth_tracker() == a.growth_tracker());
  CHECK(script(a) == script(b));
}

TEST_CASE("LibTorch's scaler kernels and the tensor-op equivalent agree bitwise", "[train][amp]") {
  if (!GradScaler::has_native_kernels(torch::kCPU)) {
    // LibTorch 1.x has no CPU kernels: only the equivalent runs (the tests above). The Debian 13
    // environment's LibTorch 2.6 has them, so the comparison below runs there.
    CHECK((TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 6)));
    return;
  }
  GradScaler native(torch::kCPU, GradScalerOptions().init_scale(3.0).growth_interval(2));
  GradScaler fallback(torch::kCPU, GradScalerOptions().init_scale(3.0).growth_interval(2));
  fallback.force_fallback(true);
  CHECK(script(native) == script(fallback));
  auto a = param_with_grad({1.0f, 7.0f, -3.0f});
  auto b = param_with_grad({1.0f, 7.0f, -3.0f});
  native.unscale({a});
  fallback.unscale({b});
  CHECK(torch::equal(a.grad(), b.grad()));
}

TEST_CASE("bf16 autocast on CPU, and regions that switch it off and on", "[train][amp]") {
  ContextFixture f(R"(name: c
entrypoint: l:T
hyperparameters: {global_batch_size: 4}
max_length: {batches: 1}
optimizations: {mixed_precision: bf16}
)");
  CHECK(f.ctx.mixed_precision() == crucible::MixedPrecision::kBf16);
  auto linear = torch::nn::Linear(4, 2);
  const auto x = torch::randn({3, 4});
  CHECK(linear->forward(x).dtype() == torch::kFloat);
  {
    const auto on = f.ctx.autocast(true);
    CHECK(linear->forward(x).dtype() == torch::kBFloat16);
    {
      const auto off = f.ctx.autocast(false);
      CHECK(linear->forward(x).dtype() == torch::kFloat);
    }
    CHECK(linear->forward(x).dtype() == torch::kBFloat16);
  }
  CHECK(linear->forward(x).dtype() == torch::kFloat);

  f.config.optimizations.mixed_precision = crucible::MixedPrecision::kNone;
  const auto none = f.ctx.autocast(true);
  CHECK(linear->forward(x).dtype() == torch::kFloat);
}

TEST_CASE("fp16 on a CPU device is a config error naming bf16", "[train][amp]") {
  if (torch::cuda::is_available()) return;  // a GPU machine runs fp16 instead
  TempDir tmp;
  const auto config =
      recording_config("max_length: {batches: 1}\n", {"optimizations.mixed_precision=fp16"});
  int code = 0;
  const std::string message = error_of([&] { fit_recording(config, tmp / "run"); }, &code);
  CHECK(code == crucible::kExitBadUsage);
  CHECK_THAT(message,
             Catch::StartsWith("--set optimizations.mixed_precision=fp16: "
                               "optimizations.mixed_precision: fp16 needs a CUDA device") &&
                 Catch::Contains("use bf16 on CPU"));
  CHECK(!crucible::util::exists(tmp / "run"));  // refused before the run directory is made
  // `trainer check` agrees.
  CHECK_THROWS_WITH(crucible::check_experiment(config),
                    Catch::Contains("fp16 needs a CUDA device"));
}
