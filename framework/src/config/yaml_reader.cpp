#include "config/yaml_reader.h"

#include <cmath>
#include <limits>
#include <map>
#include <regex>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "config/suggest.h"

namespace crucible::config {

ScalarType classify_scalar(const std::string& text, bool quoted) {
  if (quoted) return ScalarType::kString;
  static const std::regex null_re("~|null|Null|NULL|");
  static const std::regex bool_re("true|True|TRUE|false|False|FALSE");
  static const std::regex int_re("[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+");
  static const std::regex float_re(
      "[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|"
      "NAN)");
  if (std::regex_match(text, null_re)) return ScalarType::kNull;
  if (std::regex_match(text, bool_re)) return ScalarType::kBool;
  if (std::regex_match(text, int_re)) return ScalarType::kInt;
  if (std::regex_match(text, float_re)) return ScalarType::kFloat;
  return ScalarType::kString;
}

ScalarType classify_scalar(const YAML::Node& node) {
  if (node.IsNull()) return ScalarType::kNull;
  // Quoted ("!"), or tagged a string (!!str 10).
  return classify_scalar(node.Scalar(), node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str");
}

namespace {

nlohmann::json scalar_to_json(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  switch (classify_scalar(node)) {
    case ScalarType::kNull:
      return nullptr;
    case ScalarType::kBool:
      return s[0] == 't' || s[0] == 'T';
    case ScalarType::kInt: {
      int base = 10;
      std::string digits = s;
      if (s.rfind("0x", 0) == 0) base = 16, digits = s.substr(2);
      if (s.rfind("0o", 0) == 0) base = 8, digits = s.substr(2);
      errno = 0;
      const long long v = std::strtoll(digits.c_str(), nullptr, base);
      if (errno == ERANGE) return std::strtod(s.c_str(), nullptr);
      return static_cast<int64_t>(v);
    }
    case ScalarType::kFloat: {
      if (s.find("nan") != std::string::npos || s.find("NaN") != std::string::npos ||
          s.find("NAN") != std::string::npos) {
        return std::numeric_limits<double>::quiet_NaN();
      }
      if (s.find("inf") != std::string::npos || s.find("Inf") != std::string::npos ||
          s.find("INF") != std::string::npos) {
        return s[0] == '-' ? -std::numeric_limits<double>::infinity()
                           : std::numeric_limits<double>::infinity();
      }
      return std::strtod(s.c_str(), nullptr);
    }
    case ScalarType::kString:
      break;
  }
  return s;
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing (null)";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  const char* type = "a string";
  switch (classify_scalar(node)) {
    case ScalarType::kBool:
      type = "a bool";
      break;
    case ScalarType::kInt:
      type = "an integer";
      break;
    case ScalarType::kFloat:
      type = "a float";
      break;
    default:
      break;
  }
  return fmt::format("'{}' ({})", node.Scalar(), type);
}

std::vector<std::string> sorted_keys(const YAML::Node& node) {
  std::vector<std::string> keys;
  for (const auto& kv : node) keys.push_back(kv.first.Scalar());
  return keys;
}

// The key `key` of the mapping at `path` ("" is the top level).
std::string child_of(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// Fails through `source` at the first key of mapping `map` (at `path`) that repeats an earlier
// one, or that is a merge key (<<, plain: yaml-cpp keeps it as a key of that name).
void check_keys(const Source& source, const YAML::Node& map, const std::string& path) {
  std::map<std::string, YAML::Mark> seen;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) {
      source.fail(path.empty() ? "(top level)" : path, kv.first,
                  "a key must be a name or a number, not a list or a mapping");
    }
    const std::string key = kv.first.Scalar();
    if (key == "<<" && kv.first.Tag() != "!") {
      source.fail(child_of(path, key), kv.first,
                  "a YAML merge key (<<), which is not supported: write the keys out");
    }
    const auto [first, inserted] = seen.emplace(key, kv.first.Mark());
    if (!inserted) {
      source.fail(
          child_of(path, key), kv.first,
          fmt::format("duplicate key '{}' (first given at line {})", key, first->second.line + 1));
    }
  }
}

}  // namespace

nlohmann::json yaml_to_json(const YAML::Node& node, const Source& source, const std::string& path) {
  if (!node.IsDefined() || node.IsNull()) return nullptr;
  if (node.IsScalar()) return scalar_to_json(node);
  if (node.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    size_t i = 0;
    for (const auto& item : node) {
      out.push_back(yaml_to_json(item, source, fmt::format("{}[{}]", path, i++)));
    }
    return out;
  }
  check_keys(source, node, path);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& kv : node) {
    out[kv.first.Scalar()] = yaml_to_json(kv.second, source, path + "." + kv.first.Scalar());
  }
  return out;
}

