#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace crucible::checkpoint {

// A checkpoint as retention sees it.
struct Entry {
  std::string dir;
  int64_t batches = 0;
  std::optional<double> metric;  // searcher.metric, when validated at exactly these weights
                                 // (NaN: validated, but ranks as no metric; metadata.json
                                 // reads back any non-finite value as NaN)
};

// Which checkpoints to delete so that the union of the `keep_latest` newest and the `keep_best`
// best (by metric; smaller better when `smaller_is_better`) remains. The newest and the single
// best checkpoint are always kept, whatever the counts. Checkpoints past batch `now` (an earlier
// attempt's, newer than the one a resume could load, which the run replaces as it reaches their
// batches) are neither counted nor deleted.
std::vector<std::string> to_delete(const std::vector<Entry>& entries, int64_t keep_latest,
                                   int64_t keep_best, bool smaller_is_better,
                                   int64_t now = std::numeric_limits<int64_t>::max());

}  // namespace crucible::checkpoint
