#pragma once

// Batches moved to a device one step ahead of their use (DataLoader::set_device).

#include <exception>
#include <optional>

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <crucible/batch.h>

namespace crucible::data {

// Holds at most one batch on its way to a device. On CUDA the copy runs on a side stream taken
// from the device's pool, so it overlaps the work already queued on the consumer's stream; the
// consumer's stream waits for it only when the batch is taken. On the CPU a batch is held as it is.
class DeviceStage {
 public:
  explicit DeviceStage(torch::Device device);

  const torch::Device& device() const { return device_; }

  // Whether a batch or an error is held.
  bool holding() const { return held_.has_value() || error_ != nullptr; }

  // Starts moving `host` to the device and holds the result. Requires !holding(). Copies from
  // pinned memory return before the copy ends.
  void start(const Batch& host);

  // Holds `error` in place of a batch (building the batch failed). Requires !holding().
  void fail(std::exception_ptr error);

  // Releases what is held: the batch, usable by work queued on the device's current stream from
  // now on, or rethrows the held error. Requires holding().
  Batch take();

  // Drops what is held.
  void clear();

  // `host` on the device, ordered on the current stream (non-blocking from pinned memory).
  Batch place(const Batch& host) const;

 private:
  torch::Device device_;
  std::optional<c10::Stream> side_;
  std::optional<c10::Event> copied_;
  std::optional<Batch> held_;
  std::exception_ptr error_;
};

}  // namespace crucible::data
