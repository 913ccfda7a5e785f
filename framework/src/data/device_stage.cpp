#include "data/device_stage.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

namespace crucible::data {

namespace {

// `device` with its index made explicit: kCUDA alone names the current CUDA device.
torch::Device with_index(torch::Device device) {
  if (device.has_index() || device.is_cpu()) return device;
  return c10::impl::VirtualGuardImpl(device.type()).getDevice();
}

}  // namespace

DeviceStage::DeviceStage(torch::Device device) : device_(with_index(device)) {}

void DeviceStage::start(const Batch& host) {
  TORCH_INTERNAL_ASSERT(!holding(), "DeviceStage::start while a batch is held");
  if (!device_.is_cuda()) {
    held_ = place(host);
    return;
  }
  c10::impl::VirtualGuardImpl guard_impl(device_.type());
  if (!side_) side_ = guard_impl.getStreamFromGlobalPool(device_);
  std::optional<Batch> moved;
  {
    c10::StreamGuard on_side(*side_);
    moved = host.to(device_, /*non_blocking=*/true);
  }
  copied_.emplace(device_.type());
  copied_->record(*side_);
  held_ = std::move(moved);
}

void DeviceStage::fail(std::exception_ptr error) {
  TORCH_INTERNAL_ASSERT(!holding(), "DeviceStage::fail while a batch is held");
  error_ = std::move(error);
}

Batch DeviceStage::take() {
  TORCH_INTERNAL_ASSERT(holding(), "DeviceStage::take with nothing held");
  if (error_) {
    std::exception_ptr error = std::move(error_);
    error_ = nullptr;
    std::rethrow_exception(error);
  }
  Batch batch = std::move(*held_);
  held_.reset();
  if (copied_) {
    const c10::Stream consumer = c10::impl::VirtualGuardImpl(device_.type()).getStream(device_);
    copied_->block(consumer);
    copied_.reset();
    // Memory allocated on the side stream is now in use on the consumer's: the caching allocator
    // must not hand it out again before the consumer's work on it is done.
    batch.for_each_tensor([&](const torch::Tensor& t) {
      if (t.device() == device_) t.record_stream(consumer);
    });
  }
  return batch;
}

void DeviceStage::clear() {
  held_.reset();
  copied_.reset();
  error_ = nullptr;
}

Batch DeviceStage::place(const Batch& host) const {
  return host.to(device_, /*non_blocking=*/device_.is_cuda());
}

}  // namespace crucible::data