std::optional<Override> last_override(const std::vector<std::string>& overrides,
                                      const std::string& path) {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    const std::string key = it->substr(0, it->find('='));
    if (path == key || path.rfind(key + ".", 0) == 0) return Override{"--set " + *it, false};
    if (key.rfind(path + ".", 0) == 0) return Override{"--set " + *it, true};
  }
  return std::nullopt;
}

namespace {

// "file:line:col" of a node that was read from the file, followed by ", with --set k=v" when
// `set` changed a key under it; `set` alone for a node it created.
std::string place_with(const std::string& file, const YAML::Mark& mark,
                       const std::optional<Override>& set) {
  if (mark.is_null()) return set ? set->text : file;
  const std::string place = fmt::format("{}:{}:{}", file, mark.line + 1, mark.column + 1);
  return set ? place + ", with " + set->text : place;
}

}  // namespace

std::string key_place(const ExperimentConfig& config, const std::string& key_path,
                      const std::optional<std::string>& value) {
  const auto set = last_override(config.overrides, key_path);
  if (set && !set->below) return set->text;
  const std::string& file = config.source_path;
  const std::string fallback = set ? set->text : file;
  try {
    YAML::Node node = YAML::LoadFile(file);
    for (size_t at = 0; at <= key_path.size();) {
      const size_t dot = std::min(key_path.find('.', at), key_path.size());
      if (!node.IsMap()) return fallback;
      // reset(), not assignment: assigning a yaml-cpp node writes through to the tree.
      const YAML::Node& parent = node;
      node.reset(parent[key_path.substr(at, dot - at)]);
      at = dot + 1;
    }
    if (!node.IsDefined()) return fallback;
    // The value is checked where the file alone gave it: an override under it changed it.
    if (!set && value && (!node.IsScalar() || node.Scalar() != *value)) return file;
    return place_with(file, node.Mark(), set);
  } catch (...) {
    return fallback;
  }
}

std::string Source::where(const std::string& path, const YAML::Node& node) const {
  const auto set = last_override(overrides_, path);
  if (set && !set->below) return set->text;
  return place_with(file_, node.Mark(), set);
}

void Source::fail(const std::string& path, const YAML::Node& node,
                  const std::string& message) const {
  throw ConfigError(
      fmt::format("{}: {}: {}", where(path, node), path.empty() ? "(top level)" : path, message));
}

MapReader::MapReader(const Source& source, const YAML::Node& node, std::string path,
                     std::vector<std::string> allowed, std::vector<std::string>* unknown)
    : source_(source), node_(node), path_(std::move(path)) {
  if (!node_.IsMap()) {
    source_.fail(path_, node_, "expected a mapping, got " + describe(node_));
  }
  check_keys(source_, node_, path_);
  for (const auto& kv : node_) {
    const std::string key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string valid;
      for (const auto& a : allowed) valid += (valid.empty() ? "" : ", ") + a;
      try {
        source_.fail(child_path(key), kv.first,
                     fmt::format("unknown key '{}'{}; valid keys here: {}", key,
                                 did_you_mean(key, allowed), valid));
      } catch (const ConfigError& e) {
        if (!unknown) throw;
        unknown->emplace_back(e.what());
      }
    }
  }
}

bool MapReader::has(const std::string& key) const {
  const YAML::Node n = node_[key];
  return n.IsDefined() && !n.IsNull();
}

std::string MapReader::child_path(const std::string& key) const { return child_of(path_, key); }

