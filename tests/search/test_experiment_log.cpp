// experiment.jsonl: rows kept across a reopen, a kill's torn last row cut off, damage refused.
#include "catch.h"

#include "process.h"
#include "search/experiment_log.h"

using namespace crucible::testing;
using crucible::search::ExperimentLog;
using nlohmann::json;

TEST_CASE("the experiment log keeps its rows, cuts a torn last row and refuses damage",
          "[search]") {
  TempDir tmp;
  const std::string path = tmp / "experiment.jsonl";
  {
    ExperimentLog log(path);
    CHECK(log.rows().empty());
    log.append({{{"event", "created"}, {"trial", 1}}, {{"event", "created"}, {"trial", 2}}});
    log.append({{{"event", "completed"}, {"trial", 1}}});
  }
  {
    ExperimentLog log(path);
    REQUIRE(log.rows().size() == 3);
    CHECK(log.rows()[2]["event"] == "completed");
    CHECK(log.rows()[2]["time"].is_number());
  }
  // A kill in the middle of a write leaves a torn last row: it is cut off, the rest kept, and
  // appending goes on after them.
  std::ofstream(path, std::ios::app) << "{\"event\": \"valid";
  {
    ExperimentLog log(path);
    CHECK(log.rows().size() == 3);
    log.append({{{"event", "failed"}, {"trial", 2}}});
  }
  CHECK(read_metrics(path).size() == 4);
  // A bad row with rows after it is no kill's doing: refused, naming the line, nothing dropped.
  const std::string text = read_file(path);
  write_file(path, "{\"event\": \"created\"}\nnot json\n{\"event\": \"completed\"}\n");
  CHECK_THROWS_WITH(ExperimentLog(path),
                    Catch::Contains(path + ":2: not a JSON row, and rows follow it"));
  CHECK(read_file(path) == "{\"event\": \"created\"}\nnot json\n{\"event\": \"completed\"}\n");
  CHECK(text.find("valid") == std::string::npos);
}
