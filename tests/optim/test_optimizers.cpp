// Crucible's optimizers (crucible/optimizers.h): their updates against torch.optim's on the same
// problem, their state across a save and load, and their refusals of bad input.
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include <crucible/optimizers.h>

#include "catch.h"
#include "process.h"

using namespace crucible::testing;
using crucible::optim::Adadelta;
using crucible::optim::AdadeltaOptions;
using crucible::optim::SparseAdam;
using crucible::optim::SparseAdamOptions;
using nlohmann::json;

namespace {

// Three embedding tables: the first two in group 0, the third in group 1.
const std::vector<std::vector<int64_t>> kShapes = {{4, 2}, {3, 1}, {5, 3}};
const std::vector<size_t> kGroupOf = {0, 0, 1};
// The rows each step looks up in each table, patterns taken in turn: rows looked up twice or
// three times in one step, a table with none (its gradient is empty), and rows that no step looks
// up (kUntouched).
const json kRows = {
    {{0, 2, 2}, {1}, {4, 0, 4, 4}}, {{1}, json::array(), {0}}, {{0, 1, 2}, {0, 1, 0}, {2, 4}}};
const std::vector<std::vector<int64_t>> kUntouched = {{3}, {2}, {1, 3}};

const json kAdadeltaOptions = {{{"lr", 1.0}, {"rho", 0.9}, {"eps", 1e-6}, {"weight_decay", 0.0}},
                               {{"lr", 0.5}, {"rho", 0.8}, {"eps", 1e-5}, {"weight_decay", 0.1}}};
const json kSparseAdamOptions = {
    {{"lr", 0.1}, {"betas", {0.9, 0.999}}, {"eps", 1e-8}, {"maximize", false}},
    {{"lr", 0.05}, {"betas", {0.8, 0.99}}, {"eps", 1e-6}, {"maximize", true}}};

// Table k of kShapes filled with sin(freq * (k + 1) * i + phase), i counting its elements.
torch::Tensor wave(size_t k, double freq, double phase) {
  const int64_t n = kShapes[k][0] * kShapes[k][1];
  return torch::arange(n, torch::kFloat)
      .mul(freq * static_cast<double>(k + 1))
      .add(phase)
      .sin()
      .reshape(kShapes[k]);
}

json rows_of(const torch::Tensor& t) {
  json rows = json::array();
  for (int64_t r = 0; r < t.size(0); ++r) {
    const torch::Tensor row = t[r].contiguous();
    rows.push_back(std::vector<float>(row.data_ptr<float>(), row.data_ptr<float>() + row.numel()));
  }
  return rows;
}

torch::Tensor table_of(const json& rows) {
  std::vector<torch::Tensor> out;
  for (const auto& row : rows) out.push_back(torch::tensor(row.get<std::vector<float>>()));
  return torch::stack(out);
}

// The problem tests/optim/reference.py solves: torch.optim's `optimizer` with kShapes' tables,
// group g having options[g], gradients sparse when `sparse`, for `steps` steps.
json make_problem(const std::string& optimizer, const json& options, bool sparse, int steps) {
  json problem = {{"optimizer", optimizer},
                  {"sparse", sparse},
                  {"rows", kRows},
                  {"steps", steps},
                  {"groups", json::array()}};
  for (const json& o : options)
    problem["groups"].push_back({{"params", json::array()}, {"options", o}});
  for (size_t k = 0; k < kShapes.size(); ++k) {
    problem["groups"][kGroupOf[k]]["params"].push_back(rows_of(wave(k, 0.7, 0.0).mul(2)));
    problem["targets"].push_back(rows_of(wave(k, 0.3, 1.0)));
    problem["scales"].push_back(rows_of(wave(k, 0.5, 2.0).abs().add(0.5)));
  }
  return problem;
}

std::unique_ptr<torch::optim::OptimizerOptions> options_of(const std::string& optimizer,
                                                           const json& o) {
  if (optimizer == "Adadelta") {
    return std::make_unique<AdadeltaOptions>(
        AdadeltaOptions(o["lr"]).rho(o["rho"]).eps(o["eps"]).weight_decay(o["weight_decay"]));
  }
  return std::make_unique<SparseAdamOptions>(SparseAdamOptions(o["lr"])
                                                 .betas({o["betas"][0], o["betas"][1]})
                                                 .eps(o["eps"])
                                                 .maximize(o["maximize"]));
}

// A problem of make_problem's on `device`: its parameters, its optimizer, and its steps.
struct Problem {
  json spec;
  std::vector<torch::Tensor> params, targets, scales;
  std::unique_ptr<torch::optim::Optimizer> opt;
  int64_t steps = 0;
  std::set<size_t> dense;  // parameters looked up with dense gradients whatever spec says

