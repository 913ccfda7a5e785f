#include <cmath>
#include <limits>

#include "catch.h"

#include <crucible/crucible.h>

#include "files.h"
#include "process.h"

namespace lr = crucible::lr;
using crucible::testing::TempDir;

namespace {

// An SGD optimizer with two param groups, of rates 1 and 0.5.
crucible::Optimizer two_group_optimizer() {
  auto a = torch::zeros({1}, torch::requires_grad());
  auto b = torch::zeros({1}, torch::requires_grad());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a},
                      std::make_unique<torch::optim::SGDOptions>(1.0));
  groups.emplace_back(std::vector<torch::Tensor>{b},
                      std::make_unique<torch::optim::SGDOptions>(0.5));
  return std::make_shared<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(1.0));
}

// The first group's rate after set_step_count(step).
template <class S>
double rate_at(S& scheduler, int64_t step) {
  scheduler.set_step_count(step);
  return scheduler.get_last_lr()[0];
}

// Steps `a` n times, restores its state into the freshly built `b`, and checks both give the same
// rates now and over the next steps.
void check_round_trip(crucible::LRScheduler& a, crucible::LRScheduler& b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a.step();
  const nlohmann::json state = nlohmann::json::parse(a.state().dump());
  b.load_state(state);
  CHECK(b.step_count() == n);
  for (int64_t i = 0; i < 5; ++i) {
    CHECK(a.get_last_lr() == b.get_last_lr());
    a.step();
    b.step();
  }
}

}  // namespace

TEST_CASE("StepLR, MultiStepLR and LambdaLR follow their formulas", "[train][lr]") {
  lr::StepLR step(two_group_optimizer(), 2, 0.5);
  CHECK(rate_at(step, 1) == 1.0);
  CHECK(rate_at(step, 2) == 0.5);
  CHECK(rate_at(step, 6) == 0.125);
  CHECK(step.get_last_lr()[1] == 0.0625);  // each group from its own base rate
  lr::MultiStepLR multi(two_group_optimizer(), {2, 5}, 0.1);
  CHECK(rate_at(multi, 1) == 1.0);
  CHECK(rate_at(multi, 2) == Approx(0.1));
  CHECK(rate_at(multi, 4) == Approx(0.1));
  CHECK(rate_at(multi, 5) == Approx(0.01));
  CHECK_THROWS_WITH(lr::MultiStepLR(two_group_optimizer(), {3, 3}),
                    Catch::Contains("MultiStepLR: milestones must be positive and increasing, got "
                                    "[3, 3]"));
  lr::LambdaLR lambda(two_group_optimizer(), [](int64_t s) { return 1.0 / (1 + s); });
  CHECK(rate_at(lambda, 3) == 0.25);
}

TEST_CASE("cosine annealing, with and without warm restarts", "[train][lr]") {
  lr::CosineAnnealingLR cosine(two_group_optimizer(), 4, 0.1);
  CHECK(rate_at(cosine, 0) == 1.0);
  CHECK(rate_at(cosine, 2) == Approx(0.55));
  CHECK(rate_at(cosine, 4) == Approx(0.1));
  CHECK(cosine.get_last_lr()[1] == Approx(0.1));  // eta_min is a rate, the same for each group
  CHECK(rate_at(cosine, 1) == Approx(0.1 + 0.9 * (1 + std::cos(M_PI / 4)) / 2));
  // Cycles of 2, 4, 8 steps: restarts at steps 2 and 6.
  lr::CosineAnnealingWarmRestarts sgdr(two_group_optimizer(), 2, 2);
  const std::vector<double> expected = {1, 0.5, 1, 1 - 0.5 * (1 - std::cos(M_PI / 4)), 0.5};
  for (size_t s = 0; s < expected.size(); ++s) {
    INFO("step " << s);
    CHECK(rate_at(sgdr, static_cast<int64_t>(s)) == Approx(expected[s]));
  }
  CHECK(rate_at(sgdr, 6) == 1.0);
  CHECK(rate_at(sgdr, 10) == Approx(0.5));
  lr::CosineAnnealingWarmRestarts fixed(two_group_optimizer(), 3);
  CHECK(rate_at(fixed, 3) == 1.0);
  CHECK(rate_at(fixed, 7) == rate_at(fixed, 1));
  // Fixed cycles in closed form: a step count no loop over cycles would reach in time.
  CHECK(rate_at(fixed, 3'000'000'000'001) == rate_at(fixed, 1));
}

