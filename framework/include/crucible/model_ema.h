#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <crucible/callback.h>
#include <crucible/optim.h>
#include <crucible/trial_context.h>

namespace crucible {

struct ModelEmaOptions {
  // The weight an average keeps at each update; 1 - decay goes to the model's weights.
  TORCH_ARG(double, decay) = 0.999;
};

// An exponential moving average of a model's weights, as PyTorch's AveragedModel keeps it with
// get_ema_multi_avg_fn and use_buffers=True (timm's ModelEmaV3 likewise), except that buffers
// that are not floating-point are copied: after every training batch in which `optimizer`
// stepped, each floating-point parameter and buffer a of `average` becomes a.lerp(w, 1 - decay),
// w being `model`'s; its other buffers (batch norm's num_batches_tracked) are copied. A skipped
// step and a batch inside an accumulation window change nothing. A tensor the model holds under
// several names (a tied weight) is averaged once.
//
// `average` is a second instance of the model's network that the trial wraps with
// ctx.wrap_model, so that it lives on the same device, every checkpoint keeps it as a model of its
// own (model_<i>.pt and model_<i>.safetensors, readable in Python) and a resume restores it.
// ModelEma copies the model's weights into it when constructed (and at its first update), and
// sets its parameters to require no gradient. The trial returns the ModelEma from
// build_callbacks (its state is the number of updates) and evaluates or predicts with `average`
// where it wants the averaged weights: in evaluate_batch, validations (and `trainer validate` of
// a checkpoint) then measure the average. Like any module, the second network draws its initial
// weights from LibTorch's generator, which moves later random draws (dropout) along.
class ModelEma : public Callback {
 public:
  // Requires a context whose trial wrapped `model`, `average` and `optimizer`. Throws
  // crucible::Error when decay is outside [0, 1], when one of them is not wrapped, when `average`
  // is `model` or shares a tensor with it, or when the two do not have the same parameters and
  // buffers (names, shapes, dtypes and devices), naming the first that differs.
  ModelEma(const TrialContext& ctx, std::shared_ptr<torch::nn::Module> model,
           std::shared_ptr<torch::nn::Module> average, Optimizer optimizer,
           ModelEmaOptions options = {});

  // The averages taken so far (0 before the first step of the optimizer).
  int64_t updates() const { return updates_; }

  void on_training_batch_end(int64_t batch_idx, const Metrics& metrics) override;
  void save_state(torch::serialize::OutputArchive& archive) override;
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  const TrialContext& ctx_;
  Optimizer optimizer_;
  ModelEmaOptions options_;
  // (average's tensor, model's tensor): averaged, and copied.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> averaged_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copied_;
  int64_t updates_ = 0;
};

}  // namespace crucible