  explicit Problem(json problem, torch::Device device = torch::kCPU) : spec(std::move(problem)) {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    const std::string optimizer = spec["optimizer"];
    for (const auto& g : spec["groups"]) {
      std::vector<torch::Tensor> group;
      for (const auto& p : g["params"]) {
        params.push_back(table_of(p).to(device).requires_grad_());
        group.push_back(params.back());
      }
      groups.emplace_back(group, options_of(optimizer, g["options"]));
    }
    for (size_t k = 0; k < params.size(); ++k) {
      targets.push_back(table_of(spec["targets"][k]).to(device));
      scales.push_back(table_of(spec["scales"][k]).to(device));
    }
    if (optimizer == "Adadelta") {
      opt = std::make_unique<Adadelta>(std::move(groups));
    } else {
      opt = std::make_unique<SparseAdam>(std::move(groups));
    }
  }

  void step() {
    opt->zero_grad();
    const json& pattern = spec["rows"][steps % spec["rows"].size()];
    torch::Tensor loss = torch::zeros({}, params[0].options());
    for (size_t k = 0; k < params.size(); ++k) {
      const torch::Tensor index =
          torch::tensor(pattern[k].get<std::vector<int64_t>>(), torch::kLong)
              .to(params[k].device());
      const torch::Tensor looked_up = torch::embedding(
          params[k], index, -1, false, spec["sparse"].get<bool>() && dense.count(k) == 0);
      loss = loss + ((looked_up - targets[k].index_select(0, index)).pow(2) *
                     scales[k].index_select(0, index))
                        .sum();
    }
    loss.backward();
    opt->step();
    ++steps;
  }

  std::vector<torch::Tensor> values() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : params) out.push_back(p.detach().cpu().clone());
    return out;
  }
};

// The parameters torch.optim ends `problem` with.
std::vector<torch::Tensor> reference(const json& problem) {
  const auto r = run_command(kPython + " " + CRUCIBLE_SOURCE_DIR + "/tests/optim/reference.py '" +
                             problem.dump() + "'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json printed = json::parse(r.output.substr(r.output.find('{')));
  std::vector<torch::Tensor> out;
  for (const auto& p : printed["params"]) out.push_back(table_of(p));
  return out;
}

void check_close(const std::vector<torch::Tensor>& mine, const std::vector<torch::Tensor>& theirs) {
  REQUIRE(mine.size() == theirs.size());
  for (size_t k = 0; k < mine.size(); ++k) {
    INFO("parameter " << k << ": " << mine[k] << "\nexpected " << theirs[k]);
    CHECK(torch::allclose(mine[k], theirs[k], 1e-5, 1e-6));
  }
}

// The largest step count among `opt`'s parameter states.
template <class State>
int64_t most_steps(const torch::optim::Optimizer& opt) {
  int64_t steps = 0;
  for (const auto& [key, state] : opt.state()) {
    steps = std::max(steps, static_cast<const State&>(*state).step());
  }
  return steps;
}

}  // namespace

TEST_CASE("Adadelta's updates match torch.optim.Adadelta's", "[optim][adadelta]") {
  constexpr int kSteps = 7;
  const json problem = make_problem("Adadelta", kAdadeltaOptions, false, kSteps);
  Problem mine(problem);
  const auto start = mine.values();
  for (int i = 0; i < kSteps; ++i) mine.step();
  check_close(mine.values(), reference(problem));
  CHECK_FALSE(torch::equal(mine.values()[0], start[0]));  // it moved
}

TEST_CASE(
    "SparseAdam's updates match torch.optim.SparseAdam's with repeated rows and empty gradients "
    "and maximize and leave rows no step looks up as they were (on the CPU and on CUDA when "
    "present)",
    "[optim][sparse_adam]") {
  constexpr int kSteps = 7;
  const json problem = make_problem("SparseAdam", kSparseAdamOptions, true, kSteps);
  const auto expected = reference(problem);
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA, 0);
  for (const torch::Device& device : devices) {
    INFO("on " << device);
    Problem mine(problem, device);
    const auto start = mine.values();
    for (int i = 0; i < kSteps; ++i) mine.step();
    const auto end = mine.values();
    check_close(end, expected);
    for (size_t k = 0; k < kShapes.size(); ++k) {
      CHECK_FALSE(torch::equal(end[k], start[k]));
      for (const int64_t row : kUntouched[k]) {
        INFO("parameter " << k << ", row " << row);
        CHECK(torch::equal(end[k][row], start[k][row]));
      }
    }
    // Every table had a gradient at every step, the second an empty one every third step.
    CHECK(mine.opt->state().size() == kShapes.size());
    for (const auto& [key, state] : mine.opt->state()) {
      CHECK(static_cast<const crucible::optim::SparseAdamParamState&>(*state).step() == kSteps);
    }
  }
}

