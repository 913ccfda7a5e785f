// Validation metric reduction: per batch on a rank, then across ranks, exact for every reducer.
#include "catch.h"

#include <cmath>

#include "metrics/reducer.h"

using crucible::EvaluationReducer;
using crucible::ReduceOp;
namespace metrics = crucible::metrics;

namespace {

crucible::Metrics batch(double loss, double worst, double correct) {
  return {{"loss", torch::tensor(loss)},
          {"worst", torch::tensor(worst)},
          {"correct", torch::tensor(correct)}};
}

const EvaluationReducer kReducers({{"worst", ReduceOp::kMax}, {"correct", ReduceOp::kSum}},
                                  ReduceOp::kAvg);

}  // namespace

TEST_CASE("validation metrics reduce per batch as each metric's reducer says", "[metrics]") {
  metrics::ValidationAccumulator acc(kReducers);
  acc.add(batch(1.0, 3.0, 10), 4, 0);
  acc.add(batch(4.0, 2.0, 5), 2, 1);  // a short last batch
  const crucible::MetricValues v = acc.result();
  CHECK(v.at("loss") == Approx((1.0 * 4 + 4.0 * 2) / 6));  // weighted by batch length
  CHECK(v.at("worst") == 3.0);
  CHECK(v.at("correct") == 15.0);

  metrics::ValidationAccumulator mins(EvaluationReducer(ReduceOp::kMin));
  mins.add({{"loss", torch::tensor(2.0)}}, 1, 0);
  mins.add({{"loss", torch::tensor(-1.0)}}, 1, 1);
  CHECK(mins.result().at("loss") == -1.0);
}

TEST_CASE("ranks' partial results combine to what one rank over all batches gives", "[metrics]") {
  metrics::ValidationAccumulator all(kReducers), rank0(kReducers), rank1(kReducers),
      idle(kReducers);
  const std::vector<std::pair<crucible::Metrics, int64_t>> batches = {
      {batch(1.0, 3.0, 10), 4}, {batch(2.0, 7.0, 1), 4}, {batch(4.0, 2.0, 5), 2}};
  for (size_t i = 0; i < batches.size(); ++i) {
    all.add(batches[i].first, batches[i].second, static_cast<int64_t>(i));
    (i % 2 == 0 ? rank0 : rank1).add(batches[i].first, batches[i].second, static_cast<int64_t>(i));
  }
  const crucible::MetricValues combined =
      metrics::combine_partials({rank0.partial(), idle.partial(), rank1.partial()}, kReducers);
  const crucible::MetricValues expected = all.result();
  REQUIRE(combined.size() == expected.size());
  for (const auto& [name, value] : expected) {
    INFO(name);
    CHECK(combined.at(name) == Approx(value));
  }
}

TEST_CASE("ranks or batches that report different metrics are an error naming them", "[metrics]") {
  metrics::ValidationAccumulator acc(kReducers);
  acc.add(batch(1.0, 3.0, 10), 4, 0);
  CHECK_THROWS_WITH(acc.add({{"loss", torch::tensor(1.0)}}, 4, 1),
                    Catch::Contains("evaluate_batch returned keys {loss} at validation batch 1"));
  CHECK_THROWS_WITH(acc.add({{"loss", torch::ones({2})},
                             {"worst", torch::tensor(1.0)},
                             {"correct", torch::tensor(1.0)}},
                            4, 2),
                    Catch::Contains("metric 'loss' at batch 2 with 2 elements"));

  metrics::ValidationAccumulator other(kReducers);
  other.add({{"loss", torch::tensor(1.0)}}, 4, 0);
  CHECK_THROWS_WITH(metrics::combine_partials({acc.partial(), other.partial()}, kReducers),
                    Catch::Contains("ranks report different validation metrics: rank 0 reports"));
}

