#include "metrics/jsonl_sink.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <crucible/errors.h>

#include "util/file_io.h"
#include "util/file_system.h"
#include "util/json_lines.h"
#include "util/json_number.h"
#include "util/utf8.h"

namespace crucible::metrics {

JsonlSink::JsonlSink(const std::string& path, std::vector<ReportKind> kinds)
    : path_(path), kinds_(std::move(kinds)), out_(path, std::ios::app) {
  if (!out_) {
    throw TrainingError(fmt::format("cannot open metrics file {}: {}", path, std::strerror(errno)));
  }
}

void JsonlSink::write(const Report& report) {
  if (std::find(kinds_.begin(), kinds_.end(), report.kind) == kinds_.end()) return;
  nlohmann::json row = {{"type", name_of(report.kind)},
                        {"batches", report.progress.batches},
                        {"records", report.progress.records},
                        {"epochs", report.progress.epochs},
                        {"metrics", metrics_json(report.values)}};
  if (!report.reason.empty()) row["reason"] = report.reason;
  out_ << row.dump() << '\n';
  out_.flush();
  if (!out_) {
    throw TrainingError(
        fmt::format("cannot write metrics file {}: {}", path_, std::strerror(errno)));
  }
}

std::optional<ReportKind> kind_of(const nlohmann::json& row) {
  return util::enum_field(row, "type", report_kind_names());
}

void truncate_metrics_file(const std::string& path, int64_t batches,
                           const std::function<void(const std::string&)>& warn) {
  if (!util::exists(path)) return;
  std::string text;
  try {
    text = util::read_file(path);
  } catch (const std::system_error& e) {
    throw TrainingError(fmt::format("cannot read metrics file {}: {}", path, e.code().message()));
  }
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  std::string keep;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.empty()) continue;
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    const bool object = !row.is_discarded() && row.is_object();
    const auto count = object ? row.find("batches") : row.end();
    const bool counted =
        object && (count == row.end() ||
                   (count->is_number_integer() &&
                    !(count->is_number_unsigned() &&
                      count->get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})));
    if (!counted) {
      // The last line may be torn by a kill; one with rows after it was damaged otherwise.
      if (i + 1 < lines.size() && batches >= 0) {
        constexpr size_t kShown = 80;
        warn(fmt::format("{}:{}: a damaged row ({}), left out: {}{}", path, i + 1,
                         object ? "its batches is not a whole number" : "not a JSON object",
                         util::valid_utf8(line.substr(0, kShown)),
                         line.size() > kShown ? "..." : ""));
      }
      continue;
    }
    if (count == row.end() || count->get<int64_t>() <= batches) keep += line + '\n';
  }
  try {
    util::replace_atomically(path, keep);
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("cannot rewrite metrics file {}: {}", path, e.what()));
  }
}

}  // namespace crucible::metrics

namespace crucible {

nlohmann::json metrics_json(const MetricValues& values) { return util::numbers_json(values); }

}  // namespace crucible
