#include "profile/operator_trace.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <nlohmann/json.hpp>

#include "util/file_io.h"
#include "util/file_system.h"

namespace crucible::profile {
namespace {

using nlohmann::json;

// The events of Chrome trace `text`; nullopt when it is not one.
std::optional<json> events_of(const std::string& text) {
  json trace = json::parse(text, nullptr, false);
  if (trace.is_object() && trace.contains("traceEvents")) trace = std::move(trace["traceEvents"]);
  if (!trace.is_array()) return std::nullopt;
  for (const json& event : trace) {
    if (!event.is_object()) return std::nullopt;
  }
  return trace;
}

std::optional<double> number(const json& event, const char* key) {
  const auto it = event.find(key);
  if (it == event.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::optional<int64_t> pid_of(const json& event) {
  const auto it = event.find("pid");
  if (it == event.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

OperatorTrace::OperatorTrace(std::string path, int64_t first_batch)
    : path_(std::move(path)), first_batch_(first_batch) {
  record_ = std::make_unique<torch::autograd::profiler::RecordProfile>(text_);
  was_enabled_ = at::isRecordFunctionEnabled();
  set_recording(false);
}

OperatorTrace::~OperatorTrace() {
  at::enableRecordFunction(was_enabled_);
  record_.reset();
}

void OperatorTrace::set_recording(bool on) { at::enableRecordFunction(on); }

void OperatorTrace::write(const std::function<void(const std::string&)>& warn) {
  TORCH_INTERNAL_ASSERT(record_, "OperatorTrace::write called twice");
  record_.reset();  // RecordProfile writes the trace as it ends
  std::string earlier = "[]";
  try {
    earlier = util::read_file(path_);
  } catch (const std::system_error& e) {
    if (e.code() != std::errc::no_such_file_or_directory) throw;
  }
  std::string merged;
  try {
    merged = merge_traces(earlier, text_.str(), first_batch_);
  } catch (const std::invalid_argument& e) {
    warn(fmt::format("{}; it is replaced by the trace of batches from {}", e.what(), first_batch_));
    merged = merge_traces("[]", text_.str(), first_batch_);
  }
  util::replace_atomically(path_, merged);
}

std::string merge_traces(const std::string& earlier, const std::string& events,
                         int64_t first_batch) {
  const auto before = events_of(earlier);
  if (!before) {
    throw std::invalid_argument("the earlier operator trace is not a Chrome trace");
  }
  auto added = events_of(events);
  if (!added) throw std::runtime_error("LibTorch's operator trace is not a Chrome trace");

  // Where each earlier process's batches from first_batch on begin.
  std::map<int64_t, std::vector<double>> batch_starts;
  for (const json& event : *before) {
    const auto pid = pid_of(event);
    const auto ts = number(event, "ts");
    const auto name = event.find("name");
    if (pid && *pid < first_batch && ts && name != event.end() && name->is_string() &&
        *name == kBatchRange) {
      batch_starts[*pid].push_back(*ts);
    }
  }
  std::map<int64_t, double> cut;
  for (auto& [pid, starts] : batch_starts) {
    std::sort(starts.begin(), starts.end());
    const auto again = static_cast<size_t>(first_batch - pid);
    if (again < starts.size()) cut[pid] = starts[again];
  }

  std::vector<const json*> kept;
  double end = 0;
  for (const json& event : *before) {
    const auto pid = pid_of(event);
    const auto ts = number(event, "ts");
    if (pid && *pid >= first_batch) continue;
    if (pid && ts && cut.count(*pid) && *ts >= cut.at(*pid)) continue;
    kept.push_back(&event);
    if (ts) end = std::max(end, *ts + number(event, "dur").value_or(0));
  }

  for (json& event : *added) {
    event["pid"] = first_batch;
    if (const auto ts = number(event, "ts")) event["ts"] = *ts + end;
  }
  added->push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", first_batch},
                    {"tid", 0},
                    {"args", {{"name", fmt::format("batches from {}", first_batch)}}}});
  added->push_back({{"name", "process_sort_index"},
                    {"ph", "M"},
                    {"pid", first_batch},
                    {"tid", 0},
                    {"args", {{"sort_index", first_batch}}}});

  std::string out = "[";
  const char* separator = "\n";
  for (const json* event : kept) {
    out += separator + event->dump();
    separator = ",\n";
  }
  for (const json& event : *added) {
    out += separator + event.dump();
    separator = ",\n";
  }
  return out + "\n]\n";
}

}  // namespace crucible::profile
