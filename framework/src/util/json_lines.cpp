#include "util/json_lines.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "util/file_system.h"

namespace crucible::util {

JsonLines read_json_lines(const std::string& path, const std::string& damage_hint,
                          bool missing_ok) {
  JsonLines out;
  std::ifstream in(path);
  if (!in) {
    if (missing_ok && !exists(path)) return out;
    throw TrainingError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  }
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    if (out.torn_line > 0) {
      throw TrainingError(fmt::format("{}:{}: not a JSON row, and rows follow it: {}", path,
                                      out.torn_line, damage_hint));
    }
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object()) {
      out.torn_line = number;
      continue;
    }
    out.rows.push_back(std::move(row));
  }
  if (in.bad()) throw TrainingError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  return out;
}

}  // namespace crucible::util