TEST_CASE("one-cycle rises to the peak then falls to its floor", "[train][lr]") {
  lr::OneCycleLR cycle(two_group_optimizer(), 10, 0.3, 25,
                       1e4);  // peak at step 2, floor from step 9
  CHECK(rate_at(cycle, 0) == Approx(0.04));
  CHECK(rate_at(cycle, 1) == Approx(0.52));
  CHECK(rate_at(cycle, 2) == 1.0);
  CHECK(rate_at(cycle, 9) == Approx(4e-6));
  CHECK(rate_at(cycle, 20) == Approx(4e-6));
  const double mid = rate_at(cycle, 5);
  CHECK(mid == Approx(4e-6 + (1 - 4e-6) * (1 + std::cos(M_PI * 3 / 7)) / 2));
  // A rise of no step (its peak at step 0 or before) is refused, not a NaN rate.
  for (const auto& [total, pct] : {std::pair<int64_t, double>{10, 0.1}, {4, 0.25}, {20, 0.04}}) {
    CHECK_THROWS_WITH(lr::OneCycleLR(two_group_optimizer(), total, pct),
                      Catch::Contains("it must exceed 1"));
  }
  lr::OneCycleLR short_rise(two_group_optimizer(), 10, 0.15);  // peak at step 0.5
  CHECK(rate_at(short_rise, 0) == Approx(0.04));
  CHECK(std::isfinite(rate_at(short_rise, 1)));
}

namespace {

// Two param groups of rates 1 and 0.5, otherwise with the options `like`, in an optimizer built by
// `make` from them.
template <class Options, class Make>
crucible::Optimizer two_groups(const Options& like, Make make) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (double rate : {1.0, 0.5}) {
    auto options = std::make_unique<Options>(like);
    options->lr(rate);
    groups.emplace_back(std::vector<torch::Tensor>{torch::zeros({1}, torch::requires_grad())},
                        std::move(options));
  }
  return make(std::move(groups));
}

