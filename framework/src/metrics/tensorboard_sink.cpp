#include "metrics/tensorboard_sink.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "metrics/metric_name.h"
#include "util/file_system.h"

namespace crucible::metrics {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// A metric's name under its group: a validation metric without the validation_ prefix that
// metrics.jsonl gives it.
std::string tag_name(const std::string& name, bool training) {
  return training ? name : without_validation_prefix(name);
}

}  // namespace

std::string event_file_in(const std::string& dir) {
  if (!util::is_directory(dir)) return "";
  for (const auto& name : util::list_directory(dir)) {
    if (name.find("tfevents") != std::string::npos) return dir + "/" + name;
  }
  return "";
}

void truncate_tensorboard(const std::string& dir, int64_t step) {
  const std::string file = event_file_in(dir);
  if (!file.empty()) truncate_event_file(file, step);
}

TensorBoardSink::TensorBoardSink(const std::string& dir) : path_(event_file_in(dir)) {
  const double now = now_seconds();
  if (path_.empty()) {
    try {
      util::create_directories(dir);
    } catch (const std::exception& e) {
      throw TrainingError(fmt::format("cannot create TensorBoard directory {}: {}", dir, e.what()));
    }
    path_ =
        fmt::format("{}/events.out.tfevents.{}.{}", dir, static_cast<int64_t>(now), host_name());
  }
  const bool fresh = util::file_size(path_).value_or(0) == 0;
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) {
    throw TrainingError(
        fmt::format("cannot open TensorBoard file {}: {}", path_, std::strerror(errno)));
  }
  if (fresh) append({now, 0, "brain.Event:2", {}});
}

void TensorBoardSink::write(const Report& report) {
  if (report.kind == ReportKind::kStopped) return;
  Event event{now_seconds(), report.progress.batches, "", {}};
  if (report.kind == ReportKind::kProfiling) {
    for (const auto& [name, value] : report.values) {
      event.scalars.push_back({"profiling/" + name, static_cast<float>(value)});
    }
    append(event);
    return;
  }
  const bool training = report.kind == ReportKind::kTraining;
  for (const auto& [name, value] : report.values) {
    event.scalars.push_back({(training ? "training/" : "validation/") + tag_name(name, training),
                             static_cast<float>(value)});
  }
  if (training) {
    if (report.batches_per_second) {
      event.scalars.push_back(
          {"timing/batches_per_second", static_cast<float>(*report.batches_per_second)});
    }
  } else {
    event.scalars.push_back({"timing/validation_seconds", static_cast<float>(report.seconds)});
  }
  append(event);
}

void TensorBoardSink::append(const Event& event) {
  out_ << frame_record(encode_event(event));
  out_.flush();
  if (!out_) {
    throw TrainingError(
        fmt::format("cannot write TensorBoard file {}: {}", path_, std::strerror(errno)));
  }
}

}  // namespace crucible::metrics
