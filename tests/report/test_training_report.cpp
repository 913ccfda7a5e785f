// The training reports a fit writes (train::Reporter): the pace they give, in batches per second
// and time left, counts what this process trained.
#include <chrono>
#include <thread>

#include "catch.h"

#include "train/reporter.h"

using crucible::DistributedContext;
using crucible::ExperimentConfig;
using crucible::metrics::MetricSink;
using crucible::metrics::Progress;
using crucible::metrics::Report;
using crucible::train::FitState;
using crucible::train::Reporter;

namespace {

// Keeps the reports it was given.
struct KeepingSink : MetricSink {
  explicit KeepingSink(std::vector<Report>* kept) : kept_(kept) {}
  void write(const Report& report) override { kept_->push_back(report); }
  std::vector<Report>* kept_;
};

// The pending training sums of `batches` batches of loss 1, as a checkpoint holds them.
nlohmann::json pending_sums(const ExperimentConfig& config, const DistributedContext& dist,
                            int64_t batches) {
  Reporter earlier(config, dist);
  for (int64_t b = 0; b < batches; ++b) earlier.add_training({{"loss", 1.0}}, b);
  return earlier.training_state();
}

}  // namespace

TEST_CASE("a resumed run's first training report paces only the batches this process trained",
          "[report][training]") {
  const ExperimentConfig config;
  const DistributedContext dist;
  std::vector<Report> kept;
  Reporter reporter(config, dist);
  reporter.add_sink(std::make_unique<KeepingSink>(&kept));
  reporter.set_length(16, 100);
  // Resumed at batch 58 with 18 batches of the period trained by the process before.
  reporter.restore_training(pending_sums(config, dist, 18));
  reporter.start_training(58);
  FitState state;
  for (int64_t b = 58; b < 60; ++b) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reporter.add_training({{"loss", 3.0}}, b);
  }
  state.batches = 60;
  reporter.report_training(state, Progress{60, 960, 3.75});
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].values.at("loss") == Approx(1.2));  // (18 * 1 + 2 * 3) / 20
  REQUIRE(kept[0].batches_per_second);
  CHECK(*kept[0].batches_per_second * kept[0].seconds == Approx(2));
  CHECK(kept[0].seconds_left);

  // The next period counts its own batches.
  for (int64_t b = 60; b < 63; ++b) reporter.add_training({{"loss", 3.0}}, b);
  state.batches = 63;
  reporter.report_training(state, Progress{63, 1008, 63 / 16.0});
  REQUIRE(kept.size() == 2);
  REQUIRE(kept[1].batches_per_second);
  CHECK(*kept[1].batches_per_second * kept[1].seconds == Approx(3));

  // Sums restored and nothing trained yet (a stop right after the resume): no pace at all.
  Reporter stopped(config, dist);
  stopped.add_sink(std::make_unique<KeepingSink>(&kept));
  stopped.set_length(16, 100);
  stopped.restore_training(pending_sums(config, dist, 18));
  stopped.start_training(58);
  state.batches = 58;
  stopped.report_training(state, Progress{58, 928, 58 / 16.0});
  REQUIRE(kept.size() == 3);
  CHECK_FALSE(kept[2].batches_per_second);
  CHECK_FALSE(kept[2].seconds_left);
}

TEST_CASE("a --test-mode run's training report gives no time left to max_length",
          "[report][training]") {
  const ExperimentConfig config;
  const DistributedContext dist;
  std::vector<Report> kept;
  for (const bool test_mode : {true, false}) {
    Reporter reporter(config, dist);
    reporter.add_sink(std::make_unique<KeepingSink>(&kept));
    reporter.set_length(16, 100);
    reporter.start_training(0);
    reporter.add_training({{"loss", 1.0}}, 0);
    FitState state;
    state.batches = 1;
    state.test_mode = test_mode;
    reporter.report_training(state, Progress{1, 16, 1 / 16.0});
    REQUIRE(kept.back().batches_per_second);
    CHECK(kept.back().seconds_left.has_value() == !test_mode);
  }
}
