#pragma once

// Gradient averaging across the ranks of a run, and copies of rank 0's weights and buffers.

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include <crucible/distributed.h>

namespace crucible::dist {

struct GradientSyncOptions {
  // Largest bucket in bytes; a larger tensor is a bucket of its own.
  TORCH_ARG(int64_t, bucket_bytes) = 25 << 20;
  // Start each bucket's all-reduce as soon as backward has produced its gradients.
  TORCH_ARG(bool, overlap) = true;
  // Make each gradient share storage with its bucket, so that backward accumulates straight into
  // the buckets and the mean is computed in place (no copy in or out), as DDP's
  // gradient_as_bucket_view.
  TORCH_ARG(bool, as_bucket_view) = true;
};

// Averages the gradients of a fixed list of parameters across the ranks of a run with bucketed
// all-reduces, started while the backward pass still runs when a window is open (as PyTorch's
// DistributedDataParallel does).
//
// The parameters that require gradients are grouped, in reverse order (the order backward
// usually produces their gradients), into buckets of at most `bucket_bytes` of one dtype and
// device. A hook on each parameter's gradient accumulator notes that backward produced its
// gradient; with `overlap`, while a window is open, it also copies the gradient into its bucket,
// and a bucket whose gradients are all in is all-reduced at once. Buckets start in bucket order
// on every rank, so every rank issues the same all-reduces in the same order. The last bucket
// also carries, per parameter, whether the rank has a gradient, and whether a gradient changed
// after it was copied; it always starts in finish().
//
// After finish(), every parameter's gradient is the mean over the ranks (a rank without a
// gradient counts as zeros; float16 gradients are divided by the number of ranks before they are
// summed, so that a sum beyond float16's range does not overflow a mean within it), and a
// parameter that no rank has a gradient for has none (so that an optimizer skips it, as in one
// process). A rank has a gradient of a parameter when it is defined
// and is not merely the zeros clear_gradients() left: backward passed the parameter a gradient
// since, the trial assigned another tensor, or an earlier finish() in the window left the mean in
// it. With `as_bucket_view`, each gradient finish() leaves is a tensor over its bucket's storage
// (not an autograd view: zero_grad and detach_ work on it); a gradient the trial replaces (set to
// none, assigned) is copied in and replaced by the bucket's again.
//
// A gradient that changes after its bucket's all-reduce started (two backward passes in one
// window): without `as_bucket_view`, every rank averages all gradients again from what they hold
// after backward, so results never depend on the overlap; with it, the bucket was being reduced
// in place, so finish() throws TrainingError on every rank. A change before its bucket started
// is simply included.
//
// The parameters named in `sparse` (those whose gradients backward makes sparse: the weight of
// an Embedding or EmbeddingBag with sparse=true) are in no bucket: finish() averages them after
// the buckets, as sparse tensors, as PyTorch's DDP does. The ranks first gather each one's row
// count (one all-gather for all of them); then, for each parameter some rank has rows of, every
// rank gathers every rank's rows (its coalesced gradient's indices and values, padded with zeros
// to the longest rank's count: one all-gather of bytes), coalesces their concatenation in rank
// order and divides it by the number of ranks. The gradient finish() leaves is then sparse and
// coalesced (one sparse dimension, rows), with an entry for every row some rank had (none when
// no rank had any), computed by every rank from the same gathered tensors in the same order; the
// parameter's other rows never travel. When some rank's gradient of such a parameter is dense (a
// weight it shares with a dense layer), the parameter is averaged dense instead, with one
// all-reduce of the whole parameter, and its gradient is dense, as it would be in one process.
// A parameter that is not named but gets a sparse gradient is averaged dense in its bucket, and
// its gradient is dense from then on.
//
// Every rank must build it with the same parameters (shapes, dtypes, order, `sparse`) and open
// and finish windows at the same points; between open_window() and finish() the ranks must
// issue no other collective on the same process group.
class GradientSync {
 public:
  GradientSync(DistributedContext dist, std::vector<torch::Tensor> params,
               const GradientSyncOptions& options = {},
               const std::vector<torch::Tensor>& sparse = {});
  // Removes the hooks. In-flight all-reduces are abandoned (their tensors stay alive with them).
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // From now until finish(), gradients are gathered into buckets and reduced as backward produces
  // them (only with `overlap`; otherwise finish() does it all). Opening an open window does
  // nothing.
  void open_window();
  // Whether a gradient may have changed since the last finish(): with `overlap`, whether a hook
  // saw a gradient accumulate outside a window, or clear_gradients() ran, since then; without,
  // always true.
  bool changed_since_finish() const;
  // Completes the averaging described above and closes the window. Throws PeerLostError when a
  // peer fails or does not join within the run's timeout, TrainingError for a late change (see
  // above).
  void finish();
  // Clears the gradients for the next window, as an optimizer step ends: dense ones are zeroed
  // in place (those that are bucket views stay so), sparse ones set to none. Until backward
  // passes a zeroed gradient's parameter a gradient, the trial assigns it another tensor, or
  // finish() leaves a mean in it, that parameter counts as having none on this rank (see
  // finish()); values the trial writes into the zeros in place do not count.
  void clear_gradients();
  // The parameters whose gradient is still the zeros clear_gradients() left: defined, but none
  // for finish(). A checkpoint taken inside an accumulation window saves them as having none.
  std::vector<torch::Tensor> stale_parameters() const;

  // The parameters it averages (those of the list that required gradients when it was built), in
  // the given order.
  const std::vector<torch::Tensor>& params() const;
  // Whether `optimizer` holds exactly the parameters this was built with, in order, each requiring
  // gradients as it did then; if not (a layer frozen or unfrozen, a group added), a sync built
  // again would average other ones.
  bool matches(const torch::optim::Optimizer& optimizer) const;
  // The buckets of the parameters averaged dense (the flags' own bucket included, if any).
  int64_t bucket_count() const;
  // How many buckets the last finish() found already started (during backward).
  int64_t buckets_started_early() const;
  // Whether the last finish() averaged again because a gradient changed after its copy.
  bool last_finish_redone() const;
  // How many gradients the last finish() had to copy into their buckets (with `as_bucket_view`,
  // those that did not already share a bucket's storage).
  int64_t last_finish_copies() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Copies rank 0's values of a fixed set of tensors (parameters, buffers) to every rank: one
// broadcast per dtype and device, through buffers allocated once. The tensors must keep their
// storage (values may change in place) for the object's life.
class TensorBroadcast {
 public:
  TensorBroadcast(DistributedContext dist, const std::vector<torch::Tensor>& tensors);
  // Does nothing on one rank or without tensors.
  void run();

 private:
  struct Group {
    std::vector<torch::Tensor> members;
    torch::Tensor flat;
    std::vector<torch::Tensor> views;  // each member's region of flat
  };
  DistributedContext dist_;
  std::vector<Group> groups_;
};

// Copies rank 0's parameters and buffers of `module` to every rank.
void broadcast_module(const DistributedContext& dist, torch::nn::Module& module);

}  // namespace crucible::dist
