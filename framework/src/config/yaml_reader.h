#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <crucible/config.h>

#include "config/enum_names.h"

namespace crucible::config {

// The type a YAML 1.2 core-schema resolver gives a scalar; quoted scalars, and those tagged
// !!str, are always strings.
enum class ScalarType { kNull, kBool, kInt, kFloat, kString };
ScalarType classify_scalar(const std::string& text, bool quoted);
ScalarType classify_scalar(const YAML::Node& node);

class Source;

// A YAML node as JSON, scalars typed by the core schema. Throws ConfigError for unrepresentable
// numbers, and through `source` at the key's place (under `path`, the node's dotted key) for a
// mapping that repeats a key or holds a merge key (<<, which yaml-cpp leaves unexpanded).
nlohmann::json yaml_to_json(const YAML::Node& node, const Source& source, const std::string& path);

// An override that reached a key: its text ("--set KEY=VALUE"), and whether it set a key under
// that key rather than the key itself or one above it.
struct Override {
  std::string text;
  bool below = false;
};

// The last applied of `overrides` (KEY=VALUE texts, in the order applied) that set `path`, a key
// above it or a key under it; nullopt when none did.
std::optional<Override> last_override(const std::vector<std::string>& overrides,
                                      const std::string& path);

// Where the dotted `key_path` (e.g. "optimizations.mixed_precision") of `config` was given, as
// Source::where says it, with config.overrides: "--set k=v" when the last override that reached
// it set it or a key above it; else "file:line:col" of its value in config.source_path, followed
// by ", with --set k=v" when that override set a key under it; "--set k=v" alone for a key it
// created. Without an override, "file:line:col" only when the file holds `value` there (any value
// when `value` is nullopt), else the file alone (it cannot be read, has no such key, or no longer
// says so). For errors found after parsing; never throws.
std::string key_place(const ExperimentConfig& config, const std::string& key_path,
                      const std::optional<std::string>& value = std::nullopt);

// Where values come from: the file, and the `--set` overrides applied on top of it.
class Source {
 public:
  explicit Source(std::string file) : file_(std::move(file)) {}
  // Records `text` ("KEY=VALUE") as applied after the overrides recorded before it.
  void add_override(const std::string& text) { overrides_.push_back(text); }
  // "--set k=v" when the last override that reached `path` (last_override) set it or a key
  // above it, or created `node` by setting a key under it; else "file:line:col" of `node`,
  // followed by ", with --set k=v" when that override changed a key under it.
  std::string where(const std::string& path, const YAML::Node& node) const;
  // Throws ConfigError "<where>: <path>: <message>".
  [[noreturn]] void fail(const std::string& path, const YAML::Node& node,
                         const std::string& message) const;
  const std::string& file() const { return file_; }
  const std::vector<std::string>& overrides() const { return overrides_; }

 private:
  std::string file_;
  std::vector<std::string> overrides_;
};

// Reads one YAML mapping against a fixed set of keys. Construction rejects a non-map and any
// key outside `allowed` (with the nearest valid key suggested), or collects the latter.
class MapReader {
 public:
  // Throws ConfigError unless `node` is a mapping without repeated or merge keys, and for its
  // first key not in `allowed`; with `unknown`, each key not in `allowed` adds its error there
  // instead (the caller reports them with the others it finds).
  MapReader(const Source& source, const YAML::Node& node, std::string path,
            std::vector<std::string> allowed, std::vector<std::string>* unknown = nullptr);

  bool has(const std::string& key) const;
  YAML::Node node(const std::string& key) const { return node_[key]; }
  std::string child_path(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // Fails saying `key` is missing (naming the map), or has no value when it is written as null
  // (naming it), followed by ": " and `what` when `what` is not empty.
  [[noreturn]] void fail_missing(const std::string& key, const std::string& what = "") const;

  std::string string(const std::string& key, const std::string& fallback) const;
  std::string required_string(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback, int64_t min_value) const;
  bool boolean(const std::string& key, bool fallback) const;
  double number(const std::string& key, double fallback) const;
  // One of `choices`, with a did-you-mean for near misses.
  std::string choice(const std::string& key, const std::string& fallback,
                     const std::vector<std::string>& choices) const;
  // One of the names of E (config::names<E>()), with a did-you-mean for near misses.
  template <typename E>
  E enumerated(const std::string& key, E fallback) const {
    const auto& table = names<E>();
    return *table.parse(choice(key, table.name(fallback), table.names()));
  }
  // `{batches|epochs|records: n}` with n >= min_value.
  Length length(const std::string& key, const Length& fallback, int64_t min_value) const;

  const Source& source() const { return source_; }
  const YAML::Node& self() const { return node_; }
  const std::string& path() const { return path_; }

 private:
  // The node whose place names `key` in errors: its value, or the key itself for an empty value
  // (no text after the colon), whose mark yaml-cpp sets at the next token.
  YAML::Node place(const std::string& key) const;

  const Source& source_;
  YAML::Node node_;
  std::string path_;
};

}  // namespace crucible::config
