#include <crucible/errors.h>
#include <crucible/json_value.h>

namespace crucible::detail {

std::string json_type_name(const nlohmann::json& value) {
  if (value.is_boolean()) return "bool";
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "float";
  if (value.is_string()) return "string";
  if (value.is_array()) return "list";
  if (value.is_object()) return "mapping";
  return "null";
}

void throw_json_type_error(const std::string& what, const nlohmann::json& value,
                           const std::string& expected) {
  // A null has no value to show beside its type.
  const std::string held = value.is_null() ? "null" : json_type_name(value) + " " + value.dump();
  throw ConfigError(what + " is " + held + ", expected " + expected);
}

}  // namespace crucible::detail