// Each group's momentum as OneCycleLR cycles it: SGD's momentum, Adam's first beta.
std::vector<double> momenta(const crucible::Optimizer& optimizer) {
  std::vector<double> out;
  for (auto& group : optimizer->param_groups()) {
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&group.options())) {
      out.push_back(sgd->momentum());
    } else {
      out.push_back(std::get<0>(dynamic_cast<torch::optim::AdamOptions&>(group.options()).betas()));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("one-cycle cycles momentum as PyTorch's OneCycleLR does, in SGD and in Adam",
          "[train][lr]") {
  // PyTorch's rates and momenta over 10 steps of two groups peaking at 1 and 0.5.
  TempDir tmp;
  const std::string script = tmp / "one_cycle.py";
  crucible::testing::write_file(script, R"(import json, sys, torch
def run(make):
    params = [torch.zeros(1, requires_grad=True) for _ in range(2)]
    opt = make([{"params": [params[0]], "lr": 1.0}, {"params": [params[1]], "lr": 0.5}])
    cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[1.0, 0.5], total_steps=10)
    rows = []
    for _ in range(10):
        rows.append([g["lr"] for g in opt.param_groups] +
                    [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups])
        opt.step()
        cycle.step()
    return rows
with open(sys.argv[1], "w") as out:
    json.dump({"sgd": run(lambda g: torch.optim.SGD(g, lr=1.0, momentum=0.9)),
               "adam": run(lambda g: torch.optim.Adam(g, lr=1.0))}, out)
)");
  const auto py = crucible::testing::run_command(crucible::testing::kPython + " " + script + " " +
                                                 (tmp / "expected.json"));
  INFO(py.output);
  REQUIRE(py.exit_code == 0);
  const auto expected = nlohmann::json::parse(crucible::testing::read_file(tmp / "expected.json"));
  const crucible::Optimizer sgd =
      two_groups(torch::optim::SGDOptions(1.0).momentum(0.9), [](auto groups) {
        return std::make_shared<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(1));
      });
  const crucible::Optimizer adam = two_groups(torch::optim::AdamOptions(1.0), [](auto groups) {
    return std::make_shared<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(1.0));
  });
  for (const auto& [name, optimizer] : {std::pair{"sgd", sgd}, std::pair{"adam", adam}}) {
    lr::OneCycleLR cycle(optimizer, 10);
    REQUIRE(expected[name].size() == 10);
    for (int64_t step = 0; step < 10; ++step) {
      INFO(name << " step " << step);
      cycle.set_step_count(step);
      const auto rates = cycle.get_last_lr();
      const auto m = momenta(optimizer);
      const auto& row = expected[name][step];
      CHECK(rates[0] == Approx(row[0].get<double>()).epsilon(1e-12));
      CHECK(rates[1] == Approx(row[1].get<double>()).epsilon(1e-12));
      CHECK(m[0] == Approx(row[2].get<double>()).epsilon(1e-12));
      CHECK(m[1] == Approx(row[3].get<double>()).epsilon(1e-12));
    }
    // Past its length the momentum stays at its maximum.
    cycle.set_step_count(25);
    CHECK(momenta(optimizer) == std::vector<double>{0.95, 0.95});
  }
  // Adam's second beta is left alone.
  CHECK(std::get<1>(
            dynamic_cast<torch::optim::AdamOptions&>(adam->param_groups()[1].options()).betas()) ==
        0.999);
}

TEST_CASE("one-cycle without momentum cycling leaves it, and an optimizer with none is refused",
          "[train][lr]") {
  const crucible::Optimizer sgd =
      two_groups(torch::optim::SGDOptions(1.0).momentum(0.5), [](auto groups) {
        return std::make_shared<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(1));
      });
  lr::OneCycleLR fixed(sgd, 10, lr::OneCycleOptions().cycle_momentum(false));
  lr::OneCycleLR positional(sgd, 10, 0.3);
  for (auto* cycle : {&fixed, &positional}) {
    cycle->set_step_count(2);
    CHECK(cycle->get_last_lr()[0] == 1.0);
    for (auto& group : sgd->param_groups()) {
      CHECK(dynamic_cast<torch::optim::SGDOptions&>(group.options()).momentum() == 0.5);
    }
  }
  const crucible::Optimizer adagrad = two_groups(
      torch::optim::AdagradOptions(1.0),
      [](auto groups) { return std::make_shared<torch::optim::Adagrad>(std::move(groups)); });
  CHECK_THROWS_WITH(lr::OneCycleLR(adagrad, 10),
                    Catch::Contains("param group 0 has no momentum to cycle") &&
                        Catch::Contains("cycle_momentum(false)"));
  CHECK_NOTHROW(lr::OneCycleLR(adagrad, 10, lr::OneCycleOptions().cycle_momentum(false)));
  // A warm-up in front would use its rates only.
  CHECK_THROWS_WITH(lr::LinearWarmup(lr::OneCycleLR(sgd, 10), 3),
                    Catch::Contains("cannot follow it") && Catch::Contains("pct_start"));
  CHECK_NOTHROW(lr::LinearWarmup(lr::OneCycleLR(sgd, 10, 0.3), 3));
}

TEST_CASE("polynomial decay reaches its end rate and stays", "[train][lr]") {
  lr::PolynomialLR poly(two_group_optimizer(), 4, 2.0);
  CHECK(rate_at(poly, 2) == 0.25);
  CHECK(rate_at(poly, 4) == 0.0);
  CHECK(rate_at(poly, 9) == 0.0);
  lr::PolynomialLR to_floor(two_group_optimizer(), 4, 1.0, 0.1);
  CHECK(rate_at(to_floor, 2) == Approx(0.55));
  CHECK(rate_at(to_floor, 8) == Approx(0.1));
}

