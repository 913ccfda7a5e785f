// Adaptive ASHA's arithmetic against ../shared/SEARCH.md's worked example and rules.
#include "catch.h"

#include "search/asha.h"

using crucible::AshaMode;
using crucible::search::AshaDecision;
using crucible::search::AshaOptions;
using crucible::search::AshaRungs;

TEST_CASE("ASHA: the worked example (T 1000, d 4, N 16, standard)", "[search][asha]") {
  AshaOptions o;  // the defaults are the example's, with C = 16
  CHECK(crucible::search::asha_rungs(o) == 3);
  const auto brackets = crucible::search::asha_brackets(o);
  REQUIRE(brackets.size() == 2);
  CHECK(brackets[0].rungs == 3);
  CHECK(brackets[1].rungs == 2);
  CHECK(brackets[0].trials == 12);
  CHECK(brackets[1].trials == 4);
  CHECK(brackets[0].concurrency == 8);
  CHECK(brackets[1].concurrency == 8);
  CHECK(brackets[0].rung_lengths == std::vector<int64_t>{62, 250, 1000});
  CHECK(brackets[1].rung_lengths == std::vector<int64_t>{250, 1000});
}

TEST_CASE("ASHA: modes, rung limits and concurrency", "[search][asha]") {
  AshaOptions o;
  o.mode(AshaMode::kAggressive);
  auto b = crucible::search::asha_brackets(o);
  REQUIRE(b.size() == 1);
  CHECK(b[0].trials == 16);
  CHECK(b[0].concurrency == 16);
  o.mode(AshaMode::kConservative);
  b = crucible::search::asha_brackets(o);
  REQUIRE(b.size() == 3);
  // Weights 16/3, 2, 1 of 25/3: 10, 3 and 1 trials, the 2 left over to the first.
  CHECK(b[0].trials == 12);
  CHECK(b[1].trials == 3);
  CHECK(b[2].trials == 1);
  CHECK(b[2].rung_lengths == std::vector<int64_t>{1000});
  o.max_concurrent_trials(2);  // raised to the 3 brackets, one each
  b = crucible::search::asha_brackets(o);
  CHECK((b[0].concurrency == 1 && b[1].concurrency == 1 && b[2].concurrency == 1));
  o.max_concurrent_trials(0);  // no limit: max(trials of the last bracket, d)
  b = crucible::search::asha_brackets(o);
  CHECK(b[0].concurrency == 4);
  o.max_trials(1000);
  o.max_time(100000);
  o.max_rungs(3);
  CHECK(crucible::search::asha_rungs(o) == 3);
  o.bracket_rungs(2);
  CHECK(crucible::search::asha_rungs(o) == 2);
  o.max_time(3);  // rung lengths never drop below 1
  o.bracket_rungs(3);
  CHECK(crucible::search::asha_brackets(o)[0].rung_lengths == std::vector<int64_t>{1, 1, 3});
  // bracket_rungs far past log_d(max_time), with a divisor whose powers leave int64 and double
  // behind: lengths of 1 below the top, the trials all in the one aggressive bracket.
  o.mode(AshaMode::kAggressive);
  o.bracket_rungs(64);
  o.divisor(int64_t{1} << 40);
  o.max_trials(4);
  b = crucible::search::asha_brackets(o);
  REQUIRE(b.size() == 1);
  CHECK(b[0].trials == 4);
  CHECK(b[0].rung_lengths.size() == 64);
  CHECK(b[0].rung_lengths.front() == 1);
  CHECK(b[0].rung_lengths.back() == 3);
  o.bracket_rungs(65);
  CHECK_THROWS_WITH(crucible::search::asha_brackets(o),
                    Catch::Contains("searcher.bracket_rungs: 65 rungs; at most 64"));
  // Conservative: a bracket per rung count, each needing a trial.
  o.mode(AshaMode::kConservative);
  o.divisor(4);
  o.bracket_rungs(5);
  CHECK_THROWS_WITH(crucible::search::asha_brackets(o),
                    Catch::Contains("5 rungs make 5 brackets in this mode, more than max_trials "
                                    "(4)"));
  o.max_trials(5);
  CHECK(crucible::search::asha_brackets(o).size() == 5);
  // Enough brackets, but the other brackets' shares (at least one trial each) take every trial:
  // 3, 2, 1 and twelve of 1 out of 16 leave the 16-rung bracket none.
  o.divisor(2);
  o.max_trials(16);
  o.bracket_rungs(16);
  CHECK_THROWS_WITH(crucible::search::asha_brackets(o),
                    Catch::Contains("16 rungs make 16 brackets in this mode, whose shares of "
                                    "max_trials (16) add up to 18, leaving the 16-rung bracket no "
                                    "trial"));
  o.max_trials(19);  // 4, 2, 1 and twelve of 1 take all 19
  CHECK_THROWS_WITH(crucible::search::asha_brackets(o),
                    Catch::Contains("add up to 19, leaving the 16-rung bracket no trial"));
  o.max_trials(20);  // 9, 4, 2, 1, and twelve of 1: one left for the first
  b = crucible::search::asha_brackets(o);
  int64_t trials = 0;
  for (const auto& bracket : b) trials += bracket.trials;
  CHECK(trials == 20);
  CHECK(b[0].trials == 1);
}

