#include "distributed/grad_sync.h"

#include <algorithm>
#include <mutex>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "distributed/collectives.h"

namespace crucible::dist {

namespace {

// The bytes of a tensor's data.
int64_t byte_size(const torch::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

// A gradient of `param` without entries: sparse, coalesced, of one sparse dimension (rows).
torch::Tensor no_rows(const torch::Tensor& param) {
  const torch::TensorOptions options = param.options().requires_grad(false);
  std::vector<int64_t> value_shape = param.sizes().vec();
  value_shape[0] = 0;
  return torch::sparse_coo_tensor(torch::empty({1, 0}, options.dtype(torch::kLong)),
                                  torch::empty(value_shape, options), param.sizes(),
                                  options.layout(torch::kSparse))
      ._coalesced_(true);
}

// Sparse gradient `g` of `param` as a coalesced sparse tensor of one sparse dimension (rows).
torch::Tensor as_rows(const torch::Tensor& g, const torch::Tensor& param) {
  if (g.sparse_dim() == 1) return g.coalesce();
  if (g._nnz() == 0) return no_rows(param);
  return g.to_dense().to_sparse(1).coalesce();
}

}  // namespace

struct GradientSync::Impl {
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Slot {
    torch::Tensor param;
    size_t bucket = 0;
    int64_t offset = 0;   // in the bucket's buffer
    torch::Tensor view;   // its region of the bucket, shaped like the parameter
    torch::Tensor alias;  // the same region as a tensor of its own (with as_bucket_view)
    bool ready = false;   // in its bucket for this window
    // The gradient clear_gradients() zeroed (none when it found none; weak, so that a gradient
    // the trial replaces is freed), and whether the parameter has had a gradient since: backward
    // accumulated one, or finish() left the window's mean in it.
    WeakImpl cleared{c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()};
    bool fresh = false;
  };
  struct Bucket {
    torch::Tensor flat;
    std::vector<size_t> slots;
    size_t pending = 0;  // slots not yet ready
    c10::intrusive_ptr<c10d::Work> work;
  };

  DistributedContext dist;
  GradientSyncOptions options;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> given;   // every parameter it was built with,
  std::vector<bool> given_required;   // and whether each then required gradients
  std::vector<torch::Tensor> dense;   // the params averaged in buckets
  std::vector<torch::Tensor> sparse;  // the params averaged as sparse tensors
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  // The last bucket's tail: [late changes, has-gradient flag per slot].
  int64_t flags_offset = 0;
  std::vector<float> flags;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks;

  std::mutex mutex;
  bool open = false;
  bool changed = true;  // a gradient changed since the last finish() (always, without hooks)
  size_t next = 0;      // the next bucket to start
  int64_t started_early = 0;
  int64_t copies = 0;
  int64_t last_started_early = 0;
  int64_t last_copies = 0;
  bool redone = false;

  void build() {
    for (auto it = dense.rbegin(); it != dense.rend(); ++it) {
      const torch::Tensor& p = *it;
      Slot slot;
      slot.param = p;
      const bool fits = !buckets.empty() && [&] {
        const Bucket& b = buckets.back();
        const torch::Tensor& first = slots[b.slots.front()].param;
        return first.scalar_type() == p.scalar_type() && first.device() == p.device() &&
               bucket_elements(b) * first.element_size() + byte_size(p) <= options.bucket_bytes();
      }();
      if (!fits) buckets.emplace_back();
      Bucket& b = buckets.back();
      slot.bucket = buckets.size() - 1;
      slot.offset = bucket_elements(b);
      b.slots.push_back(slots.size());
      slots.push_back(slot);
    }
    // The flags ride in the last bucket when it holds floats; else in a bucket of their own.
    const bool floats = !buckets.empty() &&
                        (slots[buckets.back().slots.front()].param.scalar_type() == torch::kFloat ||
                         slots[buckets.back().slots.front()].param.scalar_type() == torch::kDouble);
    if (!floats) buckets.emplace_back();
    flags.assign(slots.size() + 1, 0.0f);
    for (auto& b : buckets) {
      auto tensor_options = b.slots.empty() ? torch::TensorOptions(torch::kFloat)
                                            : slots[b.slots.front()].param.options();
      int64_t elements = bucket_elements(b);
      if (&b == &buckets.back()) {
        flags_offset = elements;
        elements += static_cast<int64_t>(flags.size());
      }
      b.flat = torch::zeros({elements}, tensor_options.requires_grad(false));
      b.pending = b.slots.size();
      for (const size_t i : b.slots) {
        Slot& s = slots[i];
        s.view = b.flat.narrow(0, s.offset, s.param.numel()).view_as(s.param);
        if (options.as_bucket_view()) {
          s.alias = torch::empty({0}, b.flat.options())
                        .set_(b.flat.storage(), s.view.storage_offset(), s.view.sizes(),
                              s.view.strides());
        }
      }
    }
  }

