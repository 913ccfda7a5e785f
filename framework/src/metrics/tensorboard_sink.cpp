#include "metrics/tensorboard_sink.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "metrics/metric_name.h"
#include "util/file_io.h"
#include "util/file_system.h"
#include "util/parse.h"

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

// The paths in `dir` whose names hold "tfevents", sorted: its event files, and with
// `temporaries`, what an atomic write left of one (a name ending in ".tmp") too.
std::vector<std::string> event_files_in(const std::string& dir, bool temporaries = false) {
  std::vector<std::string> files;
  if (!util::is_directory(dir)) return files;
  for (const auto& name : util::list_directory(dir)) {
    const bool temporary = name.size() >= 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    if (name.find("tfevents") != std::string::npos && (temporaries || !temporary)) {
      files.push_back(util::join(dir, name));
    }
  }
  return files;
}

constexpr std::string_view kEventFilePrefix = "events.out.tfevents.";

// events.out.tfevents.<seconds>.<host name> in `dir`.
std::string event_file_name(const std::string& dir, int64_t seconds) {
  return util::join(dir, fmt::format("{}{}.{}", kEventFilePrefix, seconds, host_name()));
}

// The <seconds> of such a name; nullopt for another name.
std::optional<int64_t> seconds_of(const std::string& path) {
  const std::string name = util::file_name(path);
  if (name.rfind(kEventFilePrefix, 0) != 0) return std::nullopt;
  const size_t begin = kEventFilePrefix.size();
  const auto seconds = util::whole_integer(name.substr(begin, name.find('.', begin) - begin));
  // Beyond the year 33000 it is no time of ours (and +1 could overflow).
  if (!seconds || *seconds < 0 || *seconds > int64_t{1'000'000'000'000}) return std::nullopt;
  return seconds;
}

}  // namespace

std::string event_file_in(const std::string& dir) {
  const std::vector<std::string> files = event_files_in(dir);
  return files.empty() ? "" : files.back();
}

void truncate_tensorboard(const std::string& dir, int64_t step) {
  const std::vector<std::string> files = event_files_in(dir);
  if (files.empty()) return;
  const KeptEvents kept = events_until(files.back(), step);
  if (kept.whole && files.size() == 1) return;
  const double now = now_seconds();
  const int64_t seconds =
      std::max(static_cast<int64_t>(now), seconds_of(files.back()).value_or(0) + 1);
  const std::string path = event_file_name(dir, seconds);
  const std::string temporary = util::join(dir, ".tmp-tensorboard");
  // Both at the run's start, so that wall times never fall along the file.
  const double started = kept.started.value_or(now);
  try {
    util::write_durably(temporary, frame_record(encode_event({started, 0, "brain.Event:2", {}})) +
                                       frame_record(encode_event({started, 0, "", {}, true})) +
                                       kept.records);
    util::rename(temporary, path);
    util::fsync_path(dir);
  } catch (const std::exception& e) {
    util::try_remove_all(temporary);
    throw TrainingError(fmt::format("cannot write TensorBoard file {}: {}", path, e.what()));
  }
  for (const std::string& file : event_files_in(dir, true)) {
    if (file == path) continue;
    try {
      util::remove(file);
    } catch (const std::exception& e) {
      throw TrainingError(fmt::format("cannot remove TensorBoard file {}: {}", file, e.what()));
    }
  }
}

TensorBoardSink::TensorBoardSink(const std::string& dir) : path_(event_file_in(dir)) {
  const double now = now_seconds();
  if (path_.empty()) {
    try {
      util::create_directories(dir);
    } catch (const std::exception& e) {
      throw TrainingError(fmt::format("cannot create TensorBoard directory {}: {}", dir, e.what()));
    }
    path_ = event_file_name(dir, static_cast<int64_t>(now));
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
