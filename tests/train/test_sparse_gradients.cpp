// Sparse gradients (an Embedding with sparse=true) through what an optimizer step inspects and
// changes: clipping, the loss scaler and the non-finite check see the gradient's entries.
#include <limits>

#include "catch.h"

#include "train/grad_clip.h"
#include "train/grad_scaler.h"
#include "train/gradient_values.h"

using namespace crucible;
using namespace crucible::train;

namespace {

// A 6 x 2 parameter whose gradient is sparse and uncoalesced: rows 1 and 4, row 1 twice (so
// its values alone have the wrong norm), and the same gradient dense.
std::pair<torch::Tensor, torch::Tensor> sparse_and_dense() {
  auto param = torch::zeros({6, 2}, torch::requires_grad());
  const auto indices = torch::tensor({1, 4, 1}, torch::kLong).unsqueeze(0);
  const auto values = torch::tensor({3.0f, 1.0f, -2.0f, 2.0f, 1.0f, 4.0f}).view({3, 2});
  param.mutable_grad() = torch::sparse_coo_tensor(indices, values, {6, 2});
  REQUIRE_FALSE(param.grad().is_coalesced());
  return {param, param.grad().to_dense()};
}

}  // namespace

TEST_CASE("a sparse gradient is clipped and measured as its dense self", "[train][sparse]") {
  auto [param, dense] = sparse_and_dense();
  coalesce_sparse_gradients({param});
  REQUIRE(param.grad().is_sparse());
  CHECK(param.grad().is_coalesced());
  CHECK(torch::equal(param.grad().to_dense(), dense));
  for (const double norm_type : {2.0, 1.0, std::numeric_limits<double>::infinity()}) {
    INFO("norm_type " << norm_type);
    CHECK(gradient_norm({param}, norm_type).item<float>() ==
          Approx(dense.norm(norm_type).item<float>()));
  }
  GradientClipping clipping;
  clipping.max_norm = 1.0;
  const auto norm = clip_gradients({param}, clipping);
  CHECK(norm.item<float>() == Approx(dense.norm().item<float>()));
  CHECK(param.grad().is_sparse());
  CHECK(torch::allclose(param.grad().to_dense(), dense * (1.0 / (dense.norm() + 1e-6))));
  clipping.max_norm = 0;
  clipping.max_value = 0.1;
  clip_gradients({param}, clipping);
  CHECK(torch::allclose(param.grad().to_dense(),
                        (dense * (1.0 / (dense.norm() + 1e-6))).clamp(-0.1, 0.1)));
}

TEST_CASE("the loss scaler unscales a sparse gradient and finds its inf", "[train][sparse]") {
  auto [param, dense] = sparse_and_dense();
  coalesce_sparse_gradients({param});
  GradScaler scaler(torch::kCPU, GradScalerOptions().init_scale(4.0));
  CHECK_FALSE(scaler.unscale({param}));
  CHECK(torch::allclose(param.grad().to_dense(), dense / 4));
  param.grad()._values()[0][0] = std::numeric_limits<float>::infinity();
  CHECK(scaler.unscale({param}));
}

TEST_CASE("a sparse gradient without entries has norm 0 in every norm", "[train][sparse]") {
  auto param = torch::zeros({6, 2}, torch::requires_grad());
  param.mutable_grad() = torch::sparse_coo_tensor({6, 2}, torch::kFloat);
  for (const double norm_type : {2.0, 1.0, std::numeric_limits<double>::infinity()}) {
    INFO("norm_type " << norm_type);
    CHECK(gradient_norm({param}, norm_type).item<float>() == 0.0f);
  }
}
