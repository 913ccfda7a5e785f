// TensorBoard's event files: the protocol buffer bytes of an event, the TFRecord framing read
// back, a torn or damaged tail, resume truncation, and a real run's file read by Python's protobuf
// library against metrics.jsonl.
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "catch.h"

#include "damage.h"

#include "metrics/event_file.h"
#include "metrics/tensorboard_sink.h"
#include "process.h"
#include "resumable_run.h"

using crucible::metrics::decode_event;
using crucible::metrics::encode_event;
using crucible::metrics::Event;
using crucible::metrics::event_file_in;
using crucible::metrics::read_event_file;
using crucible::metrics::Report;
using crucible::metrics::ReportKind;
using crucible::metrics::TensorBoardSink;
using crucible::metrics::truncate_tensorboard;
using namespace crucible::testing;

namespace {

Report report(ReportKind kind, int64_t batches, double loss) {
  Report r;
  r.kind = kind;
  r.progress = {batches, batches * 16, batches / 32.0};
  r.values = {{kind == ReportKind::kTraining ? "loss" : "validation_loss", loss}};
  r.seconds = 0.5;
  if (kind == ReportKind::kTraining) r.batches_per_second = 40;
  return r;
}

// The steps of the scalar events (not the file version event) of `events`.
std::vector<int64_t> steps_of(const std::vector<Event>& events) {
  std::vector<int64_t> steps;
  for (const auto& e : events) {
    if (e.file_version.empty() && !e.session_start) steps.push_back(e.step);
  }
  return steps;
}

// Whether `events` begin as a file that truncate_tensorboard wrote: the version, then a
// SessionLog START at step 0.
bool starts_over(const std::vector<Event>& events) {
  return events.size() >= 2 && events[0].file_version == "brain.Event:2" &&
         events[1].session_start && events[1].step == 0 && events[1].scalars.empty();
}

// Whether two events are the same, field by field.
bool same_event(const Event& a, const Event& b) {
  if (a.wall_time != b.wall_time || a.step != b.step || a.file_version != b.file_version ||
      a.scalars.size() != b.scalars.size()) {
    return false;
  }
  for (size_t i = 0; i < a.scalars.size(); ++i) {
    if (a.scalars[i].tag != b.scalars[i].tag || a.scalars[i].value != b.scalars[i].value) {
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("an event's protocol buffer carries TensorFlow's field numbers and wire types",
          "[metrics][tensorboard]") {
  const std::string bytes = encode_event({1.5, 3, "", {{"a", 2.0f}}});
  // wall_time (field 1, fixed64) 1.5; step (2, varint) 3; summary (5, bytes) holding one value
  // (1, bytes): tag (1, bytes) "a" and simple_value (2, fixed32) 2.0f.
  const std::string expected(
      "\x09\x00\x00\x00\x00\x00\x00\xF8\x3F"
      "\x10\x03"
      "\x2A\x0A\x0A\x08\x0A\x01\x61\x15\x00\x00\x00\x40",
      23);
  CHECK(bytes == expected);
  const auto back = decode_event(bytes);
  REQUIRE(back);
  CHECK(back->wall_time == 1.5);
  CHECK(back->step == 3);
  REQUIRE(back->scalars.size() == 1);
  CHECK(back->scalars[0].tag == "a");
  CHECK(back->scalars[0].value == 2.0f);

  const auto version = decode_event(encode_event({7, 0, "brain.Event:2", {}}));
  REQUIRE(version);
  CHECK(version->file_version == "brain.Event:2");
  // session_log (7, bytes) holding status (1, varint) START (1).
  const std::string start = encode_event({1.5, 0, "", {}, true});
  CHECK(start.substr(9) == std::string("\x3A\x02\x08\x01", 4));
  const auto back_start = decode_event(start);
  REQUIRE(back_start);
  CHECK(back_start->session_start);
  CHECK(back_start->scalars.empty());
  // A length that runs past the end, and an unknown wire type, are not an event.
  CHECK_FALSE(decode_event(std::string("\x2A\x10\x0A", 3)));
  CHECK_FALSE(decode_event(std::string("\x0F\x00", 2)));
}

TEST_CASE("the sink's reports read back: a torn or damaged tail and later steps are dropped",
          "[metrics][tensorboard]") {
  TempDir tmp;
  const std::string dir = tmp / "tensorboard";
  {
    TensorBoardSink sink(dir);
    sink.write(report(ReportKind::kTraining, 7, 0.9));
    sink.write(report(ReportKind::kValidation, 10, 0.8));
    sink.write(report(ReportKind::kStopped, 10, 0));
    sink.write(report(ReportKind::kTraining, 14, 0.7));
  }
  const std::string file = event_file_in(dir);
  REQUIRE_THAT(file, Catch::StartsWith(dir + "/events.out.tfevents."));
  auto events = read_event_file(file);
  REQUIRE(events.size() == 4);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(steps_of(events) == std::vector<int64_t>{7, 10, 14});
  std::map<std::string, float> at10;
  for (const auto& s : events[2].scalars) at10[s.tag] = s.value;
  CHECK(at10 == std::map<std::string, float>{{"validation/loss", 0.8f},
                                             {"timing/validation_seconds", 0.5f}});
  CHECK(events[1].scalars.size() == 2);  // training/loss and timing/batches_per_second

  // A sink opened again appends to the same file, with no second version event.
  TensorBoardSink(dir).write(report(ReportKind::kTraining, 21, 0.6));
  CHECK(steps_of(read_event_file(file)) == std::vector<int64_t>{7, 10, 14, 21});

  // A kill mid-record leaves a torn tail; resuming at batch 10 keeps steps 7 and 10.
  const std::string whole = read_file(file);
  {
    std::ofstream torn(file, std::ios::app | std::ios::binary);
    torn << whole.substr(whole.size() - 20, 9);
  }
  CHECK(steps_of(read_event_file(file)) == std::vector<int64_t>{7, 10, 14, 21});
  // The kept events go into a new file whose name sorts after the old one's (TensorBoard moves on
  // to it), after a session start that makes TensorBoard drop what it read of the old one.
  truncate_tensorboard(dir, 10);
  const std::string cut = event_file_in(dir);
  CHECK(cut > file);
  CHECK(event_files(dir) == std::vector<std::string>{crucible::util::file_name(cut)});
  events = read_event_file(cut);
  CHECK(starts_over(events));
  CHECK(steps_of(events) == std::vector<int64_t>{7, 10});
  // The sink appends to it.
  TensorBoardSink(dir).write(report(ReportKind::kTraining, 12, 0.5));
  CHECK(steps_of(read_event_file(cut)) == std::vector<int64_t>{7, 10, 12});
  // A file that holds nothing past the step stays as it is, for a TensorBoard reading it.
  const std::string before = read_file(cut);
  truncate_tensorboard(dir, 12);
  CHECK(event_file_in(dir) == cut);
  CHECK(read_file(cut) == before);

  // A damaged byte ends the readable events at its record.
  std::string damaged = read_file(cut);
  damaged[damaged.size() - 6] ^= 0x20;
  write_file(cut, damaged);
  CHECK(steps_of(read_event_file(cut)) == std::vector<int64_t>{7, 10});

  // Starting over (-1) keeps only the version event and the session start.
  truncate_tensorboard(dir, -1);
  events = read_event_file(event_file_in(dir));
  CHECK(events.size() == 2);
  CHECK(starts_over(events));
  CHECK(event_files(dir).size() == 1);
}

TEST_CASE(
    "a cut-back interrupted after its new event file: the newest is read, the next removes the "
    "rest",
    "[metrics][tensorboard]") {
  TempDir tmp;
  const std::string dir = tmp / "tensorboard";
  {
    TensorBoardSink sink(dir);
    for (int64_t b = 1; b <= 6; ++b) sink.write(report(ReportKind::kTraining, b, 1.0 / b));
  }
  const std::string old = event_file_in(dir);
  const std::string old_bytes = read_file(old);
  truncate_tensorboard(dir, 4);
  const std::string cut = event_file_in(dir);
  // As if killed before the old file's removal: both are there, and the newest is the one read
  // and appended to.
  write_file(old, old_bytes);
  write_file(dir + "/" + crucible::util::file_name(old) + ".tmp", "a torn atomic write");
  CHECK(event_file_in(dir) == cut);
  truncate_tensorboard(dir, 3);
  const std::string newest = event_file_in(dir);
  CHECK(newest > cut);
  CHECK(event_files(dir) == std::vector<std::string>{crucible::util::file_name(newest)});
  const auto events = read_event_file(newest);
  CHECK(starts_over(events));
  CHECK(steps_of(events) == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("every damaged copy of an event file reads as a prefix of its events",
          "[metrics][tensorboard]") {
  TempDir tmp;
  const std::string dir = tmp / "tensorboard";
  {
    TensorBoardSink sink(dir);
    for (int64_t b = 1; b <= 12; ++b) {
      sink.write(report(b % 4 ? ReportKind::kTraining : ReportKind::kValidation, b, 1.0 / b));
    }
  }
  const std::string file = event_file_in(dir);
  const std::vector<Event> good = read_event_file(file);
  REQUIRE(good.size() == 13);
  const std::string bytes = read_file(file);
  // Nothing is refused: a reader keeps the events before the damage, and so does truncation.
  std::mt19937_64 rng(20261124);
  for (int i = 0; i < 400; ++i) {
    const std::string bad = damaged_copy(bytes, i, rng);
    INFO("damage " << i);
    crucible::util::remove_all(dir);
    crucible::util::create_directories(dir);
    write_file(file, bad);
    const std::vector<Event> got = read_event_file(file);
    REQUIRE(got.size() <= good.size());
    for (size_t k = 0; k < got.size(); ++k) REQUIRE(same_event(got[k], good[k]));
    if (bad.size() < bytes.size() && bytes.compare(0, bad.size(), bad) == 0) {
      // A cut keeps exactly the records it leaves whole.
      size_t whole = 0;
      for (size_t at = 0; at < bad.size(); ++whole) {
        at += 16 + crucible::metrics::encode_event(good[whole]).size();
        if (at > bad.size()) break;
      }
      CHECK(got.size() == whole);
    }
    truncate_tensorboard(dir, 1000);
    REQUIRE(steps_of(read_event_file(event_file_in(dir))) == steps_of(got));
    REQUIRE(event_files(dir).size() == 1);
  }
}

TEST_CASE("a TensorBoard directory that cannot be made is an error naming it",
          "[metrics][tensorboard]") {
  TempDir tmp;
  write_file(tmp / "run", "a file where the run directory should be");
  CHECK_THROWS_WITH(TensorBoardSink(tmp / "run/tensorboard"),
                    Catch::Contains("cannot create TensorBoard directory " + (tmp / "run")));
}

TEST_CASE(
    "Python's protobuf reads the TensorBoard scalars of a killed and resumed run as metrics.jsonl "
    "has them",
    "[metrics][tensorboard]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  kill_after_report(kTrainer + " fit " + resumable_config(tmp, 20) + " --quiet --output " + run,
                    run, tmp / "log", 49, "batch-0000000040");
  resume_run(run);
  CHECK(event_files(run + "/tensorboard").size() == 1);
  const std::string file = event_file_in(run + "/tensorboard");
  REQUIRE(!file.empty());
  const auto py = run_command(kPython + " " + CRUCIBLE_SOURCE_DIR +
                              "/tests/metrics/read_tensorboard.py " + file);
  INFO(py.output);
  REQUIRE(py.exit_code == 0);
  auto events = nlohmann::json::parse(py.output.substr(0, py.output.find('\n')));
  REQUIRE(events.at(0)["file_version"] == "brain.Event:2");
  // The resume's session start, at step 0, which makes TensorBoard drop what it read before.
  REQUIRE(events.size() >= 2);
  CHECK(events.at(1)["session_start"] == true);
  CHECK(events.at(1)["step"] == 0);
  CHECK(events.at(1)["scalars"].empty());
  events.erase(1);
  for (size_t i = 1; i < events.size(); ++i) CHECK(events.at(i)["session_start"] == false);

  // Every training and validation row of metrics.jsonl, in order, is one event at its batch,
  // with each metric as a float under <type>/<name>, and the timing beside.
  std::vector<nlohmann::json> rows;
  for (const auto& row : read_metrics(run + "/metrics.jsonl")) {
    if (row["type"] != "stopped") rows.push_back(row);
  }
  REQUIRE(rows.size() == events.size() - 1);
  REQUIRE(rows.size() >= 20);
  double last_time = events.at(0)["wall_time"];
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const auto& event = events.at(i + 1);
    INFO("row " << row.dump() << "\nevent " << event.dump());
    CHECK(event["step"] == row["batches"]);
    const std::string type = row["type"];
    const auto& scalars = event["scalars"];
    CHECK(scalars.size() == row["metrics"].size() + 1);
    for (const auto& [name, value] : row["metrics"].items()) {
      // Validation rows name a metric validation_<name>; its tag is validation/<name>.
      if (type == "validation") REQUIRE(name.rfind("validation_", 0) == 0);
      const std::string tag = type + "/" + (type == "validation" ? name.substr(11) : name);
      REQUIRE(scalars.contains(tag));
      CHECK(scalars[tag].get<float>() == value.get<float>());
    }
    CHECK(scalars.contains(type == "training" ? "timing/batches_per_second"
                                              : "timing/validation_seconds"));
    CHECK(event["wall_time"].get<double>() >= last_time);
    last_time = event["wall_time"];
  }
}
