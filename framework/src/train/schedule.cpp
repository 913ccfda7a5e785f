#include "train/schedule.h"

#include <limits>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::train {

Schedule Schedule::make(const ExperimentConfig& config, int64_t loader_batches_per_epoch) {
  Schedule s;
  s.global_batch_size = config.global_batch_size();
  s.epoch_len = config.records_per_epoch > 0
                    ? (config.records_per_epoch - 1) / s.global_batch_size + 1
                    : loader_batches_per_epoch;
  if (s.epoch_len <= 0) throw TrainingError("the training data loader yields no batch");
  return s;
}

bool Schedule::fires(const Length& period, int64_t batches) const {
  if (period.value <= 0 || batches <= 0) return false;
  switch (period.unit) {
    case LengthUnit::kBatches:
      return batches % period.value == 0;
    case LengthUnit::kEpochs:
      return batches % epoch_len == 0 && (batches / epoch_len) % period.value == 0;
    case LengthUnit::kRecords:
      return records(batches) / period.value > records(batches - 1) / period.value;
  }
  return false;
}

int64_t Schedule::to_batches(const Length& length, const char* key) const {
  switch (length.unit) {
    case LengthUnit::kBatches:
      return length.value;
    case LengthUnit::kEpochs: {
      int64_t batches = 0;
      if (__builtin_mul_overflow(length.value, epoch_len, &batches)) {
        throw ConfigError(fmt::format(
            "{}: {} epochs of {} batches each are more batches than a run can count ({})", key,
            length.value, epoch_len, std::numeric_limits<int64_t>::max()));
      }
      return batches;
    }
    case LengthUnit::kRecords:
      return length.value <= 0 ? 0 : (length.value - 1) / global_batch_size + 1;
  }
  return 0;
}

}  // namespace crucible::train
