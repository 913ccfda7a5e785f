#include <crucible/data.h>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible {

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Batch> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return Batch::collate(examples);
}

TensorDataset::TensorDataset(std::vector<torch::Tensor> tensors) : tensors_(std::move(tensors)) {
  if (tensors_.empty()) throw Error("TensorDataset: needs at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].dim() == 0 || tensors_[i].size(0) != tensors_[0].size(0)) {
      throw Error(fmt::format("TensorDataset: tensor {} has {} rows, tensor 0 has {}", i,
                              tensors_[i].dim() == 0 ? 0 : tensors_[i].size(0),
                              tensors_[0].size(0)));
    }
  }
}

int64_t TensorDataset::size() const { return tensors_[0].size(0); }

Batch TensorDataset::get(int64_t index) const {
  std::vector<Batch> items;
  for (const auto& t : tensors_) items.emplace_back(t[index]);
  return Batch::list(std::move(items));
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  const auto index = torch::from_blob(const_cast<int64_t*>(indices.data()),
                                      {static_cast<int64_t>(indices.size())}, torch::kLong);
  std::vector<Batch> items;
  torch::Tensor on_device;  // the index copied to the last device a tensor was on
  for (const auto& t : tensors_) {
    if (!t.is_cpu() && !(on_device.defined() && on_device.device() == t.device())) {
      on_device = index.to(t.device());
    }
    items.emplace_back(t.index_select(0, t.is_cpu() ? index : on_device));
  }
  return Batch::list(std::move(items));
}

}  // namespace crucible
