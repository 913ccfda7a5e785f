#include "config/hyperparameters.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/enum_names.h"
#include "config/suggest.h"
#include "config/yaml_writer.h"

namespace crucible::config {
namespace {

using Type = HyperparameterSpec::Type;

// Whether `value` is a mapping whose "type" names a kind of hyperparameter (int, log, ...).
bool is_typed(const nlohmann::json& value) {
  const auto type = value.is_object() ? value.find("type") : value.end();
  return type != value.end() && type->is_string() && names<Type>().parse(type->get<std::string>());
}

// Whether `value`, a constant, is or holds (at any depth, lists included) a mapping whose
// "type" names a kind of hyperparameter.
bool holds_typed(const nlohmann::json& value) {
  if (is_typed(value)) return true;
  if (!value.is_structured()) return false;
  return std::any_of(value.begin(), value.end(),
                     [](const nlohmann::json& v) { return holds_typed(v); });
}

// Refuses a hyperparameter spec (a mapping whose "type" is int, log, ...) among the nested
// mappings of the plain mapping `node` at `path`: Determined searches such nested spaces,
// Crucible would pass the spec to the trial as a constant. Lists are constants in both.
void refuse_nested_specs(const Source& source, const YAML::Node& node, const std::string& path) {
  if (!node.IsMap()) return;
  for (const auto& item : node) {
    const YAML::Node& child = item.second;
    const std::string child_path = path + "." + item.first.Scalar();
    if (child.IsMap() && child["type"].IsDefined() && child["type"].IsScalar() &&
        names<Type>().parse(child["type"].Scalar())) {
      source.fail(child_path, child,
                  "a hyperparameter spec inside a nested mapping: Crucible searches top-level "
                  "hyperparameters only; give it a top-level name of its own (and read it "
                  "with ctx.hparam), or, for a constant mapping that holds this literally, wrap "
                  "the top-level one in {type: const, val: ...}");
    }
    refuse_nested_specs(source, child, child_path);
  }
}

HyperparameterSpec read_one(const Source& source, const YAML::Node& node, const std::string& path) {
  HyperparameterSpec spec;
  if (!node.IsMap() || !node["type"].IsDefined()) {
    refuse_nested_specs(source, node, path);
    spec.value = yaml_to_json(node, source, path);
    return spec;
  }
  // A type that is none of the spec types: say so before the keys it does not know.
  const YAML::Node type = node["type"];
  if (type.IsScalar() && !names<Type>().parse(type.Scalar())) {
    const std::vector<std::string> types = names<Type>().names();
    source.fail(path + ".type", type,
                fmt::format("'{}' is not a hyperparameter type (one of {}){}; a constant mapping "
                            "with a key named type is written {{type: const, val: {{type: {}, "
                            "...}}}}",
                            type.Scalar(), fmt::join(types, ", "),
                            did_you_mean(type.Scalar(), types), type.Scalar()));
  }
  // The type decides the keys: each type's reader below names the ones it takes.
  std::vector<std::string> written;
  for (const auto& item : node) {
    if (item.first.IsScalar()) written.push_back(item.first.Scalar());
  }
  spec.type = MapReader(source, node, path, written).enumerated("type", Type::kConst);
  auto allowed = [&](std::vector<std::string> keys) {
    keys.push_back("type");
    return MapReader(source, node, path, keys);
  };
  if (spec.type == Type::kConst) {
    MapReader r = allowed({"val"});
    if (!r.has("val")) r.fail_missing("val");
    spec.value = yaml_to_json(node["val"], source, path + ".val");
  } else if (spec.type == Type::kCategorical) {
    MapReader r = allowed({"vals"});
    if (!r.has("vals")) r.fail_missing("vals");
    if (!node["vals"].IsSequence() || node["vals"].size() == 0) {
      r.fail("vals", "expected a non-empty list of values");
    }
    for (const auto& v : node["vals"]) {
      spec.vals.push_back(
          yaml_to_json(v, source, fmt::format("{}.vals[{}]", path, spec.vals.size())));
    }
  } else {
    const bool is_int = spec.type == Type::kInt;
    const bool is_log = spec.type == Type::kLog;
    MapReader r = is_log ? allowed({"minval", "maxval", "base", "count"})
                         : allowed({"minval", "maxval", "count"});
    auto bound = [&](const char* key) -> double {
      if (!r.has(key)) r.fail_missing(key);
      const double v =
          is_int ? static_cast<double>(r.integer(key, 0, INT64_MIN)) : r.number(key, 0);
      if (!std::isfinite(v)) r.fail(key, fmt::format("{} is not a finite number", v));
      // Bounds are kept as doubles: an int space's must be exact in one.
      constexpr double kExact = 9007199254740992.0;  // 2^53
      if (is_int && std::abs(v) > kExact) {
        r.fail(key, fmt::format("{:.0f} is beyond 2^53 (9007199254740992), where an int space's "
                                "bounds stop being exact",
                                v));
      }
      return v;
    };
    spec.minval = bound("minval");
    spec.maxval = bound("maxval");
    if (spec.minval > spec.maxval) {
      r.fail("maxval", fmt::format("maxval ({}) is below minval ({})", spec.maxval, spec.minval));
    }
    spec.base = r.number("base", 10);
    if (is_log && !(spec.base > 1 && std::isfinite(spec.base))) {
      r.fail("base", "a log base must be greater than 1 and finite");
    }
    spec.count = r.integer("count", 0, 1);
    // The values drawn or stepped through must be finite too.
    if (is_log && !std::isfinite(std::pow(spec.base, spec.maxval))) {
      r.fail("maxval", fmt::format("{}^{} is beyond a double's range", spec.base, spec.maxval));
    }
    if (!is_log && !std::isfinite(spec.maxval - spec.minval)) {
      r.fail("maxval", fmt::format("the range from minval {} to maxval {} is beyond a double's",
                                   spec.minval, spec.maxval));
    }
  }
  return spec;
}

void emit_one(YAML::Emitter& out, const HyperparameterSpec& spec) {
  if (spec.type == Type::kConst) {
    // A mapping with any "type" reads as a spec; one holding a spec's mapping is refused.
    if ((spec.value.is_object() && spec.value.contains("type")) || holds_typed(spec.value)) {
      out << YAML::BeginMap << YAML::Key << "type" << YAML::Value << "const" << YAML::Key << "val"
          << YAML::Value;
      emit_json(out, spec.value);
      out << YAML::EndMap;
    } else {
      emit_json(out, spec.value);
    }
    return;
  }
  out << YAML::Flow << YAML::BeginMap << YAML::Key << "type" << YAML::Value
      << names<Type>().name(spec.type);
  if (spec.type == Type::kCategorical) {
    out << YAML::Key << "vals" << YAML::Value;
    emit_json(out, nlohmann::json(spec.vals));
  } else {
    const bool is_int = spec.type == Type::kInt;
    auto bound = [&](double v) {
      emit_json(out, is_int ? nlohmann::json(static_cast<int64_t>(v)) : nlohmann::json(v));
    };
    out << YAML::Key << "minval" << YAML::Value;
    bound(spec.minval);
    out << YAML::Key << "maxval" << YAML::Value;
    bound(spec.maxval);
    if (spec.type == Type::kLog) {
      out << YAML::Key << "base" << YAML::Value;
      emit_json(out, nlohmann::json(spec.base));
    }
    if (spec.count > 0) out << YAML::Key << "count" << YAML::Value << spec.count;
  }
  out << YAML::EndMap;
}

}  // namespace

Hyperparameters read_hyperparameters(const MapReader& top) {
  const Source& source = top.source();
  const YAML::Node hp = top.node("hyperparameters");
  if (!hp.IsMap()) top.fail("hyperparameters", "expected a mapping of name: value");
  MapReader(source, hp, "hyperparameters", [&] {
    std::vector<std::string> names;  // any name is valid; the reader still rejects duplicates
    for (const auto& kv : hp) names.push_back(kv.first.Scalar());
    return names;
  }());
  Hyperparameters out;
  for (const auto& kv : hp) {
    const std::string name = kv.first.Scalar();
    out[name] = read_one(source, kv.second, "hyperparameters." + name);
  }
  auto gbs = out.find("global_batch_size");
  if (gbs == out.end()) {
    source.fail("hyperparameters.global_batch_size", hp,
                "required hyperparameter 'global_batch_size' is missing: the records of one "
                "training step over all slots (add it here, or --set "
                "hyperparameters.global_batch_size=N)");
  }
  if (gbs->second.type != Type::kConst) {
    source.fail("hyperparameters.global_batch_size", hp["global_batch_size"],
                "is a search space; it must be a positive integer constant (search over a "
                "per-slot batch size of your own instead)");
  }
  if (!gbs->second.value.is_number_integer() || gbs->second.value.get<int64_t>() <= 0) {
    source.fail("hyperparameters.global_batch_size", hp["global_batch_size"],
                "must be a positive integer constant, got " + gbs->second.value.dump());
  }
  return out;
}

void emit_hyperparameters(YAML::Emitter& out, const Hyperparameters& hyperparameters) {
  out << YAML::BeginMap;
  for (const auto& [name, spec] : hyperparameters) {
    out << YAML::Key << name << YAML::Value;
    emit_one(out, spec);
  }
  out << YAML::EndMap;
}

}  // namespace crucible::config