  int64_t bucket_elements(const Bucket& b) const {
    if (b.slots.empty()) return 0;
    const Slot& last = slots[b.slots.back()];
    return last.offset + last.param.numel();
  }

  // Hooks on the dense slots' accumulators (hook i for slot i) and the sparse parameters' (hook
  // slots.size() + j for sparse[j], which only note a change outside a window).
  void install_hooks() {
    for (size_t i = 0; i < slots.size() + sparse.size(); ++i) {
      const torch::Tensor& param = i < slots.size() ? slots[i].param : sparse[i - slots.size()];
      auto accumulator = torch::autograd::impl::grad_accumulator(param);
      TORCH_INTERNAL_ASSERT(accumulator, "a parameter that requires grad has no accumulator");
      const uintptr_t key = accumulator->add_post_hook(std::make_unique<ReadyHook>(this, i));
      hooks.emplace_back(std::move(accumulator), key);
    }
  }

  // Runs after backward accumulated slot i's gradient.
  class ReadyHook final : public torch::autograd::FunctionPostHook {
   public:
    ReadyHook(Impl* impl, size_t slot) : impl_(impl), slot_(slot) {}
    // `inputs` holds the gradient backward passed to the accumulator (undefined when a function
    // gave the parameter none: the accumulator then leaves its gradient as it was).
    torch::autograd::variable_list operator()(
        const torch::autograd::variable_list& outputs,
        const torch::autograd::variable_list& inputs) override {
      impl_->on_ready(slot_, !inputs.empty() && inputs[0].defined());
      return outputs;
    }

   private:
    Impl* impl_;
    size_t slot_;
  };

  void on_ready(size_t i, bool arrived) {
    std::lock_guard<std::mutex> lock(mutex);
    if (arrived && i < slots.size()) slots[i].fresh = true;
    if (!open || !options.overlap()) {
      changed = true;
      return;
    }
    if (i >= slots.size()) return;  // a sparse parameter: finish() reads its gradient
    Slot& s = slots[i];
    if (s.ready) {
      if (s.bucket < next) {
        flags[0] += 1;  // changed after its bucket started: finish() must act
      } else if (!in_bucket(s)) {
        copy_in(s);  // its bucket has not started: take the new value
      }
      return;
    }
    make_ready(i);
    // Start every complete bucket that is next in line; the last waits for finish().
    while (next + 1 < buckets.size() && buckets[next].pending == 0) {
      start(next++);
      ++started_early;
    }
  }

  // Whether slot s's gradient lies in its bucket's region (zero_grad may have replaced the
  // tensor by a detached one over the same memory).
  bool in_bucket(const Slot& s) const {
    const torch::Tensor& g = s.param.grad();
    return options.as_bucket_view() && g.defined() && !g.is_sparse() &&
           g.data_ptr() == s.alias.data_ptr() && g.scalar_type() == s.alias.scalar_type() &&
           g.sizes() == s.alias.sizes() && g.strides() == s.alias.strides();
  }

  // A sparse gradient (an Embedding with sparse=true) is summed dense, in its region.
  void copy_in(Slot& s) {
    torch::NoGradGuard no_grad;
    const torch::Tensor& g = s.param.grad();
    s.view.copy_(g.is_sparse() ? g.to_dense() : g);
    ++copies;
  }

  // Whether slot s has a gradient of this window: one backward accumulated, one the trial
  // assigned, or the mean finish() left, rather than the zeros clear_gradients() left.
  static bool has_gradient(const Slot& s) {
    const torch::Tensor& g = s.param.grad();
    return g.defined() && (s.fresh || g.unsafeGetTensorImpl() != s.cleared.lock().get());
  }

  void make_ready(size_t i) {
    Slot& s = slots[i];
    const bool has = has_gradient(s);
    if (!has) {
      torch::NoGradGuard no_grad;
      s.view.zero_();
    } else if (!in_bucket(s)) {
      copy_in(s);
    }
    flags[i + 1] = has ? 1.0f : 0.0f;
    s.ready = true;
    --buckets[s.bucket].pending;
  }

