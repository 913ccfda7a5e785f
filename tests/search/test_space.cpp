// Grid points and random draws of hyperparameter spaces (../shared/SEARCH.md).
#include "catch.h"

#include <cmath>
#include <set>

#include <crucible/errors.h>

#include "search/space.h"

using crucible::HyperparameterSpec;
using Type = crucible::HyperparameterSpec::Type;

namespace {

HyperparameterSpec numeric(Type type, double minval, double maxval, int64_t count) {
  HyperparameterSpec s;
  s.type = type;
  s.minval = minval;
  s.maxval = maxval;
  s.count = count;
  return s;
}

}  // namespace

TEST_CASE("grid points: linear, in the exponent for log, rounded and clamped for int",
          "[search][grid]") {
  using crucible::search::grid_points;
  CHECK(grid_points("x", numeric(Type::kDouble, 0, 1, 3)) ==
        std::vector<nlohmann::json>{0.0, 0.5, 1.0});
  CHECK(grid_points("x", numeric(Type::kDouble, 2, 4, 1)) == std::vector<nlohmann::json>{3.0});
  auto log = numeric(Type::kLog, -3, -1, 3);
  log.base = 10;
  const auto lrs = grid_points("lr", log);
  REQUIRE(lrs.size() == 3);
  CHECK(lrs[0].get<double>() == Approx(0.001));
  CHECK(lrs[1].get<double>() == Approx(0.01));
  CHECK(lrs[2].get<double>() == Approx(0.1));
  CHECK(grid_points("n", numeric(Type::kInt, 1, 3, 10)) == std::vector<nlohmann::json>{1, 2, 3});
  CHECK(grid_points("n", numeric(Type::kInt, 0, 10, 3)) == std::vector<nlohmann::json>{0, 5, 10});
  CHECK_THROWS_WITH(grid_points("units", numeric(Type::kInt, 1, 3, 0)),
                    Catch::Contains("hyperparameters.units: the grid searcher needs a count"));
}

TEST_CASE("the grid is the cartesian product, categoricals and constants included",
          "[search][grid]") {
  crucible::search::Space space;
  space["a"] = numeric(Type::kInt, 1, 2, 2);
  space["b"].type = Type::kCategorical;
  space["b"].vals = {"x", "y", "z"};
  space["global_batch_size"].value = 32;
  const crucible::search::Grid grid(space);
  REQUIRE(grid.size() == 6);
  CHECK(grid.point(0) == nlohmann::json({{"a", 1}, {"b", "x"}, {"global_batch_size", 32}}));
  CHECK(grid.point(1) == nlohmann::json({{"a", 1}, {"b", "y"}, {"global_batch_size", 32}}));
  CHECK(grid.point(3) == nlohmann::json({{"a", 2}, {"b", "x"}, {"global_batch_size", 32}}));
  CHECK(grid.point(5) == nlohmann::json({{"a", 2}, {"b", "z"}, {"global_batch_size", 32}}));
  CHECK(grid.shape() == "a: 2 × b: 3");
}

TEST_CASE("a grid past a million points is refused with its axes, without building it",
          "[search][grid]") {
  crucible::search::Space space;
  // 10^4 points on each of four axes: 10^16 trials, more than memory could list.
  for (const char* name : {"a", "b", "c", "d"}) space[name] = numeric(Type::kDouble, 0, 1, 10000);
  CHECK_THROWS_WITH(crucible::search::Grid(space),
                    "hyperparameters: the grid's points (a: 10000 × b: 10000 × c: 10000 × d: "
                    "10000) are more than the 1000000 a search runs; lower a count");
  // One axis alone past the bound is named by its count.
  CHECK_THROWS_WITH(crucible::search::grid_points("lr", numeric(Type::kLog, -5, -1, 10000000)),
                    "hyperparameters.lr: count 10000000: a grid has at most 1000000 points");
  // An int's count past its range is the range: no bound is reached.
  CHECK(crucible::search::grid_points("n", numeric(Type::kInt, 0, 10, 1000000000000)).size() == 11);
  // Exactly the bound is a grid.
  crucible::search::Space most;
  most["a"] = numeric(Type::kDouble, 0, 1, 1000);
  most["b"] = numeric(Type::kDouble, 0, 1, 1000);
  const crucible::search::Grid grid(most);
  CHECK(grid.size() == 1000000);
  CHECK(grid.point(999999) == nlohmann::json({{"a", 1.0}, {"b", 1.0}}));
}

TEST_CASE("random draws depend on the seed and the trial id alone, within their ranges",
          "[search][random]") {
  crucible::search::Space space;
  space["n"] = numeric(Type::kInt, 3, 5, 0);
  space["lr"] = numeric(Type::kLog, -4, -2, 0);
  space["lr"].base = 10;
  space["p"] = numeric(Type::kDouble, 0.1, 0.2, 0);
  space["act"].type = Type::kCategorical;
  space["act"].vals = {"relu", "tanh"};
  using crucible::search::sample;
  CHECK(sample(space, 7, 3) == sample(space, 7, 3));
  CHECK(sample(space, 7, 3) != sample(space, 7, 4));
  CHECK(sample(space, 7, 3) != sample(space, 8, 3));
  std::set<int64_t> ns;
  std::set<std::string> acts;
  for (int64_t id = 0; id < 200; ++id) {
    const auto h = sample(space, 1, id);
    ns.insert(h["n"].get<int64_t>());
    acts.insert(h["act"].get<std::string>());
    CHECK(h["lr"].get<double>() >= 1e-4);
    CHECK(h["lr"].get<double>() < 1e-2);
    CHECK(h["p"].get<double>() >= 0.1);
    CHECK(h["p"].get<double>() < 0.2);
  }
  CHECK(ns == std::set<int64_t>{3, 4, 5});
  CHECK(acts == std::set<std::string>{"relu", "tanh"});
}
