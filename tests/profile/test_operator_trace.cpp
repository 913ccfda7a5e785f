// The operator trace's file: each process of a run adds its batches to what the earlier ones
// traced, and batches run again replace the earlier process's.
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "catch.h"

#include "process.h"
#include "profile/operator_trace.h"

using namespace crucible::profile;
using crucible::testing::TempDir;
using nlohmann::json;

namespace {

json event(const std::string& name, const json& pid, double ts, double dur) {
  return {{"name", name}, {"ph", "X"}, {"ts", ts}, {"dur", dur}, {"tid", 1}, {"pid", pid}};
}

// The "X" events of `trace` as (pid, name, ts), and its process names by pid.
struct Parsed {
  std::vector<std::tuple<json, std::string, double>> events;
  std::map<int64_t, std::string> names;
};

Parsed parsed(const std::string& trace) {
  Parsed out;
  for (const json& e : json::parse(trace)) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      out.names[e["pid"].get<int64_t>()] = e["args"]["name"];
    } else if (e["ph"] == "X") {
      out.events.emplace_back(e["pid"], e["name"], e["ts"].get<double>());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("a process's operator trace follows the earlier ones and replaces batches run again",
          "[profile]") {
  // Process 0 traced batches 0..3 (a batch every 100 us, an operator in each), then process 5
  // traced 5 and 6; a process resumed from a checkpoint at batch 2 runs batches 2.. again.
  json earlier = json::array();
  for (int b = 0; b < 4; ++b) {
    earlier.push_back(event(kBatchRange, 0, 100.0 * b, 90));
    earlier.push_back(event("aten::mm", 0, 100.0 * b + 10, 5));
  }
  earlier.push_back({{"name", "process_name"},
                     {"ph", "M"},
                     {"pid", 0},
                     {"tid", 0},
                     {"args", {{"name", "batches from 0"}}}});
  earlier.push_back(event(kBatchRange, 5, 0, 90));
  earlier.push_back(event("aten::mm", 5, 10, 5));
  earlier.push_back(event("aten::add", "CPU Functions", 50, 1));  // an older Crucible's
  const json events = json::array(
      {event(kBatchRange, "CPU Functions", 20, 50), event("aten::mm", "CPU Functions", 30, 5)});

  const Parsed merged = parsed(merge_traces(earlier.dump(), events.dump(), 2));
  using Event = std::tuple<json, std::string, double>;
  CHECK(merged.events == std::vector<Event>{{0, kBatchRange, 0},
                                            {0, "aten::mm", 10},
                                            {0, kBatchRange, 100},
                                            {0, "aten::mm", 110},
                                            {"CPU Functions", "aten::add", 50},
                                            {2, kBatchRange, 210},  // after process 0's 190
                                            {2, "aten::mm", 220}});
  CHECK(merged.names ==
        std::map<int64_t, std::string>{{0, "batches from 0"}, {2, "batches from 2"}});

  // The first process's trace, and the object form of a trace.
  const Parsed first = parsed(merge_traces("[]", events.dump(), 0));
  CHECK(first.events == std::vector<Event>{{0, kBatchRange, 20}, {0, "aten::mm", 30}});
  CHECK(parsed(merge_traces(json{{"traceEvents", earlier}}.dump(), events.dump(), 2)).events ==
        merged.events);

  CHECK_THROWS_AS(merge_traces("{\"traceEvents\": [", events.dump(), 2), std::invalid_argument);
  CHECK_THROWS_AS(merge_traces("[1, 2]", events.dump(), 2), std::invalid_argument);
  CHECK_THROWS_AS(merge_traces("[]", "[", 2), std::runtime_error);
}

TEST_CASE("an operator trace written where no trace is replaces that file, with a warning",
          "[profile]") {
  TempDir tmp;
  const std::string path = tmp / "trace.json";
  crucible::testing::write_file(path, "not a trace");
  const auto traced = [&](int64_t first_batch, std::vector<std::string>& warnings) {
    OperatorTrace trace(path, first_batch);
    trace.set_recording(true);
    {
      at::RecordFunction scope(at::RecordScope::USER_SCOPE);
      if (scope.isActive()) scope.before(kBatchRange, c10::ArrayRef<const c10::IValue>{});
      (void)torch::mm(torch::ones({2, 2}), torch::ones({2, 2}));
    }
    trace.set_recording(false);
    trace.write([&](const std::string& w) { warnings.push_back(w); });
  };
  std::vector<std::string> warnings;
  traced(3, warnings);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("not a Chrome trace") &&
                              Catch::Contains("replaced by the trace of batches from 3"));
  traced(7, warnings);
  CHECK(warnings.size() == 1);
  std::map<std::pair<int64_t, std::string>, int> count;
  for (const auto& [pid, name, ts] : parsed(crucible::testing::read_file(path)).events) {
    ++count[{pid.get<int64_t>(), name}];
  }
  CHECK(count[{3, kBatchRange}] == 1);
  CHECK(count[{3, "aten::mm"}] == 1);
  CHECK(count[{7, kBatchRange}] == 1);
  CHECK(count[{7, "aten::mm"}] == 1);
}