TEST_CASE("linear warm-up ramps to any schedule's first rate, then hands over", "[train][lr]") {
  lr::LinearWarmup warm(lr::CosineAnnealingLR(two_group_optimizer(), 4), 2);
  CHECK(rate_at(warm, 0) == 0.0);
  CHECK(rate_at(warm, 1) == 0.5);
  CHECK(warm.get_last_lr()[1] == 0.25);
  CHECK(rate_at(warm, 2) == 1.0);
  CHECK(rate_at(warm, 4) == Approx(0.5));
  CHECK(rate_at(warm, 6) == Approx(0.0).margin(1e-15));
  lr::LinearWarmup from_third(lr::StepLR(two_group_optimizer(), 1, 0.5), 4, 1.0 / 3);
  CHECK(rate_at(from_third, 0) == Approx(1.0 / 3));
  CHECK(rate_at(from_third, 4) == 1.0);
  CHECK(rate_at(from_third, 5) == 0.5);
}

TEST_CASE("reduce-on-plateau drops the rate after patience validations without improvement",
          "[train][lr]") {
  lr::ReduceLROnPlateau plateau(
      two_group_optimizer(),
      lr::PlateauOptions().metric("loss").patience(1).factor(0.5).min_lr(0.2));
  const std::vector<std::pair<double, double>> feed = {
      {1.0, 1.0}, {1.0, 1.0}, {1.0, 0.5},  // two bad validations > patience 1: a drop
      {0.5, 0.5}, {0.6, 0.5}, {0.7, 0.25}, {0.8, 0.25}, {0.9, 0.2}};  // floored at min_lr
  for (size_t i = 0; i < feed.size(); ++i) {
    INFO("validation " << i);
    plateau.observe_validation({{"validation_loss", feed[i].first}});
    CHECK(plateau.get_last_lr()[0] == Approx(feed[i].second));
  }
  CHECK(plateau.get_last_lr()[1] == 0.2);
  plateau.step();  // steps do not change its rate
  CHECK(plateau.get_last_lr()[0] == Approx(0.2));
  CHECK_THROWS_WITH(plateau.observe_validation({{"validation_accuracy", 1.0}}),
                    Catch::Contains("metric 'loss' is not among the validation metrics "
                                    "(validation_accuracy)"));
  lr::ReduceLROnPlateau cooled(
      two_group_optimizer(),
      lr::PlateauOptions().smaller_is_better(false).patience(0).cooldown(2).factor(0.5));
  for (double v : {1.0, 0.9, 0.9, 0.9, 0.9}) cooled.observe_validation({{"validation_loss", v}});
  CHECK(cooled.drops() == 2);  // a drop, two validations of cooldown, a drop
}

TEST_CASE("reduce-on-plateau lowers rates as PyTorch does: never up to min_lr, not by 1e-8 or less",
          "[train][lr]") {
  // Rates 1 and 0.5 with min_lr 0.6: a drop takes the first to 0.6; the second keeps its 0.5.
  lr::ReduceLROnPlateau floored(
      two_group_optimizer(),
      lr::PlateauOptions().metric("loss").patience(0).factor(0.5).min_lr(0.6));
  CHECK(floored.get_last_lr() == std::vector<double>{1.0, 0.5});
  for (double v : {1.0, 1.0}) floored.observe_validation({{"validation_loss", v}});
  CHECK(floored.drops() == 1);
  CHECK(floored.get_last_lr() == std::vector<double>{0.6, 0.5});
  // Ten drops by 0.1: the first group stops at 1e-8 (to 1e-9 is a change of 9e-9), the second
  // at 5e-9 (its last drop, from 5e-8, changed it by 4.5e-8).
  lr::ReduceLROnPlateau tiny(two_group_optimizer(),
                             lr::PlateauOptions().metric("loss").patience(0).factor(0.1));
  for (int i = 0; i < 11; ++i) tiny.observe_validation({{"validation_loss", 1.0}});
  CHECK(tiny.drops() == 10);
  CHECK(tiny.get_last_lr()[0] == Approx(1e-8));
  CHECK(tiny.get_last_lr()[1] == Approx(5e-9));
}