TEST_CASE("training means: the first non-finite batch, skipped values, counts, state",
          "[metrics]") {
  using crucible::metrics::TrainingAccumulator;
  const double nan = std::nan("");
  auto batch = [](double loss) { return crucible::Metrics{{"loss", torch::tensor(loss)}}; };

  TrainingAccumulator stop;
  stop.add(batch(1.0), 10);
  stop.add(batch(3.0), 11);
  CHECK(stop.first_non_finite("loss") == -1);
  stop.add(batch(nan), 12);
  stop.add(batch(2.0), 13);
  CHECK(std::isnan(stop.peek().at("loss")));
  CHECK(stop.first_non_finite("loss") == 12);
  CHECK(stop.first_non_finite("accuracy") == -1);

  TrainingAccumulator skip(/*skip_non_finite=*/true);
  skip.add(batch(1.0), 0);
  skip.add(batch(nan), 1);
  skip.add(batch(3.0), 2);
  skip.add_count("skipped_steps", 1);
  skip.add_count("skipped_steps", 0);
  const auto means = skip.peek();
  CHECK(means.at("loss") == 2.0);  // the NaN left out
  CHECK(means.at("skipped_steps") == 1.0);
  CHECK(skip.first_non_finite("loss") == -1);

  // The pending state round-trips, and a checkpoint's older [sum, count] form still reads.
  TrainingAccumulator back(true);
  back.restore(nlohmann::json::parse(skip.state().dump()));
  CHECK(back.peek() == means);
  CHECK(back.batches() == 3);
  TrainingAccumulator old;
  old.restore({{"batches", 2}, {"sums", {{"loss", {5.0, 2}}}}});
  CHECK(old.flush() == crucible::MetricValues{{"loss", 2.5}});
  CHECK(old.empty());
}

TEST_CASE("metrics may be plain numbers beside tensors", "[metrics]") {
  const crucible::Metrics first = {
      {"loss", torch::tensor(0.5)}, {"accuracy", 0.75}, {"count", 3}, {"ok", true}};
  CHECK(first.at("accuracy").dtype() == torch::kDouble);
  CHECK(first.at("count").item<double>() == 3.0);
  CHECK(first.at("loss").dtype() == torch::kFloat);  // a tensor stays as it is
  metrics::ValidationAccumulator validation(EvaluationReducer(ReduceOp::kAvg));
  validation.add(first, 2, 0);
  validation.add({{"loss", 1.5}, {"accuracy", 0.25f}, {"count", int64_t{5}}, {"ok", false}}, 2, 1);
  const crucible::MetricValues v = validation.result();
  CHECK(v.at("loss") == 1.0);
  CHECK(v.at("accuracy") == 0.5);
  CHECK(v.at("count") == 4.0);
  CHECK(v.at("ok") == 0.5);
  metrics::TrainingAccumulator training;
  training.add(first, 0);
  training.add({{"loss", 2.5}, {"accuracy", 1}, {"count", 1}, {"ok", 1}}, 1);
  CHECK(training.flush() ==
        crucible::MetricValues{{"loss", 1.5}, {"accuracy", 0.875}, {"count", 2.0}, {"ok", 1.0}});
}

