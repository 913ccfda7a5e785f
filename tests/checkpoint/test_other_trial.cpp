// A checkpoint loaded by a trial that wraps other models, optimizers, schedulers or callbacks
// than the one that wrote it (a trial changed between a run and its resume) is refused, naming
// what differs.
#include "catch.h"

#include "checkpoint/checkpoint.h"
#include "process.h"

using namespace crucible::testing;
namespace ckpt = crucible::checkpoint;

namespace {

// An SGD optimizer with one parameter group per entry of `groups`.
crucible::Optimizer sgd(const std::vector<std::vector<torch::Tensor>>& groups) {
  auto optimizer = std::make_shared<torch::optim::SGD>(groups.front(), 0.1);
  for (size_t i = 1; i < groups.size(); ++i) {
    optimizer->add_param_group(torch::optim::OptimizerParamGroup(groups[i]));
  }
  return optimizer;
}

// A scheduler whose load_state refuses every state as a LibTorch check would.
class UnreadableScheduler : public crucible::LRScheduler {
 public:
  using LRScheduler::LRScheduler;
  void load_state(const nlohmann::json&) override { TORCH_CHECK(false, "not my state"); }
};

}  // namespace

TEST_CASE(
    "a checkpoint is refused by a trial that wraps other models, optimizers, schedulers or "
    "callbacks",
    "[checkpoint]") {
  TempDir tmp;
  auto model = torch::nn::Linear(2, 1);
  ckpt::Contents written;
  written.models = {model.ptr()};
  // The weight in one group and the bias in another, as a trial training them at two rates.
  written.optimizers = {sgd({{model->weight}, {model->bias}})};
  written.schedulers = {std::make_shared<crucible::lr::StepLR>(written.optimizers[0], 1, 0.5)};
  const std::string dir = ckpt::save(tmp / "run", 3, written, ckpt::Metadata{});
  REQUIRE_NOTHROW(ckpt::load(dir, written));

  ckpt::Contents other;
  other.models = written.models;
  other.optimizers = written.optimizers;
  other.schedulers = written.schedulers;
  SECTION("another number of models") {
    auto second = torch::nn::Linear(2, 1);
    other.models.push_back(second.ptr());
    CHECK_THROWS_WITH(ckpt::load(dir, other),
                      Catch::Contains("checkpoint " + dir +
                                      ": holds 1 model(s), the trial wraps "
                                      "2; it was written by a different trial"));
  }
  SECTION("a model of another shape") {
    auto wider = torch::nn::Linear(3, 1);
    other.models = {wider.ptr()};
    CHECK_THROWS_WITH(ckpt::load(dir, other),
                      Catch::Contains(dir + "/model_0.pt: the state dict does not match the "
                                            "model") &&
                          Catch::Contains("shape of weight: checkpoint [1, 2], model [1, 3]"));
  }
  SECTION("another number of optimizers") {
    other.optimizers.clear();
    CHECK_THROWS_WITH(ckpt::load(dir, other),
                      Catch::Contains("holds 1 optimizer(s), the trial wraps 0"));
  }
  // An optimizer that gained a group during the run, restored by a trial whose constructor
  // builds it as it was at the start.
  const std::string remedy =
      "; when the trial's constructor returns, each optimizer must have the parameter groups, "
      "with as many parameters each, that it had when the checkpoint was written";
  SECTION("an optimizer with fewer parameter groups") {
    other.optimizers = {sgd({{model->weight}})};
    CHECK_THROWS_WITH(ckpt::load(dir, other),
                      Catch::Contains("cannot restore optimizer from optimizer_0.pt: loaded state "
                                      "dict has a different number of parameter groups" +
                                      remedy));
  }
  SECTION("an optimizer whose groups hold other numbers of parameters") {
    const torch::Tensor extra = torch::zeros({4}, torch::requires_grad());
    other.optimizers = {sgd({{model->weight, model->bias}, {extra}})};
    CHECK_THROWS_WITH(ckpt::load(dir, other),
                      Catch::Contains("cannot restore optimizer from optimizer_0.pt: loaded state "
                                      "dict contains a parameter group that has a different "
                                      "size") &&
                          Catch::Contains(remedy));
  }
  SECTION("another number of schedulers") {
    other.schedulers.clear();
    CHECK_THROWS_WITH(ckpt::load(dir, other), Catch::Contains("checkpoint " + dir +
                                                              ": holds 1 scheduler(s), the trial "
                                                              "wraps 0"));
  }
  SECTION("a scheduler that cannot read the state: its reason, without LibTorch's trace") {
    other.schedulers = {std::make_shared<UnreadableScheduler>(written.optimizers[0])};
    CHECK_THROWS_WITH(ckpt::load(dir, other),
                      Catch::Contains("checkpoint " + dir + ": scheduler 0: not my state") &&
                          !Catch::Contains("Exception raised from"));
  }
  SECTION("other callbacks") {
    other.callbacks = {{"log", std::make_shared<crucible::Callback>()}};
    CHECK_THROWS_WITH(ckpt::load(dir, other),
                      Catch::Contains("holds the state of callbacks [], the trial builds "
                                      "[\"log\"]; it was written by a different trial"));
  }
}
