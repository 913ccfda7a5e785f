#include <limits>
#include <set>

#include "catch.h"

#include "fit_helpers.h"
#include "train/schedule.h"

using namespace crucible::testing;
using crucible::Length;
using crucible::LengthUnit;
using V = std::vector<int64_t>;

TEST_CASE("Schedule: period arithmetic for batches, epochs and records", "[train]") {
  crucible::train::Schedule s;
  s.epoch_len = 13;
  s.global_batch_size = 8;
  std::vector<int64_t> fired;
  for (int64_t b = 1; b <= 40; ++b) {
    if (s.fires({LengthUnit::kRecords, 50}, b)) fired.push_back(b);
  }
  CHECK(fired == V{7, 13, 19, 25, 32, 38});
  CHECK(s.fires({LengthUnit::kEpochs, 2}, 26));
  CHECK_FALSE(s.fires({LengthUnit::kEpochs, 2}, 13));
  CHECK_FALSE(s.fires({LengthUnit::kBatches, 0}, 10));
  CHECK(s.to_batches({LengthUnit::kEpochs, 3}) == 39);
  CHECK(s.to_batches({LengthUnit::kRecords, 17}) == 3);
  CHECK(s.to_batches({LengthUnit::kRecords, 16}) == 2);

  // Lengths near the int64 limit: records round up without overflowing; epochs whose batches
  // do not fit are a config error naming the key.
  const int64_t most = std::numeric_limits<int64_t>::max();
  CHECK(s.to_batches({LengthUnit::kRecords, most}) == most / 8 + 1);
  CHECK(s.to_batches({LengthUnit::kEpochs, most / 13}) == most / 13 * 13);
  int code = 0;
  CHECK(error_of(
            [&] {
              s.to_batches({LengthUnit::kEpochs, most / 13 + 1});
            },
            &code) ==
        "max_length: 709490156681136601 epochs of 13 batches each are more batches than a run "
        "can count (9223372036854775807)");
  CHECK(code == crucible::kExitBadUsage);
}

TEST_CASE("validations and checkpoints happen exactly when the periods say", "[train]") {
  TempDir tmp;
  SECTION("batch validation period, epoch checkpoint period, 13-batch epochs of 100 records") {
    auto config = recording_config(R"(max_length: {epochs: 3}
min_validation_period: {batches: 10}
min_checkpoint_period: {epochs: 1}
)");
    fit_recording(config, tmp / "run");
    auto rows = read_metrics(tmp / "run/metrics.jsonl");
    CHECK(batches_of(rows, "validation") == V{10, 20, 30, 39});
    CHECK(checkpoint_batches(tmp / "run") == V{13, 26, 39});
  }
  SECTION("epoch validation period, record checkpoint period") {
    auto config = recording_config(R"(max_length: {epochs: 3}
min_validation_period: {epochs: 2}
min_checkpoint_period: {records: 50}
)");
    fit_recording(config, tmp / "run");
    auto rows = read_metrics(tmp / "run/metrics.jsonl");
    CHECK(batches_of(rows, "validation") == V{26, 39});
    CHECK(checkpoint_batches(tmp / "run") == V{7, 13, 19, 25, 32, 38, 39});
  }
  SECTION("records_per_epoch defines the epoch; initial validation; length in records") {
    auto config = recording_config(R"(max_length: {records: 80}
records_per_epoch: 40
perform_initial_validation: true
min_validation_period: {epochs: 1}
min_checkpoint_period: {batches: 0}
)");
    fit_recording(config, tmp / "run");
    auto rows = read_metrics(tmp / "run/metrics.jsonl");
    CHECK(batches_of(rows, "validation") == V{0, 5, 10});
    CHECK(checkpoint_batches(tmp / "run") == V{10});
  }
}

TEST_CASE("batch and epoch indices follow DESIGN.md counting", "[train]") {
  TempDir tmp;
  fit_recording(recording_config("max_length: {epochs: 3}\n"), tmp / "run");
  const auto& calls = RecordingTrial::calls();
  REQUIRE(calls.size() == 39);
  for (size_t i = 0; i < calls.size(); ++i) {
    const int64_t b = static_cast<int64_t>(i);
    CHECK(calls[i].batch_idx == b);
    CHECK(calls[i].epoch_idx == b / 13);
    CHECK(calls[i].epoch_start == (b % 13 == 0));
    CHECK(calls[i].epoch_end == (b % 13 == 12));
  }
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::multiset<int64_t> seen;
    for (int b = epoch * 13; b < (epoch + 1) * 13; ++b) {
      seen.insert(calls[b].indices.begin(), calls[b].indices.end());
    }
    INFO("epoch " << epoch);
    CHECK(seen.size() == 100);
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 100);
  }
}

TEST_CASE("training metrics are reported every scheduling_unit batches", "[train]") {
  TempDir tmp;
  fit_recording(recording_config("max_length: {batches: 12}\nscheduling_unit: 5\n"), tmp / "run");
  auto rows = read_metrics(tmp / "run/metrics.jsonl");
  CHECK(batches_of(rows, "training") == V{5, 10, 12});
  CHECK(rows.front()["records"] == 40);
}