  // Whether gradients of `dtype` are divided by the number of ranks before they are summed
  // rather than after: float16's, whose sum over the ranks could overflow where their mean does
  // not (as DDP divides before it sums).
  static bool divides_first(torch::ScalarType dtype) { return dtype == torch::kHalf; }
  static bool divides_first(const Bucket& b) { return divides_first(b.flat.scalar_type()); }

  void start(size_t index) {
    Bucket& b = buckets[index];
    if (divides_first(b)) {
      torch::NoGradGuard no_grad;
      b.flat.narrow(0, 0, bucket_elements(b)).div_(static_cast<double>(dist.size()));
    }
    if (index + 1 == buckets.size()) {
      b.flat.narrow(0, flags_offset, static_cast<int64_t>(flags.size()))
          .copy_(torch::from_blob(flags.data(), {static_cast<int64_t>(flags.size())}));
    }
    b.work = detail::DistributedAccess::collectives(dist)->allreduce_async(b.flat);
  }

  // Readies what is missing, starts what has not started, waits for it all. Returns the number
  // of late changes summed over the ranks.
  float reduce_all() {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (!slots[i].ready) make_ready(i);
    }
    while (next < buckets.size()) start(next++);
    for (auto& b : buckets) {
      detail::DistributedAccess::collectives(dist)->wait(b.work, "gradient allreduce");
      b.work.reset();
    }
    const torch::Tensor tail = buckets.back()
                                   .flat.narrow(0, flags_offset, static_cast<int64_t>(flags.size()))
                                   .to(torch::kCPU, torch::kFloat);
    std::copy_n(tail.data_ptr<float>(), flags.size(), flags.begin());
    return flags[0];
  }

  void reset() {
    for (auto& s : slots) s.ready = false;
    for (auto& b : buckets) b.pending = b.slots.size();
    std::fill(flags.begin(), flags.end(), 0.0f);
    next = 0;
  }

  // Closes the window; the counters of the last finish() become those of this one.
  void close() {
    reset();
    open = false;
    last_started_early = started_early;
    last_copies = copies;
    started_early = 0;
    copies = 0;
    changed = !options.overlap();
  }

  void finish() {
    std::lock_guard<std::mutex> lock(mutex);
    redone = false;
    float late = reduce_all();
    if (late > 0 && options.as_bucket_view()) {
      close();
      throw TrainingError(fmt::format(
          "rank {}: a gradient changed after its bucket's all-reduce had started (backward ran "
          "more than once within one ctx.backward()?); the buckets were being reduced in place "
          "(optimizations.gradient_as_bucket_view: true); set it to false to have such "
          "gradients averaged again",
          dist.rank()));
    }
    if (late > 0) {
      reset();
      late = reduce_all();
      redone = true;
    }
    TORCH_INTERNAL_ASSERT(late == 0, "gradient changed while no window was open");
    torch::NoGradGuard no_grad;
    const double size = static_cast<double>(dist.size());
    if (options.as_bucket_view()) {
      for (auto& b : buckets) {
        if (!divides_first(b)) b.flat.narrow(0, 0, bucket_elements(b)).div_(size);
      }
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      Slot& s = slots[i];
      const double divisor = divides_first(buckets[s.bucket]) ? 1.0 : size;
      if (flags[i + 1] == 0) {  // no rank has a gradient
        s.param.mutable_grad() = torch::Tensor();
        continue;
      }
      s.fresh = true;  // every rank holds the mean: a second finish() in the window counts it
      if (options.as_bucket_view()) {
        if (!in_bucket(s)) s.param.mutable_grad() = s.alias;
      } else if (s.param.grad().defined() && !s.param.grad().is_sparse()) {
        // One pass: the sum is read and the mean written straight into the gradient.
        torch::div_out(s.param.mutable_grad(), s.view, divisor);
      } else {
        s.param.mutable_grad() = s.view / divisor;
      }
    }
    average_sparse();
    close();
  }

