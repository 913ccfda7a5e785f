#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "metrics/event_file.h"
#include "metrics/sink.h"

namespace crucible::metrics {

// TensorBoard's view of a run: one event file in a directory (a run's tensorboard/), holding each
// training and validation report as scalars at step = batches trained: `training/<name>` and
// `validation/<name>` for the metrics, <name> being what train_batch or evaluate_batch returns
// (metrics.jsonl's `validation_loss` is `validation/loss`), `timing/batches_per_second` for
// training throughput and `timing/validation_seconds`. A stop report adds nothing.
class TensorBoardSink : public MetricSink {
 public:
  // Appends to the event file in `dir` (event_file_in), or creates `dir` and
  // events.out.tfevents.<unix seconds>.<host name> in it, beginning with its file version event.
  // Throws TrainingError naming the path when it cannot.
  explicit TensorBoardSink(const std::string& dir);
  // Throws TrainingError naming the path when the event cannot be written (a full disk included).
  void write(const Report& report) override;

 private:
  void append(const Event& event);

  std::string path_;
  std::ofstream out_;
};

// The event file in `dir`: the last name, in sorted order, that holds "tfevents" (and does not end
// in ".tmp"); "" when there is none or `dir` does not exist.
std::string event_file_in(const std::string& dir);

// Cuts the reports of `dir` back to the batch count `step`, for a resume: the events of
// event_file_in(dir) of a step no greater than `step` are kept, once each, and TensorBoard, even
// one reading the file as this runs, shows those. When the file holds nothing more and is the only
// one, nothing changes. Otherwise they go, durably, into a new event file whose name sorts after
// the old one (TensorBoard reads a directory's event files in that order and moves on to a later
// name, never back, and keeps a file it has open), after the file version event and a SessionLog
// START at step 0 (which makes TensorBoard drop what it read before); then every other event file
// of `dir` is removed, and what a torn atomic write left of one. Nothing when `dir` holds no event
// file. Throws TrainingError naming the path that cannot be read, written or removed.
void truncate_tensorboard(const std::string& dir, int64_t step);

}  // namespace crucible::metrics
