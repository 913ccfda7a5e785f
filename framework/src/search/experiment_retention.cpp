#include "search/experiment_retention.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/retention.h"
#include "train/checkpointer.h"
#include "util/file_system.h"

namespace crucible::search {

ExperimentRetention keep_experiment_best(const ExperimentConfig& config,
                                         const std::vector<std::string>& run_dirs,
                                         const std::function<void(const std::string&)>& warn) {
  const CheckpointStorageConfig& storage = config.checkpoint_storage;
  if (storage.save_experiment_best == 0) return {};
  const bool smaller = config.searcher.smaller_is_better;
  std::vector<std::vector<checkpoint::Entry>> runs;
  std::vector<checkpoint::Entry> ranked;
  for (const std::string& run : run_dirs) {
    runs.emplace_back();
    for (const std::string& dir : checkpoint::list(run)) {
      const auto entry = train::retention_entry(dir, config.searcher.metric);
      if (!entry) continue;
      runs.back().push_back(*entry);
      if (entry->metric && !std::isnan(*entry->metric)) ranked.push_back(*entry);
    }
  }
  std::sort(ranked.begin(), ranked.end(),
            [&](const checkpoint::Entry& a, const checkpoint::Entry& b) {
              if (*a.metric != *b.metric)
                return smaller ? *a.metric < *b.metric : *a.metric > *b.metric;
              return a.dir < b.dir;
            });
  std::set<std::string> experiment_best;
  for (size_t i = 0; i < ranked.size() && i < static_cast<size_t>(storage.save_experiment_best);
       ++i) {
    experiment_best.insert(ranked[i].dir);
  }
  ExperimentRetention out;
  for (const auto& entries : runs) {
    for (const std::string& dir : checkpoint::to_delete(entries, storage.save_trial_latest,
                                                        storage.save_trial_best, smaller)) {
      if (experiment_best.count(dir)) continue;
      try {
        (checkpoint::remove(dir) ? out.deleted : out.being_read).push_back(dir);
      } catch (const std::exception& e) {
        warn(fmt::format("cannot delete checkpoint {}: {}", dir, e.what()));
      }
    }
  }
  return out;
}

}  // namespace crucible::search
