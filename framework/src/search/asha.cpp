#include "search/asha.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>

namespace crucible::search {
namespace {

// base^exponent, saturated at the largest int64_t (a bracket_rungs far above log_d(max_time)).
int64_t power(int64_t base, int64_t exponent) {
  int64_t out = 1;
  for (int64_t i = 0; i < exponent; ++i) {
    if (out > std::numeric_limits<int64_t>::max() / base)
      return std::numeric_limits<int64_t>::max();
    out *= base;
  }
  return out;
}

}  // namespace

int64_t asha_rungs(const AshaOptions& o) {
  if (!o.brackets().empty()) return *std::max_element(o.brackets().begin(), o.brackets().end());
  if (o.bracket_rungs()) return *o.bracket_rungs();
  const double ln_d = std::log(static_cast<double>(o.divisor()));
  const auto by_time =
      static_cast<int64_t>(std::floor(std::log(static_cast<double>(o.max_time())) / ln_d)) + 1;
  const auto by_trials =
      static_cast<int64_t>(std::floor(std::log(static_cast<double>(o.max_trials())) / ln_d)) + 1;
  return std::min({o.max_rungs(), by_time, by_trials});
}

std::vector<AshaBracket> asha_brackets(const AshaOptions& o) {
  if (o.divisor() < 2 || o.max_trials() < 1 || o.max_time() < 1 || o.max_rungs() < 1) {
    throw Error("adaptive ASHA needs divisor >= 2 and positive max_trials, max_time, max_rungs");
  }
  const int64_t r = asha_rungs(o);
  if (r > kMostBracketRungs) {
    throw ConfigError(
        fmt::format("searcher.bracket_rungs: {} rungs; at most {}", r, kMostBracketRungs));
  }
  std::vector<int64_t> counts = o.brackets();
  if (counts.empty()) {
    if (r < 1) throw ConfigError(fmt::format("searcher.bracket_rungs: {} rungs", r));
    counts = mode_brackets(o.mode(), r);
  }
  std::sort(counts.rbegin(), counts.rend());
  if (counts.back() < 1) {
    throw ConfigError(fmt::format("searcher.bracket_rungs: a bracket of {} rungs", counts.back()));
  }
  // What made the brackets, for the errors below.
  const std::string made =
      o.brackets().empty()
          ? fmt::format("{} rungs make {} brackets in this mode", r, counts.size())
          : fmt::format("the {} brackets [{}]", counts.size(), fmt::join(counts, ", "));
  const std::string fewer = o.brackets().empty() ? "give fewer rungs, more trials or mode "
                                                   "aggressive"
                                                 : "give fewer brackets or more trials";
  if (static_cast<int64_t>(counts.size()) > o.max_trials()) {
    throw ConfigError(
        fmt::format("searcher.bracket_rungs: {}, more than max_trials ({}); each "
                    "bracket needs a trial: {}",
                    made, o.max_trials(), fewer));
  }

  std::vector<double> weights;
  double total = 0;
  for (const int64_t rungs : counts) {
    weights.push_back(std::pow(static_cast<double>(o.divisor()), static_cast<double>(rungs - 1)) /
                      static_cast<double>(rungs));
    total += weights.back();
  }
  if (!std::isfinite(total)) {
    // d^(r-1) past a double's range: the same shares, from logarithms relative to the largest.
    const double ln_d = std::log(static_cast<double>(o.divisor()));
    total = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      const auto rungs = static_cast<double>(counts[i]);
      const auto top = static_cast<double>(counts.front());
      weights[i] = std::exp((rungs - top) * ln_d - std::log(rungs) + std::log(top));
      total += weights[i];
    }
  }
  std::vector<AshaBracket> out(counts.size());
  int64_t assigned = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    out[i].rungs = counts[i];
    out[i].trials = std::max<int64_t>(
        static_cast<int64_t>(weights[i] / total * static_cast<double>(o.max_trials())), 1);
    assigned += out[i].trials;
    for (int64_t rung = 0; rung < counts[i]; ++rung) {
      out[i].rung_lengths.push_back(
          std::max<int64_t>(o.max_time() / power(o.divisor(), counts[i] - rung - 1), 1));
    }
  }
  // Every bracket but the first gets at least one trial; the first gets what they leave.
  const int64_t others = assigned - out.front().trials;
  if (o.max_trials() - others < 1) {
    throw ConfigError(fmt::format(
        "searcher.bracket_rungs: {}, whose shares of max_trials ({}) add up to {}, leaving the "
        "{}-rung bracket no trial; {}",
        made, o.max_trials(), others, counts.front(), fewer));
  }
  out.front().trials = o.max_trials() - others;

  const auto n = static_cast<int64_t>(out.size());
  if (o.max_concurrent_trials() == 0) {
    for (auto& b : out) b.concurrency = std::max(out.back().trials, o.divisor());
  } else {
    const int64_t c = std::max(o.max_concurrent_trials(), n);
    for (int64_t i = 0; i < n; ++i) out[i].concurrency = c / n + (i < c % n ? 1 : 0);
  }
  return out;
}

AshaRungs::AshaRungs(std::vector<int64_t> rung_lengths, int64_t divisor)
    : lengths_(std::move(rung_lengths)), divisor_(divisor), rungs_(lengths_.size()) {}

AshaDecision AshaRungs::record(int64_t trial, int64_t length, double metric) {
  size_t& next = next_rung_[trial];
  for (; next < lengths_.size() && length >= lengths_[next]; ++next) {
    auto& rung = rungs_[next];
    const auto at = std::lower_bound(rung.begin(), rung.end(), metric,
                                     [](const Entry& e, double m) { return e.metric < m; });
    const auto position = static_cast<int64_t>(at - rung.begin());
    rung.insert(at, {metric, trial});
    if (next + 1 == lengths_.size()) {
      ++next;
      return AshaDecision::kDone;
    }
    const auto size = static_cast<int64_t>(rung.size());
    if (position >= std::max<int64_t>(size / divisor_, 1)) {
      ++next;
      return AshaDecision::kStop;
    }
  }
  return AshaDecision::kContinue;
}

void AshaRungs::remove(int64_t trial) {
  for (auto& rung : rungs_) {
    rung.erase(
        std::remove_if(rung.begin(), rung.end(), [&](const Entry& e) { return e.trial == trial; }),
        rung.end());
  }
  next_rung_.erase(trial);
}

std::vector<double> AshaRungs::rung(size_t i) const {
  std::vector<double> out;
  for (const auto& e : rungs_.at(i)) out.push_back(e.metric);
  return out;
}

}  // namespace crucible::search
