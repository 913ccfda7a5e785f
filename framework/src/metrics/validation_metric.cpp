#include <vector>

#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/metrics.h>

#include "config/suggest.h"
#include "metrics/metric_name.h"

namespace crucible {

namespace metrics {

constexpr std::string_view kValidationPrefix = "validation_";

std::optional<double> find_validation_metric(const MetricValues& values, const std::string& name) {
  auto found = values.find(name);
  if (found == values.end()) found = values.find(std::string(kValidationPrefix) + name);
  if (found == values.end()) return std::nullopt;
  return found->second;
}

std::string without_validation_prefix(const std::string& name) {
  return name.rfind(kValidationPrefix, 0) == 0 ? name.substr(kValidationPrefix.size()) : name;
}

std::string did_you_mean_metric(const std::string& name, const MetricValues& values) {
  std::vector<std::string> candidates;
  for (const auto& [k, v] : values) {
    candidates.push_back(k);
    if (without_validation_prefix(k) != k) candidates.push_back(without_validation_prefix(k));
  }
  return config::did_you_mean(name, candidates);
}

std::string metric_names(const MetricValues& values) {
  std::string names;
  for (const auto& [k, v] : values) names += (names.empty() ? "" : ", ") + k;
  return names;
}

}  // namespace metrics

double validation_metric(const MetricValues& values, const std::string& name,
                         const std::string& user) {
  if (const auto value = metrics::find_validation_metric(values, name)) return *value;
  throw TrainingError(fmt::format("{}: metric '{}' is not among the validation metrics ({}){}",
                                  user, name, metrics::metric_names(values),
                                  metrics::did_you_mean_metric(name, values)));
}

}  // namespace crucible
