#pragma once

#include <cstdint>

#include <crucible/config.h>

namespace crucible::train {

// The counting rules of DESIGN.md §3 for one trial. Records are counted nominally, as
// batches * global_batch_size.
struct Schedule {
  int64_t epoch_len = 1;  // batches per epoch, > 0
  int64_t global_batch_size = 1;

  // Builds the schedule; epoch_len is ceil(records_per_epoch / global_batch_size) when
  // records_per_epoch > 0, else `loader_batches_per_epoch`.
  static Schedule make(const ExperimentConfig& config, int64_t loader_batches_per_epoch);

  // Whether `period` fires after the batch that brings the count to `batches` (>= 1): batch
  // periods after counts divisible by n, epoch periods on the last batch of every n-th epoch,
  // record periods on the batch that crosses a multiple of n records. A zero period never fires.
  bool fires(const Length& period, int64_t batches) const;
  // `length` in batches (records rounded up to whole batches). Throws ConfigError naming `key`
  // when that count does not fit in an int64.
  int64_t to_batches(const Length& length, const char* key = "max_length") const;

  int64_t epoch_of(int64_t batch_idx) const { return batch_idx / epoch_len; }
  double epochs(int64_t batches) const {
    return static_cast<double>(batches) / static_cast<double>(epoch_len);
  }
  int64_t records(int64_t batches) const { return batches * global_batch_size; }
};

}  // namespace crucible::train
