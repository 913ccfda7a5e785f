#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace crucible {
namespace detail {

// The name of a JSON value's type as a user reads it: "integer", "float", "string", ...
std::string json_type_name(const nlohmann::json& value);

// Throws crucible::Error(kExitBadUsage) saying that `what` holds `value` where `expected` was
// needed.
[[noreturn]] void throw_json_type_error(const std::string& what, const nlohmann::json& value,
                                        const std::string& expected);

// Whether the JSON integer `value` lies in T's range.
template <class T>
bool integer_fits(const nlohmann::json& value) {
  if (value.is_number_unsigned()) {
    return value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  }
  const int64_t v = value.get<int64_t>();
  if constexpr (std::is_signed_v<T>) {
    return v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max();
  } else {
    return v >= 0 && static_cast<uint64_t>(v) <= std::numeric_limits<T>::max();
  }
}

// Converts `value` to T with YAML's typing kept strict: integers only from integers that T holds,
// floating point from any number, bool only from booleans, strings only from strings. Containers
// convert element-wise. Throws crucible::Error (kExitBadUsage) naming `what` ("hyperparameter
// 'lr'") otherwise.
template <class T>
T json_as(const nlohmann::json& value, const std::string& what) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) throw_json_type_error(what, value, "bool");
    return value.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!value.is_number_integer()) throw_json_type_error(what, value, "integer");
    if (!integer_fits<T>(value)) {
      throw_json_type_error(what, value,
                            "integer from " + std::to_string(std::numeric_limits<T>::min()) +
                                " to " + std::to_string(std::numeric_limits<T>::max()));
    }
    return value.get<T>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!value.is_number()) throw_json_type_error(what, value, "float");
    return value.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) throw_json_type_error(what, value, "string");
    return value.get<std::string>();
  } else if constexpr (std::is_same_v<T, nlohmann::json>) {
    return value;
  } else {
    static_assert(std::is_same_v<T, std::vector<typename T::value_type>>,
                  "json_as supports bool, integers, floats, std::string, nlohmann::json and "
                  "std::vector of those");
    if (!value.is_array()) throw_json_type_error(what, value, "list");
    T out;
    for (size_t i = 0; i < value.size(); ++i) {
      out.push_back(
          json_as<typename T::value_type>(value[i], what + "[" + std::to_string(i) + "]"));
    }
    return out;
  }
}

}  // namespace detail
}  // namespace crucible
