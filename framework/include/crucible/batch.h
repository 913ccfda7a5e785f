#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace crucible {

// A batch or a single example: a tensor, a list of batches, or a string-keyed dict of batches,
// nested in any mix. `b[0]` and `b["image"]` select children; a tensor leaf converts to
// torch::Tensor implicitly, so `model->forward(b[0])` reads like LibTorch code, for a module
// whose forward takes a tensor and, through the specializations below, for
// torch::nn::Sequential and torch::nn::AnyModule given one Batch argument (see there).
class Batch {
 public:
  enum class Kind { kNone, kTensor, kList, kDict };

  Batch() = default;
  Batch(torch::Tensor tensor);  // NOLINT(google-explicit-constructor)
  // A list: Batch{images, labels}.
  Batch(std::initializer_list<Batch> items);
  static Batch list(std::vector<Batch> items);
  // A dict, keys kept in insertion order: Batch::dict({{"image", x}, {"label", y}}).
  static Batch dict(std::vector<std::pair<std::string, Batch>> items);

  Kind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }

  // The tensor of a leaf. Throws crucible::Error when this is not a tensor.
  const torch::Tensor& tensor() const;
  operator const torch::Tensor&() const { return tensor(); }  // NOLINT

  // Number of children of a list or dict; throws for a tensor.
  size_t size() const;
  // The i-th child of a list or dict (dicts in insertion order). Throws when out of range.
  const Batch& operator[](size_t index) const;
  Batch& operator[](size_t index);
  const Batch& operator[](int index) const { return (*this)[static_cast<size_t>(index)]; }
  Batch& operator[](int index) { return (*this)[static_cast<size_t>(index)]; }
  // The child under `key` of a dict. Throws naming the key and the keys present.
  const Batch& operator[](const std::string& key) const;
  Batch& operator[](const std::string& key);
  const Batch& operator[](const char* key) const { return (*this)[std::string(key)]; }
  Batch& operator[](const char* key) { return (*this)[std::string(key)]; }
  bool contains(const std::string& key) const;
  // Keys of a dict in insertion order.
  std::vector<std::string> keys() const;

  // The same structure with every tensor moved to `device` (no copy for tensors already there).
  Batch to(const torch::Device& device, bool non_blocking = false) const;
  // The same structure with every CPU tensor in page-locked (pinned) host memory, so that
  // to(cuda_device, /*non_blocking=*/true) copies it asynchronously. Requires CUDA at run time;
  // tensors already pinned or not on the CPU are kept as they are.
  Batch pin_memory() const;
  // Calls fn on every tensor leaf, depth first.
  void for_each_tensor(const std::function<void(const torch::Tensor&)>& fn) const;
  // The first tensor leaf, depth first. Throws when there is none.
  const torch::Tensor& first_tensor() const;

  // Stacks examples of identical structure along a new leading dimension. Throws naming the
  // path of the first leaf whose structure or shape differs.
  static Batch collate(const std::vector<Batch>& examples);

 private:
  // The first tensor leaf, depth first, or null when there is none.
  const torch::Tensor* find_first_tensor() const;
  // The same structure with `fn` applied to every tensor leaf.
  Batch map_tensors(const std::function<torch::Tensor(const torch::Tensor&)>& fn) const;

  Kind kind_ = Kind::kNone;
  torch::Tensor tensor_;
  std::vector<Batch> children_;
  std::vector<std::string> keys_;  // parallel to children_ for dicts
};

}  // namespace crucible

namespace torch::nn {

// A Batch passed alone to Sequential::forward or AnyModule::forward / any_forward reaches the
// module as its tensor when it is a tensor leaf, as it does when passed to a
// forward(torch::Tensor); a list or dict reaches it as the Batch itself, for a module whose
// forward takes a const crucible::Batch&. A module taking a Batch therefore gets a tensor leaf as
// a tensor through these two; call its forward directly to give it the leaf as a Batch.
template <>
inline AnyValue AnyModule::any_forward<const crucible::Batch&>(const crucible::Batch& batch) {
  if (batch.is_tensor()) return any_forward(batch.tensor());
  // A const rvalue selects the primary template, which holds a copy of the Batch.
  return any_forward(static_cast<const crucible::Batch&&>(batch));
}
template <>
inline AnyValue AnyModule::any_forward<crucible::Batch&>(crucible::Batch& batch) {
  return any_forward(static_cast<const crucible::Batch&>(batch));
}
template <>
inline AnyValue AnyModule::any_forward<crucible::Batch>(crucible::Batch&& batch) {
  return any_forward(static_cast<const crucible::Batch&>(batch));
}

}  // namespace torch::nn
