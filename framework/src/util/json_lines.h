#pragma once

// Reading a JSON-lines file that a process appends one row at a time (metrics.jsonl,
// experiment.jsonl), where a kill can leave the last row half written.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/name_table.h"

namespace crucible::util {

// The value of `table` that field `key` of `row` spells; nullopt when the field is missing, not a
// string, or no value's name.
template <typename E>
std::optional<E> enum_field(const nlohmann::json& row, const char* key, const NameTable<E>& table) {
  const auto it = row.find(key);
  if (it == row.end() || !it->is_string()) return std::nullopt;
  return table.parse(it->get<std::string>());
}

struct JsonLines {
  std::vector<nlohmann::json> rows;  // the lines that are JSON objects, in order
  int64_t torn_line =
      0;  // the number of a last line that is no JSON object (a torn write); 0: none
};

// The rows of `path`; empty lines are passed over. A last line that is not a JSON object is left
// out and its number returned. Returns no rows when `path` does not exist and `missing_ok`.
// Throws TrainingError naming `path` when it cannot be read, and naming `path`:line and
// `damage_hint` (what the reader can do about it) when a line other than the last is not a JSON
// object.
JsonLines read_json_lines(const std::string& path, const std::string& damage_hint,
                          bool missing_ok = false);

}  // namespace crucible::util