TEST_CASE("reduce-on-plateau takes a floor per param group, also behind a warm-up", "[train][lr]") {
  // Rates 1 and 0.5 halved at every validation, floors 0.3 and 0.2.
  const auto options =
      lr::PlateauOptions().metric("loss").patience(0).factor(0.5).min_lr(0.9).min_lrs({0.3, 0.2});
  lr::ReduceLROnPlateau floored(two_group_optimizer(), options);
  const std::vector<std::vector<double>> expected = {
      {1.0, 0.5}, {0.5, 0.25}, {0.3, 0.2}, {0.3, 0.2}};
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("validation " << i);
    floored.observe_validation({{"validation_loss", 1.0}});
    CHECK(floored.get_last_lr() == expected[i]);
  }
  // The same behind a warm-up of 2 steps, once it is over; during it, half way to each rate.
  lr::LinearWarmup warm(lr::ReduceLROnPlateau(two_group_optimizer(), options), 2);
  warm.set_step_count(1);
  CHECK(warm.get_last_lr() == std::vector<double>{0.5, 0.25});
  warm.set_step_count(2);
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("validation " << i);
    warm.observe_validation({{"validation_loss", 1.0}});
    CHECK(warm.get_last_lr() == expected[i]);
  }
  CHECK_THROWS_WITH(
      lr::ReduceLROnPlateau(two_group_optimizer(), lr::PlateauOptions().min_lrs({0.1})),
      Catch::Contains("min_lrs holds 1 floors for 2 param groups"));
}

TEST_CASE("reduce-on-plateau measures improvements relative to the best or absolute",
          "[train][lr]") {
  // From a best of 10, with threshold 0.5: 9 improves by more than 0.5 but not below 10 * 0.5.
  const auto options = lr::PlateauOptions().metric("loss").patience(0).factor(0.5).threshold(0.5);
  lr::ReduceLROnPlateau relative(two_group_optimizer(), options);
  lr::ReduceLROnPlateau absolute(two_group_optimizer(), lr::PlateauOptions(options).threshold_mode(
                                                            lr::ThresholdMode::kAbsolute));
  for (auto* s : {&relative, &absolute}) {
    for (double v : {10.0, 9.0}) s->observe_validation({{"validation_loss", v}});
  }
  CHECK(relative.drops() == 1);
  CHECK(absolute.drops() == 0);
  // Larger is better: from 10, 10.4 is within the margin either way; 10.6 beats only best + 0.5.
  auto larger = lr::PlateauOptions(options).smaller_is_better(false);
  lr::ReduceLROnPlateau up_relative(two_group_optimizer(), larger);
  lr::ReduceLROnPlateau up_absolute(two_group_optimizer(),
                                    larger.threshold_mode(lr::ThresholdMode::kAbsolute));
  for (auto* s : {&up_relative, &up_absolute}) {
    for (double v : {10.0, 10.4, 10.6}) s->observe_validation({{"validation_loss", v}});
  }
  CHECK(up_relative.drops() == 2);
  CHECK(up_absolute.drops() == 1);
  CHECK_THROWS_WITH(
      lr::ReduceLROnPlateau(two_group_optimizer(), lr::PlateauOptions(options).threshold(-1)),
      Catch::Contains("threshold must not be negative"));
}

