#include "search/space.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <c10/util/Exception.h>
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
  int64_t count = spec.count;
  if (spec.type == Type::kInt) {
    // Points less than 1 apart round to every integer of the range: as many as it holds.
    const int64_t range = std::llround(spec.maxval) - std::llround(spec.minval) + 1;
    count = std::min(count, std::max<int64_t>(range, 1));
  }
  if (count > Grid::kMostPoints) {
    throw ConfigError(fmt::format("hyperparameters.{}: count {}: a grid has at most {} points",
                                  name, count, Grid::kMostPoints));
  }
  std::vector<double> xs;
  if (count == 1) {
    xs.push_back((spec.minval + spec.maxval) / 2);
  } else {
    for (int64_t i = 0; i < count; ++i) {
      xs.push_back(spec.minval + (spec.maxval - spec.minval) * static_cast<double>(i) /
                                     static_cast<double>(count - 1));
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

Grid::Grid(const Space& space) {
  bool over = false, empty = false;
  for (const auto& [name, spec] : space) {
    axes_.emplace_back(name, grid_points(name, spec));
    const auto n = static_cast<int64_t>(axes_.back().second.size());
    if (n == 0) {
      empty = true;
    } else if (over || size_ > kMostPoints / n) {
      over = true;  // the true count may not fit an int64_t: the axes say what it is
    } else {
      size_ *= n;
    }
  }
  if (empty) {
    size_ = 0;
  } else if (over) {
    throw ConfigError(fmt::format(
        "hyperparameters: the grid's points ({}) are more than the {} a search runs; lower a "
        "count",
        shape(), kMostPoints));
  }
}

nlohmann::json Grid::point(int64_t index) const {
  TORCH_INTERNAL_ASSERT(index >= 0 && index < size_, "Grid::point: ", index, " of ", size_);
  nlohmann::json out = nlohmann::json::object();
  for (auto axis = axes_.rbegin(); axis != axes_.rend(); ++axis) {
    const auto n = static_cast<int64_t>(axis->second.size());
    out[axis->first] = axis->second[static_cast<size_t>(index % n)];
    index /= n;
  }
  return out;
}

std::string Grid::shape() const {
  std::string out;
  for (const auto& [name, points] : axes_) {
    if (points.size() < 2) continue;
    out += fmt::format("{}{}: {}", out.empty() ? "" : " × ", name, points.size());
  }
  return out;
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
