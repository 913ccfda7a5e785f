#include "search/space.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "data/shuffle.h"

namespace crucible::search {
namespace {

using Type = HyperparameterSpec::Type;

// Uniform in [0, 1) from the top 53 bits of one draw.
double unit(std::mt19937_64& gen) { return static_cast<double>(gen() >> 11) * 0x1.0p-53; }

}  // namespace

std::vector<nlohmann::json> grid_points(const std::string& name, const HyperparameterSpec& spec) {
  if (spec.type == Type::kConst) return {spec.value};
  if (spec.type == Type::kCategorical) return spec.vals;
  if (spec.count < 1) {
    throw ConfigError(fmt::format(
        "hyperparameters.{}: the grid searcher needs a count (e.g. count: 4) for every int, "
        "double and log hyperparameter",
        name));
  }
  std::vector<double> xs;
  if (spec.count == 1) {
    xs.push_back((spec.minval + spec.maxval) / 2);
  } else {
    for (int64_t i = 0; i < spec.count; ++i) {
      xs.push_back(spec.minval + (spec.maxval - spec.minval) * static_cast<double>(i) /
                                     static_cast<double>(spec.count - 1));
    }
  }
  std::vector<nlohmann::json> out;
  for (const double x : xs) {
    if (spec.type == Type::kInt) {
      const auto v = static_cast<int64_t>(std::llround(x));
      if (out.empty() || out.back().get<int64_t>() != v) out.emplace_back(v);
    } else {
      out.emplace_back(spec.type == Type::kLog ? std::pow(spec.base, x) : x);
    }
  }
  return out;
}

std::vector<nlohmann::json> grid(const Space& space) {
  std::vector<nlohmann::json> points = {nlohmann::json::object()};
  for (const auto& [name, spec] : space) {
    std::vector<nlohmann::json> next;
    for (const auto& point : points) {
      for (const auto& value : grid_points(name, spec)) {
        nlohmann::json p = point;
        p[name] = value;
        next.push_back(std::move(p));
      }
    }
    points = std::move(next);
  }
  return points;
}

nlohmann::json sample(const Space& space, uint64_t seed, int64_t trial_id) {
  std::mt19937_64 gen(data::mix64(seed ^ data::mix64(static_cast<uint64_t>(trial_id) + 1)));
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, spec] : space) {
    const double u = unit(gen);
    switch (spec.type) {
      case Type::kConst:
        out[name] = spec.value;
        break;
      case Type::kInt: {
        const auto low = static_cast<int64_t>(spec.minval);
        const auto size = static_cast<int64_t>(spec.maxval) - low + 1;
        out[name] =
            low + std::min<int64_t>(static_cast<int64_t>(u * static_cast<double>(size)), size - 1);
        break;
      }
      case Type::kDouble:
        out[name] = spec.minval + u * (spec.maxval - spec.minval);
        break;
      case Type::kLog:
        out[name] = std::pow(spec.base, spec.minval + u * (spec.maxval - spec.minval));
        break;
      case Type::kCategorical: {
        const auto n = spec.vals.size();
        out[name] = spec.vals[std::min(static_cast<size_t>(u * static_cast<double>(n)), n - 1)];
        break;
      }
    }
  }
  return out;
}

}  // namespace crucible::search