  // The sparse parameters' part of finish(). Each rank sends, per parameter, its gradient's row
  // count, kNoGradient or kDenseGradient, and every rank decides from the gathered counts alone.
  void average_sparse() {
    if (sparse.empty()) return;
    torch::NoGradGuard no_grad;
    const auto& collectives = detail::DistributedAccess::collectives(dist);
    std::vector<torch::Tensor> rows(sparse.size());
    std::vector<int64_t> counts(sparse.size(), kNoGradient);
    for (size_t i = 0; i < sparse.size(); ++i) {
      const torch::Tensor& g = sparse[i].grad();
      if (!g.defined()) continue;
      if (!g.is_sparse()) {
        counts[i] = kDenseGradient;
        continue;
      }
      rows[i] = as_rows(g, sparse[i]);
      counts[i] = rows[i]._nnz();
    }
    const std::vector<torch::Tensor> all_counts =
        collectives->allgather(torch::tensor(counts, torch::kLong), dist.size());
    for (size_t i = 0; i < sparse.size(); ++i) {
      std::vector<int64_t> count;
      for (const auto& c : all_counts) count.push_back(c.data_ptr<int64_t>()[i]);
      const bool dense_somewhere =
          std::find(count.begin(), count.end(), kDenseGradient) != count.end();
      const int64_t longest = *std::max_element(count.begin(), count.end());
      if (dense_somewhere) {
        sparse[i].mutable_grad() = dense_mean(sparse[i]);
      } else if (longest != kNoGradient) {
        sparse[i].mutable_grad() = sparse_mean(sparse[i], rows[i], count, longest);
      }
    }
  }

  static constexpr int64_t kNoGradient = -1;
  static constexpr int64_t kDenseGradient = -2;

  // The mean over the ranks of `param`'s gradient as a dense tensor (a rank without one adds
  // zeros): some rank's is dense (a weight an Embedding shares with a dense layer, say).
  torch::Tensor dense_mean(const torch::Tensor& param) {
    const torch::Tensor& g = param.grad();
    std::vector<torch::Tensor> sum = {!g.defined()    ? torch::zeros_like(param)
                                      : g.is_sparse() ? g.to_dense()
                                                      : g.clone()};
    const double size = static_cast<double>(dist.size());
    const bool first = divides_first(param.scalar_type());
    if (first) sum[0].div_(size);
    detail::DistributedAccess::collectives(dist)->allreduce(sum, ReduceOp::kSum);
    return first ? sum[0] : sum[0].div_(size);
  }

  // The mean over the ranks of `param`'s gradient, this rank's as `rows` (undefined when it has
  // none), the ranks' row counts `count` (kNoGradient for none), the largest `longest`.
  torch::Tensor sparse_mean(const torch::Tensor& param, const torch::Tensor& rows,
                            const std::vector<int64_t>& count, int64_t longest) {
    if (longest == 0) return no_rows(param);
    // Every rank sends as many rows as the longest (Gloo and NCCL gather equal shapes), indices
    // and values in one buffer of bytes: [longest int64 indices | longest rows of values].
    const torch::TensorOptions options = param.options().requires_grad(false);
    std::vector<int64_t> shape = param.sizes().vec();
    shape[0] = longest;
    const int64_t index_bytes = longest * static_cast<int64_t>(sizeof(int64_t));
    const int64_t value_bytes =
        param.numel() / param.size(0) * longest * static_cast<int64_t>(param.element_size());
    const auto split = [&](const torch::Tensor& bytes) {
      return std::make_pair(
          bytes.narrow(0, 0, index_bytes).view(torch::kLong),
          bytes.narrow(0, index_bytes, value_bytes).view(param.scalar_type()).view(shape));
    };
    auto packed = torch::zeros({index_bytes + value_bytes}, options.dtype(torch::kUInt8));
    if (rows.defined() && rows._nnz() > 0) {
      auto [indices, values] = split(packed);
      indices.narrow(0, 0, rows._nnz()).copy_(rows._indices()[0]);
      values.narrow(0, 0, rows._nnz()).copy_(rows._values());
    }
    const auto all = detail::DistributedAccess::collectives(dist)->allgather(packed, dist.size());
    std::vector<torch::Tensor> index_parts, value_parts;
    for (size_t r = 0; r < count.size(); ++r) {
      const int64_t n = std::max<int64_t>(count[r], 0);
      const auto [indices, values] = split(all[r]);
      index_parts.push_back(indices.narrow(0, 0, n));
      value_parts.push_back(values.narrow(0, 0, n));
    }
    const double size = static_cast<double>(dist.size());
    const bool first = divides_first(param.scalar_type());
    torch::Tensor values = torch::cat(value_parts);
    if (first) values.div_(size);
    // Coalescing sums the rows that several ranks (or one) have.
    torch::Tensor mean = torch::sparse_coo_tensor(torch::cat(index_parts).unsqueeze(0), values,
                                                  param.sizes(), options.layout(torch::kSparse))
                             .coalesce();
    if (!first) mean._values().div_(size);
    return mean;
  }
};

GradientSync::GradientSync(DistributedContext dist, std::vector<torch::Tensor> params,
                           const GradientSyncOptions& options,
                           const std::vector<torch::Tensor>& sparse)
    : impl_(std::make_unique<Impl>()) {
  TORCH_INTERNAL_ASSERT(detail::DistributedAccess::collectives(dist),
                        "GradientSync needs a distributed context");
  TORCH_INTERNAL_ASSERT(options.bucket_bytes() > 0, "bucket_bytes must be positive");
  impl_->dist = std::move(dist);
  impl_->options = options;
  for (auto& p : params) {
    impl_->given.push_back(p);
    impl_->given_required.push_back(p.requires_grad());
    if (!p.requires_grad()) continue;
    const bool is_sparse = std::any_of(sparse.begin(), sparse.end(), [&](const torch::Tensor& s) {
      return s.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
    });
    TORCH_INTERNAL_ASSERT(!is_sparse || p.dim() >= 1, "a sparse gradient's parameter has rows");
    (is_sparse ? impl_->sparse : impl_->dense).push_back(p);
    impl_->params.push_back(std::move(p));
  }
  impl_->build();
  impl_->install_hooks();
}

GradientSync::~GradientSync() {
  for (auto& [accumulator, key] : impl_->hooks) accumulator->del_post_hook(key);
}

void GradientSync::open_window() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->open = true;
}

