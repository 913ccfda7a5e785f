#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/metrics.h>

namespace crucible {

double validation_metric(const MetricValues& values, const std::string& name,
                         const std::string& user) {
  auto found = values.find(name);
  if (found == values.end()) found = values.find("validation_" + name);
  if (found != values.end()) return found->second;
  std::string names;
  for (const auto& [k, v] : values) names += (names.empty() ? "" : ", ") + k;
  throw TrainingError(
      fmt::format("{}: metric '{}' is not among the validation metrics ({})", user, name, names));
}

}  // namespace crucible
