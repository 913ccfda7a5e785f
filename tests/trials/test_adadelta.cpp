// The Adadelta optimizer of the Fashion-MNIST trials: its updates against torch.optim.Adadelta,
// and its state across a save and load.
#include <sstream>

#include <nlohmann/json.hpp>

#include "adadelta.h"
#include "catch.h"
#include "process.h"

using namespace crucible::testing;
using fashion_mnist::Adadelta;
using fashion_mnist::AdadeltaOptions;
using nlohmann::json;

namespace {

// Two groups of two parameters each; the second group has its own lr, rho and weight decay.
const json kProblem = {{"groups",
                        {{{"params", {{0.5, -1.5, 2.0}, {0.1, 0.0, -0.3, 4.0}}},
                          {"lr", 1.0},
                          {"rho", 0.9},
                          {"eps", 1e-6},
                          {"weight_decay", 0.0}},
                         {{"params", {{-0.7, 0.2}, {3.0}}},
                          {"lr", 0.5},
                          {"rho", 0.8},
                          {"eps", 1e-5},
                          {"weight_decay", 0.1}}}},
                       {"targets", {{1.0, 1.0, -1.0}, {0.0, 2.0, 0.5, 1.0}, {0.3, -0.2}, {-1.0}}},
                       {"scales", {{1.0, 2.0, 0.5}, {3.0, 1.0, 1.0, 0.1}, {1.0, 4.0}, {2.0}}}};

torch::Tensor tensor(const json& values) {
  return torch::tensor(values.get<std::vector<float>>(), torch::kFloat);
}

// The problem's parameters, its optimizer, and one step of it.
struct Problem {
  std::vector<torch::Tensor> params;
  std::unique_ptr<Adadelta> opt;

  Problem() {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (const auto& g : kProblem["groups"]) {
      std::vector<torch::Tensor> group;
      for (const auto& p : g["params"]) {
        params.push_back(tensor(p).requires_grad_());
        group.push_back(params.back());
      }
      groups.emplace_back(group,
                          std::make_unique<AdadeltaOptions>(
                              AdadeltaOptions(g["lr"]).rho(g["rho"]).eps(g["eps"]).weight_decay(
                                  g["weight_decay"])));
    }
    opt = std::make_unique<Adadelta>(std::move(groups));
  }

  void step() {
    opt->zero_grad();
    torch::Tensor loss = torch::zeros({});
    for (size_t i = 0; i < params.size(); ++i) {
      loss = loss +
             ((params[i] - tensor(kProblem["targets"][i])).pow(2) * tensor(kProblem["scales"][i]))
                 .sum();
    }
    loss.backward();
    opt->step();
  }
};

}  // namespace

TEST_CASE("Adadelta's updates match torch.optim.Adadelta's", "[trials][adadelta]") {
  constexpr int kSteps = 7;
  json problem = kProblem;
  problem["steps"] = kSteps;
  const auto r = run_command(kPython + " " + CRUCIBLE_SOURCE_DIR +
                             "/tests/trials/adadelta_reference.py '" + problem.dump() + "'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json expected = json::parse(r.output.substr(r.output.find('{')))["params"];

  Problem mine;
  const std::vector<torch::Tensor> start = {mine.params[0].detach().clone()};
  for (int i = 0; i < kSteps; ++i) mine.step();
  REQUIRE(expected.size() == mine.params.size());
  for (size_t i = 0; i < mine.params.size(); ++i) {
    INFO("parameter " << i << ": " << mine.params[i]);
    CHECK(torch::allclose(mine.params[i].detach(), tensor(expected[i]), 1e-5, 1e-6));
  }
  CHECK_FALSE(torch::equal(mine.params[0].detach(), start[0]));  // it moved
}

TEST_CASE("Adadelta resumed from a save continues exactly as one that was never stopped",
          "[trials][adadelta]") {
  Problem straight;
  Problem first;
  for (int i = 0; i < 3; ++i) {
    straight.step();
    first.step();
  }
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    first.opt->save(archive);
    archive.save_to(saved);
  }
  Problem resumed;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < resumed.params.size(); ++i) resumed.params[i].copy_(first.params[i]);
  }
  torch::serialize::InputArchive archive;
  archive.load_from(saved);
  resumed.opt->load(archive);
  for (int i = 0; i < 4; ++i) {
    straight.step();
    resumed.step();
  }
  for (size_t i = 0; i < straight.params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(torch::equal(straight.params[i], resumed.params[i]));
  }
  const auto& group = resumed.opt->param_groups()[1];
  CHECK(static_cast<const AdadeltaOptions&>(group.options()).rho() == 0.8);
  int64_t steps = 0;
  for (const auto& [key, state] : resumed.opt->state()) {
    steps = std::max(steps, static_cast<fashion_mnist::AdadeltaParamState&>(*state).step());
  }
  CHECK(steps == 7);
}