TEST_CASE("ASHA: Determined's list of bracket rungs replaces the mode's brackets",
          "[search][asha]") {
  // The worked example's brackets, given in any order: the same plan as standard mode's.
  AshaOptions o;
  o.mode(AshaMode::kAggressive).brackets({2, 3});
  auto b = crucible::search::asha_brackets(o);
  REQUIRE(b.size() == 2);
  CHECK((b[0].rungs == 3 && b[0].trials == 12 && b[1].rungs == 2 && b[1].trials == 4));
  CHECK(b[0].rung_lengths == std::vector<int64_t>{62, 250, 1000});
  CHECK(b[1].rung_lengths == std::vector<int64_t>{250, 1000});
  // Brackets the mode would never make: one of 4 rungs and one of 1.
  o.brackets({1, 4});
  b = crucible::search::asha_brackets(o);
  REQUIRE(b.size() == 2);
  CHECK(b[0].rung_lengths == std::vector<int64_t>{15, 62, 250, 1000});
  CHECK(b[1].rung_lengths == std::vector<int64_t>{1000});
  // More brackets than trials names the list.
  o.max_trials(2).brackets({3, 2, 1});
  CHECK_THROWS_WITH(crucible::search::asha_brackets(o),
                    Catch::Contains("searcher.bracket_rungs: the 3 brackets [3, 2, 1], more than "
                                    "max_trials (2); each bracket needs a trial: give fewer "
                                    "brackets or more trials"));
}

TEST_CASE("ASHA: a trial stops unless it is in the top 1/d of every rung it reaches",
          "[search][asha]") {
  AshaRungs rungs({62, 250, 1000}, 4);
  // Before the first rung's length nothing is recorded.
  CHECK(rungs.record(1, 50, 0.5) == AshaDecision::kContinue);
  CHECK(rungs.rung(0).empty());
  // Rung 0: the first trial is always kept (position 0 < max(1 / 4, 1)).
  CHECK(rungs.record(1, 62, 0.5) == AshaDecision::kContinue);
  // A worse second trial: position 1 >= max(2 / 4, 1): stopped.
  CHECK(rungs.record(2, 62, 0.7) == AshaDecision::kStop);
  // A better one goes first and continues.
  CHECK(rungs.record(3, 70, 0.3) == AshaDecision::kContinue);
  CHECK(rungs.rung(0) == std::vector<double>{0.3, 0.5, 0.7});
  // Trial 1 validates after 300 units: it joins rung 1 (it passed 250) as its only entry.
  CHECK(rungs.record(1, 300, 0.45) == AshaDecision::kContinue);
  CHECK(rungs.rung(1) == std::vector<double>{0.45});
  // Trial 3 reaches 1000 in one go: rungs 1 and 2; the top rung finishes it.
  CHECK(rungs.record(3, 1000, 0.2) == AshaDecision::kDone);
  CHECK(rungs.rung(1) == std::vector<double>{0.2, 0.45});
  CHECK(rungs.rung(2) == std::vector<double>{0.2});
  // A rung counts each trial once: trial 1's next validation below 1000 adds nothing.
  CHECK(rungs.record(1, 500, 0.1) == AshaDecision::kContinue);
  CHECK(rungs.rung(1).size() == 2);
  // An invalid trial leaves every rung.
  rungs.remove(3);
  CHECK(rungs.rung(0) == std::vector<double>{0.5, 0.7});
  CHECK(rungs.rung(2).empty());
}
