#include "metrics/sinks.h"

#include <cstring>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::metrics {

MetricsWriter::MetricsWriter(const std::string& path, util::Logger* logger)
    : path_(path), out_(path, std::ios::app), logger_(logger) {
  if (!out_) {
    throw TrainingError(fmt::format("cannot open metrics file {}: {}", path, std::strerror(errno)));
  }
}

void MetricsWriter::write(const std::string& kind, const Progress& progress,
                          const MetricValues& values, const std::string& extra) {
  nlohmann::json row = {{"type", kind},
                        {"batches", progress.batches},
                        {"records", progress.records},
                        {"epochs", progress.epochs},
                        {"metrics", values}};
  out_ << row.dump() << '\n';
  out_.flush();
  if (!out_) {
    throw TrainingError(
        fmt::format("cannot write metrics file {}: {}", path_, std::strerror(errno)));
  }
  std::string line =
      fmt::format("[{:<10}] batch {:>7}  epoch {:>6.2f} ", kind, progress.batches, progress.epochs);
  for (const auto& [name, v] : values) line += fmt::format(" {}={:.5g}", name, v);
  if (!extra.empty()) line += "  " + extra;
  logger_->info(line);
}

void truncate_metrics_file(const std::string& path, int64_t batches) {
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::string> keep;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded()) break;  // a torn last line from a kill
    if (row.value("batches", int64_t{0}) <= batches) keep.push_back(line);
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& line : keep) out << line << '\n';
  if (!out) {
    throw TrainingError(
        fmt::format("cannot rewrite metrics file {}: {}", path, std::strerror(errno)));
  }
}

}  // namespace crucible::metrics
