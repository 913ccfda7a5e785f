#pragma once

#include <functional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include <crucible/config.h>

#include "config/yaml_reader.h"

namespace crucible::config {

// One key of the experiment file: the only description of it. Parsing, the resolved config,
// the resume diff's safe keys and `trainer keys` all read it from schema().
struct Key {
  std::string section;  // "" for a top-level key, else the mapping it lives in ("resources")
  std::string name;     // the key within its section ("slots_per_trial")
  std::string description;
  bool required = false;
  // Changing it keeps a resumed run meaningful (lengths, periods, reporting, retention).
  bool safe_on_resume = false;
  // Changing it keeps a resumed search's decisions too: the keys safe_on_resume marks, except
  // max_length, which sets the lengths of its trials and rungs.
  bool safe_on_search_resume = false;
  // A `{batches|epochs|records: n}` value: a `--set` of one unit replaces the other.
  bool is_length = false;
  // The searchers that read it; empty: every run. The resolved config leaves a key out that
  // its searcher does not read and that has its default, and an experiment file that gives one
  // another value gets a warning.
  std::vector<SearcherName> searchers;
  // Reads the key from its section's reader into `config`; an absent key leaves the default
  // (the member's initializer) in place. Throws ConfigError naming the key.
  std::function<void(const MapReader& section, ExperimentConfig& config)> read;
  // Whether the resolved config writes the key (false for an empty optional string).
  std::function<bool(const ExperimentConfig& config)> present;
  // Writes the key's value.
  std::function<void(YAML::Emitter& out, const ExperimentConfig& config)> emit;

  // "resources.slots_per_trial".
  std::string path() const { return section.empty() ? name : section + "." + name; }
};

// Whether `config`'s value of `key` is not the default's, as the resolved config writes them.
bool differs_from_default(const Key& key, const ExperimentConfig& config);

// Every key, in the order of the resolved config; the keys of a section are adjacent.
const std::vector<Key>& schema();

// The top-level names (keys and sections), in schema order.
std::vector<std::string> top_level_names();
// The keys of `section`, in schema order.
std::vector<std::string> section_keys(const std::string& section);

// The key that `path` ("max_length.epochs", "hyperparameters.lr") is or lies under; nullptr
// when none does.
const Key* find_key(const std::string& path);

}  // namespace crucible::config
