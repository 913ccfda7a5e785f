#pragma once

#include <optional>
#include <string>

#include <crucible/metrics.h>

namespace crucible::metrics {

// The validation metric `name` of `values`, named as evaluate_batch names it ("loss") or with
// its prefix ("validation_loss"); nullopt when neither is there.
std::optional<double> find_validation_metric(const MetricValues& values, const std::string& name);

// `name` without the "validation_" prefix that metrics.jsonl gives a validation metric, as
// evaluate_batch named it; a name without the prefix as it is.
std::string without_validation_prefix(const std::string& name);

// The names in `values`, comma-separated, for messages.
std::string metric_names(const MetricValues& values);

// " (did you mean 'x'?)" when `name` is a likely typo of a validation metric of `values` (with or
// without its prefix), else "".
std::string did_you_mean_metric(const std::string& name, const MetricValues& values);

}  // namespace crucible::metrics