YAML::Node MapReader::place(const std::string& key) const {
  const YAML::Node value = node_[key];
  if (!value.IsNull()) return value;
  // An empty value's mark is the next token's, lines below when blank lines or comments follow.
  for (const auto& item : node_) {
    if (item.first.IsScalar() && item.first.Scalar() == key &&
        item.first.Mark().line < value.Mark().line) {
      return item.first;
    }
  }
  return value;
}

void MapReader::fail(const std::string& key, const std::string& message) const {
  source_.fail(child_path(key), place(key), message);
}

void MapReader::fail_missing(const std::string& key, const std::string& what) const {
  const std::string more = what.empty() ? "" : ": " + what;
  if (node_[key].IsDefined()) {  // written, as null: named where it is
    source_.fail(child_path(key), place(key),
                 "required key '" + key + "' has no value (null)" + more);
  }
  source_.fail(child_path(key), node_, "required key '" + key + "' is missing" + more);
}

std::string MapReader::string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const YAML::Node n = node_[key];
  if (!n.IsScalar()) fail(key, "expected a string, got " + describe(n));
  return n.Scalar();
}

std::string MapReader::required_string(const std::string& key) const {
  if (!has(key)) fail_missing(key);
  std::string value = string(key, "");
  if (value.empty()) fail(key, "must not be empty");
  return value;
}

int64_t MapReader::integer(const std::string& key, int64_t fallback, int64_t min_value) const {
  if (!has(key)) return fallback;
  const YAML::Node n = node_[key];
  if (!n.IsScalar() || classify_scalar(n) != ScalarType::kInt) {
    fail(key, "expected an integer, got " + describe(n));
  }
  const nlohmann::json v = scalar_to_json(n);
  if (!v.is_number_integer()) fail(key, "integer out of range: " + n.Scalar());
  const int64_t value = v.get<int64_t>();
  if (value < min_value) {
    fail(key, min_value == 0 ? fmt::format("must be non-negative, got {}", value)
                             : fmt::format("must be at least {}, got {}", min_value, value));
  }
  return value;
}

bool MapReader::boolean(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const YAML::Node n = node_[key];
  if (!n.IsScalar() || classify_scalar(n) != ScalarType::kBool) {
    fail(key, "expected true or false, got " + describe(n));
  }
  return scalar_to_json(n).get<bool>();
}

double MapReader::number(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const YAML::Node n = node_[key];
  const ScalarType t = n.IsScalar() ? classify_scalar(n) : ScalarType::kString;
  if (t != ScalarType::kInt && t != ScalarType::kFloat) {
    fail(key, "expected a number, got " + describe(n));
  }
  return scalar_to_json(n).get<double>();
}

std::string MapReader::choice(const std::string& key, const std::string& fallback,
                              const std::vector<std::string>& choices) const {
  const std::string value = string(key, fallback);
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    std::string valid;
    for (const auto& c : choices) valid += (valid.empty() ? "" : ", ") + c;
    fail(key, fmt::format("'{}' is not one of {}{}", value, valid, did_you_mean(value, choices)));
  }
  return value;
}

Length MapReader::length(const std::string& key, const Length& fallback, int64_t min_value) const {
  if (!has(key)) return fallback;
  const auto& units = names<LengthUnit>();
  if (!node_[key].IsMap()) {
    // `min_checkpoint_period: 0`: the count alone, as if the unit went without saying.
    const bool count = node_[key].IsScalar() && classify_scalar(node_[key]) == ScalarType::kInt;
    fail(key, fmt::format("expected one of batches, epochs or records with its count, e.g. {}; "
                          "got {}",
                          count ? "{batches: " + node_[key].Scalar() + "}" : "{epochs: 5}",
                          describe(node_[key])));
  }
  MapReader unit_reader(source_, node_[key], child_path(key), units.names());
  if (node_[key].size() != 1) {
    fail(key, "expected exactly one of batches, epochs or records, e.g. {epochs: 5}; got " +
                  std::to_string(node_[key].size()) + " keys");
  }
  const std::string unit = sorted_keys(node_[key]).front();
  if (!unit_reader.has(unit)) {
    unit_reader.fail(unit, "expected an integer, got nothing (null); e.g. {" + unit + ": 5}");
  }
  Length out;
  out.unit = *units.parse(unit);
  out.value = unit_reader.integer(unit, 0, min_value);
  return out;
}

}  // namespace crucible::config