TEST_CASE("Adadelta and SparseAdam resumed from a save continue exactly as if never stopped",
          "[optim]") {
  json problem;
  SECTION("Adadelta") { problem = make_problem("Adadelta", kAdadeltaOptions, false, 0); }
  SECTION("SparseAdam") { problem = make_problem("SparseAdam", kSparseAdamOptions, true, 0); }
  Problem straight(problem);
  Problem first(problem);
  for (int i = 0; i < 4; ++i) {
    straight.step();
    first.step();
  }
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    first.opt->save(archive);
    archive.save_to(saved);
  }
  // The resumed optimizer starts with other options in group 1: the load must restore the saved
  // ones (which LibTorch 1.x's own loads do not).
  json& changed = problem["groups"][1]["options"];
  changed["lr"] = 0.25;
  if (problem["optimizer"] == "Adadelta") {
    changed["rho"] = 0.5;
  } else {
    changed["betas"] = {0.5, 0.5};
    changed["maximize"] = false;
  }
  Problem resumed(problem);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < resumed.params.size(); ++i) resumed.params[i].copy_(first.params[i]);
  }
  torch::serialize::InputArchive archive;
  archive.load_from(saved);
  resumed.opt->load(archive);
  resumed.steps = first.steps;  // the same row pattern next
  CHECK(resumed.opt->param_groups()[1].options().get_lr() ==
        straight.opt->param_groups()[1].options().get_lr());
  for (int i = 0; i < 5; ++i) {
    straight.step();
    resumed.step();
  }
  for (size_t i = 0; i < straight.params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(torch::equal(straight.params[i], resumed.params[i]));
  }
  if (problem["optimizer"] == "Adadelta") {
    CHECK(most_steps<crucible::optim::AdadeltaParamState>(*resumed.opt) == 9);
    const auto& group = resumed.opt->param_groups()[1];
    CHECK(static_cast<const AdadeltaOptions&>(group.options()).rho() == 0.8);
  } else {
    CHECK(most_steps<crucible::optim::SparseAdamParamState>(*resumed.opt) == 9);
    const auto& o = static_cast<const SparseAdamOptions&>(resumed.opt->param_groups()[1].options());
    CHECK(std::get<1>(o.betas()) == 0.99);
    CHECK(o.maximize());
  }
}

TEST_CASE(
    "SparseAdam refuses a dense gradient before any update and a sparse parameter and bad "
    "options: each named",
    "[optim][sparse_adam]") {
  // The tables of group 0 get sparse gradients, group 1's dense ones.
  Problem mixed(make_problem("SparseAdam", kSparseAdamOptions, true, 0));
  mixed.dense = {2};
  const auto start = mixed.values();
  CHECK_THROWS_WITH(mixed.step(), Catch::Contains("SparseAdam: parameter 0 of group 1 has a "
                                                  "dense gradient") &&
                                      Catch::Contains("step dense ones with Adam"));
  const auto after = mixed.values();
  for (size_t k = 0; k < start.size(); ++k) CHECK(torch::equal(after[k], start[k]));
  CHECK(mixed.opt->state().empty());

  const torch::Tensor table = torch::ones({3, 2}, torch::requires_grad());
  CHECK_THROWS_WITH(SparseAdam({table, torch::eye(2).to_sparse()}),
                    Catch::Contains("SparseAdam: parameter 1 of group 0 is a sparse tensor"));
  CHECK_THROWS_WITH(SparseAdam({table, torch::ones({2}, torch::kComplexFloat)}),
                    Catch::Contains("SparseAdam: parameter 1 of group 0 is complex"));
  CHECK_THROWS_WITH(SparseAdam({table}, SparseAdamOptions(0)),
                    Catch::Contains("SparseAdam: invalid learning rate 0"));
  CHECK_THROWS_WITH(SparseAdam({table}, SparseAdamOptions().eps(-1)),
                    Catch::Contains("SparseAdam: invalid eps -1"));
  CHECK_THROWS_WITH(SparseAdam({table}, SparseAdamOptions().betas({1.0, 0.9})),
                    Catch::Contains("SparseAdam: invalid beta1 1"));
  CHECK_THROWS_WITH(SparseAdam({table}, SparseAdamOptions().betas({0.9, -0.5})),
                    Catch::Contains("SparseAdam: invalid beta2 -0.5"));
}

TEST_CASE("Adadelta refuses a sparse gradient before any update and bad options: each named",
          "[optim][adadelta]") {
  Problem mixed(make_problem("Adadelta", kAdadeltaOptions, true, 0));
  mixed.dense = {0};
  const auto start = mixed.values();
  CHECK_THROWS_WITH(mixed.step(),
                    Catch::Contains("Adadelta: parameter 1 of group 0 has a sparse gradient") &&
                        Catch::Contains("crucible::optim::SparseAdam"));
  const auto after = mixed.values();
  for (size_t k = 0; k < start.size(); ++k) CHECK(torch::equal(after[k], start[k]));
  CHECK(mixed.opt->state().empty());
  // A group's own options are checked as the defaults are.
  const torch::Tensor table = torch::ones({3, 2}, torch::requires_grad());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{table});
  groups.emplace_back(std::vector<torch::Tensor>{table.detach().clone().requires_grad_()},
                      std::make_unique<AdadeltaOptions>(AdadeltaOptions().rho(1.5)));
  CHECK_THROWS_WITH(Adadelta(std::move(groups)),
                    Catch::Contains("Adadelta: invalid rho 1.5 in group 1 (0 <= rho <= 1)"));
}