TEST_CASE(
    "training means are the in-order double sums of the values, whatever their dtype, and a "
    "state taken mid-period changes none",
    "[metrics]") {
  using crucible::metrics::TrainingAccumulator;
  // Values whose float sum and whose sum in another order differ from the in-order double sum.
  torch::manual_seed(3);
  const torch::Tensor losses = torch::rand({200}) * 1000;
  double expected = 0;
  for (int64_t i = 0; i < losses.size(0); ++i) {
    const double v = static_cast<double>(losses[i].item<float>());
    expected = i == 0 ? v : expected + v;
  }
  expected /= static_cast<double>(losses.size(0));

  TrainingAccumulator whole, split;
  for (int64_t i = 0; i < losses.size(0); ++i) {
    // A view into the whole tensor (kept as a copy), then as a tensor of its own.
    const crucible::Metrics m = {{"loss", i % 2 == 0 ? losses[i] : losses[i].clone()}};
    whole.add(m, i);
    split.add(m, i);
    if (i == 77) {
      TrainingAccumulator resumed;
      resumed.restore(nlohmann::json::parse(split.state().dump()));
      split = std::move(resumed);
    }
  }
  CHECK(whole.peek().at("loss") == expected);
  CHECK(split.peek().at("loss") == expected);

  // Each CPU dtype reads as to(kDouble) would.
  TrainingAccumulator dtypes;
  dtypes.add({{"half", torch::tensor(0.1).to(torch::kHalf)},
              {"bf16", torch::tensor(0.1).to(torch::kBFloat16)},
              {"int", torch::tensor(int64_t{7})},
              {"flag", torch::tensor(true)},
              {"shaped", torch::full({1, 1}, 2.5)}},
             0);
  const auto means = dtypes.flush();
  CHECK(means.at("half") == torch::tensor(0.1).to(torch::kHalf).to(torch::kDouble).item<double>());
  CHECK(means.at("bf16") ==
        torch::tensor(0.1).to(torch::kBFloat16).to(torch::kDouble).item<double>());
  CHECK(means.at("int") == 7.0);
  CHECK(means.at("flag") == 1.0);
  CHECK(means.at("shaped") == 2.5);
}

TEST_CASE("a metric tensor the trial changes in place after returning it keeps its value",
          "[metrics]") {
  // A running counter the trial zeroes and fills again each batch, returned each time.
  torch::Tensor counter = torch::tensor(1.0);
  metrics::TrainingAccumulator training;
  metrics::ValidationAccumulator validation(EvaluationReducer(ReduceOp::kSum));
  training.add({{"acc", counter}}, 0);
  validation.add({{"correct", counter}}, 1, 0);
  counter.fill_(5.0);
  training.add({{"acc", counter}}, 1);
  validation.add({{"correct", counter}}, 1, 1);
  counter.fill_(100.0);
  CHECK(training.peek().at("acc") == 3.0);
  CHECK(validation.result().at("correct") == 6.0);
}

TEST_CASE("a NaN maximum or minimum wins across ranks in either order, as on one rank",
          "[metrics]") {
  const EvaluationReducer extremes({{"worst", ReduceOp::kMax}, {"best", ReduceOp::kMin}},
                                   ReduceOp::kAvg);
  metrics::ValidationAccumulator finite(extremes), nan(extremes);
  finite.add({{"worst", torch::tensor(1.0)}, {"best", torch::tensor(1.0)}}, 1, 0);
  nan.add({{"worst", torch::tensor(std::nan(""))}, {"best", torch::tensor(std::nan(""))}}, 1, 1);
  for (const auto& partials : {std::vector<nlohmann::json>{finite.partial(), nan.partial()},
                               std::vector<nlohmann::json>{nan.partial(), finite.partial()}}) {
    const auto combined = metrics::combine_partials(partials, extremes);
    CHECK(std::isnan(combined.at("worst")));
    CHECK(std::isnan(combined.at("best")));
  }
}

TEST_CASE("a metric name that is empty or not UTF-8 is refused by name of the method and batch",
          "[metrics]") {
  metrics::ValidationAccumulator validation(crucible::ReduceOp::kAvg);
  CHECK_THROWS_WITH(validation.add({{"", torch::tensor(1.0)}}, 4, 3),
                    Catch::StartsWith("evaluate_batch returned a metric with an empty name at "
                                      "batch 3; name it"));
  metrics::TrainingAccumulator training;
  CHECK_THROWS_WITH(training.add({{"pr\xE9"
                                   "cision",
                                   torch::tensor(1.0)}},
                                 7),
                    Catch::Contains("train_batch returned a metric at batch 7 whose name is not "
                                    "UTF-8 text (byte 0xE9 at offset 2)"));
}
