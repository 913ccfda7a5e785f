#include "config/yaml_writer.h"

#include <cmath>

#include "config/yaml_reader.h"

namespace crucible::config {

void emit_string(YAML::Emitter& out, const std::string& s) {
  if (classify_scalar(s, false) != ScalarType::kString) {
    out << YAML::DoubleQuoted << s;
  } else {
    out << s;
  }
}

void emit_json(YAML::Emitter& out, const nlohmann::json& v) {
  if (v.is_null()) {
    out << YAML::Null;
  } else if (v.is_boolean()) {
    out << (v.get<bool>() ? "true" : "false");
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) {
      out << ".nan";
    } else if (std::isinf(d)) {
      out << (d > 0 ? ".inf" : "-.inf");
    } else {
      out << v.dump();
    }
  } else if (v.is_number()) {
    out << v.dump();
  } else if (v.is_string()) {
    emit_string(out, v.get<std::string>());
  } else if (v.is_array()) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& item : v) emit_json(out, item);
    out << YAML::EndSeq;
  } else {
    out << YAML::BeginMap;
    for (const auto& [key, item] : v.items()) {
      // Plain, "<<" would read back as a merge key.
      if (key == "<<") {
        out << YAML::Key << YAML::DoubleQuoted << key << YAML::Value;
      } else {
        out << YAML::Key << key << YAML::Value;
      }
      emit_json(out, item);
    }
    out << YAML::EndMap;
  }
}

}  // namespace crucible::config
