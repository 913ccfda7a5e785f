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
  const auto points = crucible::search::grid(space);
  REQUIRE(points.size() == 6);
  CHECK(points[0] == nlohmann::json({{"a", 1}, {"b", "x"}, {"global_batch_size", 32}}));
  CHECK(points[5] == nlohmann::json({{"a", 2}, {"b", "z"}, {"global_batch_size", 32}}));
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
