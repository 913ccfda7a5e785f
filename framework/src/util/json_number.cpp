#include "util/json_number.h"

#include <cmath>
#include <limits>

namespace crucible::util {

nlohmann::json number_json(double value) {
  if (std::isnan(value)) return nullptr;
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

nlohmann::json numbers_json(const std::map<std::string, double>& values) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : values) out[name] = number_json(value);
  return out;
}

std::optional<double> number_from_json(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  if (value.is_null()) return std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  if (value == "inf") return inf;
  if (value == "-inf") return -inf;
  return std::nullopt;
}

std::map<std::string, double> numbers_from_json(const nlohmann::json& object) {
  std::map<std::string, double> out;
  if (!object.is_object()) return out;
  for (const auto& [name, value] : object.items()) {
    out[name] = number_from_json(value).value_or(std::nan(""));
  }
  return out;
}

}  // namespace crucible::util
