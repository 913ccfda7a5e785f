#include "checkpoint/retention.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace crucible::checkpoint {

std::vector<std::string> to_delete(const std::vector<Entry>& entries, int64_t keep_latest,
                                   int64_t keep_best, bool smaller_is_better, int64_t now) {
  std::vector<const Entry*> by_age;
  for (const auto& e : entries) {
    if (e.batches <= now) by_age.push_back(&e);
  }
  std::sort(by_age.begin(), by_age.end(),
            [](const Entry* a, const Entry* b) { return a->batches > b->batches; });
  std::set<std::string> keep;
  for (int64_t i = 0;
       i < std::max<int64_t>(keep_latest, 1) && i < static_cast<int64_t>(by_age.size()); ++i) {
    keep.insert(by_age[static_cast<size_t>(i)]->dir);
  }
  std::vector<const Entry*> ranked;
  for (const auto* e : by_age) {
    // A NaN is no measure (and would stop the sort from moving anything ahead of it).
    if (e->metric && !std::isnan(*e->metric)) ranked.push_back(e);
  }
  // Stable on age: among equal metrics the newer checkpoint ranks first.
  std::stable_sort(ranked.begin(), ranked.end(), [&](const Entry* a, const Entry* b) {
    return smaller_is_better ? *a->metric < *b->metric : *a->metric > *b->metric;
  });
  for (int64_t i = 0;
       i < std::max<int64_t>(keep_best, 1) && i < static_cast<int64_t>(ranked.size()); ++i) {
    keep.insert(ranked[static_cast<size_t>(i)]->dir);
  }
  std::vector<std::string> out;
  for (const auto* e : by_age) {
    if (!keep.count(e->dir)) out.push_back(e->dir);
  }
  return out;
}

}  // namespace crucible::checkpoint