TEST_CASE("reduce-on-plateau: NaN never improves, and an infinite best survives its state",
          "[train][lr]") {
  const auto options = lr::PlateauOptions().metric("loss").patience(1).factor(0.5);
  // A NaN first is a bad validation, not the best: the values after it improve.
  lr::ReduceLROnPlateau first_nan(two_group_optimizer(), options);
  for (double v : {std::nan(""), 1.0, 0.9, 0.8}) {
    first_nan.observe_validation({{"validation_loss", v}});
  }
  CHECK(first_nan.drops() == 0);
  // A best of -inf, through the JSON of a checkpoint: -inf again improves on neither.
  const double inf = std::numeric_limits<double>::infinity();
  lr::ReduceLROnPlateau a(two_group_optimizer(), options), b(two_group_optimizer(), options);
  a.observe_validation({{"validation_loss", -inf}});
  b.load_state(nlohmann::json::parse(a.state().dump()));
  for (auto* s : {&a, &b}) {
    for (int i = 0; i < 2; ++i) s->observe_validation({{"validation_loss", -inf}});
  }
  CHECK(a.drops() == 1);
  CHECK(b.drops() == 1);
}

TEST_CASE("every built-in scheduler's state round-trips exactly", "[train][lr]") {
  SECTION("step-count schedules") {
    lr::OneCycleLR a(two_group_optimizer(), 20), b(two_group_optimizer(), 20);
    check_round_trip(a, b, 7);
    lr::CosineAnnealingWarmRestarts c(two_group_optimizer(), 3, 2), d(two_group_optimizer(), 3, 2);
    check_round_trip(c, d, 11);
    lr::MultiStepLR e(two_group_optimizer(), {4, 9}), f(two_group_optimizer(), {4, 9});
    check_round_trip(e, f, 5);
    lr::PolynomialLR g(two_group_optimizer(), 9, 1.5), h(two_group_optimizer(), 9, 1.5);
    check_round_trip(g, h, 3);
  }
  SECTION("reduce-on-plateau inside a warm-up") {
    auto options = lr::PlateauOptions().patience(0).factor(0.5);
    lr::LinearWarmup a(lr::ReduceLROnPlateau(two_group_optimizer(), options), 3);
    lr::LinearWarmup b(lr::ReduceLROnPlateau(two_group_optimizer(), options), 3);
    for (double v : {1.0, 2.0, 3.0}) a.observe_validation({{"validation_loss", v}});
    check_round_trip(a, b, 4);
    CHECK(a.state()["after"]["drops"] == 2);
    CHECK(b.state() == a.state());
  }
  CHECK_THROWS_WITH(lr::StepLR(two_group_optimizer(), 1).load_state({{"steps", 3}}),
                    Catch::Contains("lacks step_count"));
}

TEST_CASE("a schedule's argument out of its range is refused with its value", "[train][lr]") {
  CHECK_THROWS_WITH(lr::StepLR(two_group_optimizer(), 0),
                    Catch::Contains("StepLR: step_size must be positive, got 0"));
  CHECK_THROWS_WITH(
      lr::ReduceLROnPlateau(two_group_optimizer(), lr::PlateauOptions().metric("loss").factor(1.5)),
      Catch::Contains("ReduceLROnPlateau: factor must be in (0, 1), got 1.5"));
  CHECK_THROWS_WITH(lr::ReduceLROnPlateau(two_group_optimizer(),
                                          lr::PlateauOptions().metric("loss").cooldown(-2)),
                    Catch::Contains("patience and cooldown must not be negative, got 10 and -2"));
  CHECK_THROWS_WITH(lr::OneCycleLR(two_group_optimizer(), 0),
                    Catch::Contains("OneCycleLR: total_steps must be positive, got 0"));
  CHECK_THROWS_WITH(lr::OneCycleLR(two_group_optimizer(), 100, 1.5),
                    Catch::Contains("OneCycleLR: pct_start must be in (0, 1), got 1.5"));
  CHECK_THROWS_WITH(
      lr::OneCycleLR(two_group_optimizer(), 100, lr::OneCycleOptions().final_div_factor(-1)),
      Catch::Contains("div_factor and final_div_factor must be positive, got 25 and -1"));
}