bool GradientSync::changed_since_finish() const { return impl_->changed; }

bool GradientSync::matches(const torch::optim::Optimizer& optimizer) const {
  const std::vector<torch::Tensor>& given = impl_->given;
  size_t i = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (i >= given.size() || given[i].unsafeGetTensorImpl() != p.unsafeGetTensorImpl() ||
          p.requires_grad() != impl_->given_required[i]) {
        return false;
      }
      ++i;
    }
  }
  return i == given.size();
}

void GradientSync::clear_gradients() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // The zeros are no gradient: a step before the next backward must finish() to leave none.
  impl_->changed = true;
  torch::NoGradGuard no_grad;
  for (auto& s : impl_->slots) {
    s.fresh = false;
    torch::Tensor g = s.param.grad();
    s.cleared = Impl::WeakImpl(g.getIntrusivePtr());
    if (!g.defined()) continue;
    g.detach_();
    g.zero_();
  }
  for (auto& p : impl_->sparse) {
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
  }
}

std::vector<torch::Tensor> GradientSync::stale_parameters() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<torch::Tensor> out;
  for (const auto& s : impl_->slots) {
    if (s.param.grad().defined() && !Impl::has_gradient(s)) out.push_back(s.param);
  }
  return out;
}

void GradientSync::finish() { impl_->finish(); }

const std::vector<torch::Tensor>& GradientSync::params() const { return impl_->params; }

int64_t GradientSync::bucket_count() const { return static_cast<int64_t>(impl_->buckets.size()); }

int64_t GradientSync::buckets_started_early() const { return impl_->last_started_early; }

bool GradientSync::last_finish_redone() const { return impl_->redone; }

int64_t GradientSync::last_finish_copies() const { return impl_->last_copies; }

TensorBroadcast::TensorBroadcast(DistributedContext dist, const std::vector<torch::Tensor>& tensors)
    : dist_(std::move(dist)) {
  if (dist_.size() == 1) return;
  for (const auto& t : tensors) {
    if (t.numel() == 0) continue;
    auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
      return g.members.front().scalar_type() == t.scalar_type() &&
             g.members.front().device() == t.device();
    });
    if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{});
    it->members.push_back(t);
  }
  for (auto& g : groups_) {
    int64_t elements = 0;
    for (const auto& m : g.members) elements += m.numel();
    g.flat = torch::empty({elements}, g.members.front().options().requires_grad(false));
    int64_t offset = 0;
    for (const auto& m : g.members) {
      g.views.push_back(g.flat.narrow(0, offset, m.numel()).view_as(m));
      offset += m.numel();
    }
  }
}

void TensorBroadcast::run() {
  torch::NoGradGuard no_grad;
  for (auto& g : groups_) {
    for (size_t i = 0; dist_.is_chief() && i < g.members.size(); ++i)
      g.views[i].copy_(g.members[i]);
    dist_.broadcast(g.flat, 0);
    for (size_t i = 0; !dist_.is_chief() && i < g.members.size(); ++i) {
      g.members[i].copy_(g.views[i]);
    }
  }
}

void broadcast_module(const DistributedContext& dist, torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors;
  for (const auto& p : module.parameters(true)) tensors.push_back(p.detach());
  for (const auto& b : module.buffers(true)) tensors.push_back(b);
  TensorBroadcast(dist, tensors).run();
}

}  // namespace crucible::dist
