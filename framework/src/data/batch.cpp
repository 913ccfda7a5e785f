#include <crucible/batch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>

namespace crucible {
namespace {

const char* kind_name(Batch::Kind kind) {
  switch (kind) {
    case Batch::Kind::kNone:
      return "empty";
    case Batch::Kind::kTensor:
      return "tensor";
    case Batch::Kind::kList:
      return "list";
    case Batch::Kind::kDict:
      return "dict";
  }
  return "?";
}

}  // namespace

Batch::Batch(torch::Tensor tensor) : kind_(Kind::kTensor), tensor_(std::move(tensor)) {}

Batch::Batch(std::initializer_list<Batch> items) : kind_(Kind::kList), children_(items) {}

Batch Batch::list(std::vector<Batch> items) {
  Batch b;
  b.kind_ = Kind::kList;
  b.children_ = std::move(items);
  return b;
}

Batch Batch::dict(std::vector<std::pair<std::string, Batch>> items) {
  Batch b;
  b.kind_ = Kind::kDict;
  for (auto& [key, value] : items) {
    if (b.contains(key)) throw Error("Batch::dict: duplicate key '" + key + "'");
    b.keys_.push_back(key);
    b.children_.push_back(std::move(value));
  }
  return b;
}

const torch::Tensor& Batch::tensor() const {
  if (kind_ != Kind::kTensor) {
    throw Error(fmt::format("Batch: expected a tensor, this is a {}", kind_name(kind_)));
  }
  return tensor_;
}

size_t Batch::size() const {
  if (kind_ != Kind::kList && kind_ != Kind::kDict) {
    throw Error(fmt::format("Batch: size() of a {}, not a list or dict", kind_name(kind_)));
  }
  return children_.size();
}

const Batch& Batch::operator[](size_t index) const {
  if (index >= size()) {
    throw Error(fmt::format("Batch: index {} out of range for a {} of {}", index, kind_name(kind_),
                            children_.size()));
  }
  return children_[index];
}

Batch& Batch::operator[](size_t index) {
  return const_cast<Batch&>(static_cast<const Batch&>(*this)[index]);
}

bool Batch::contains(const std::string& key) const {
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

const Batch& Batch::operator[](const std::string& key) const {
  if (kind_ != Kind::kDict) {
    throw Error(
        fmt::format("Batch: key '{}' looked up in a {}, not a dict", key, kind_name(kind_)));
  }
  auto it = std::find(keys_.begin(), keys_.end(), key);
  if (it == keys_.end()) {
    throw Error(fmt::format("Batch: no key '{}'; keys: {}", key, fmt::join(keys_, ", ")));
  }
  return children_[static_cast<size_t>(it - keys_.begin())];
}

Batch& Batch::operator[](const std::string& key) {
  return const_cast<Batch&>(static_cast<const Batch&>(*this)[key]);
}

std::vector<std::string> Batch::keys() const { return keys_; }

Batch Batch::map_tensors(const std::function<torch::Tensor(const torch::Tensor&)>& fn) const {
  Batch out;
  out.kind_ = kind_;
  out.keys_ = keys_;
  if (kind_ == Kind::kTensor) out.tensor_ = fn(tensor_);
  out.children_.reserve(children_.size());
  for (const auto& child : children_) out.children_.push_back(child.map_tensors(fn));
  return out;
}

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  return map_tensors([&](const torch::Tensor& t) {
    return t.device() == device ? t : t.to(device, non_blocking);
  });
}

Batch Batch::pin_memory() const {
  return map_tensors(
      [](const torch::Tensor& t) { return t.is_cpu() && !t.is_pinned() ? t.pin_memory() : t; });
}

void Batch::for_each_tensor(const std::function<void(const torch::Tensor&)>& fn) const {
  if (kind_ == Kind::kTensor) fn(tensor_);
  for (const auto& child : children_) child.for_each_tensor(fn);
}

const torch::Tensor* Batch::find_first_tensor() const {
  if (kind_ == Kind::kTensor) return &tensor_;
  for (const auto& child : children_) {
    if (const torch::Tensor* found = child.find_first_tensor()) return found;
  }
  return nullptr;
}

const torch::Tensor& Batch::first_tensor() const {
  const torch::Tensor* found = find_first_tensor();
  if (!found) throw Error("Batch: no tensor in this batch");
  return *found;
}

namespace {

std::string shape_of(const torch::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes().begin(), t.sizes().end(), ", "));
}

Batch collate_at(const std::vector<Batch>& examples, const std::string& path) {
  const Batch& first = examples.front();
  for (size_t i = 1; i < examples.size(); ++i) {
    const Batch& e = examples[i];
    if (e.kind() != first.kind() ||
        (!first.is_tensor() && first.kind() != Batch::Kind::kNone && e.size() != first.size()) ||
        (first.is_dict() && e.keys() != first.keys())) {
      throw Error(fmt::format("collate: example {} differs in structure from example 0 at '{}'", i,
                              path.empty() ? "(root)" : path));
    }
  }
  switch (first.kind()) {
    case Batch::Kind::kNone:
      return Batch();
    case Batch::Kind::kTensor: {
      std::vector<torch::Tensor> tensors;
      tensors.reserve(examples.size());
      for (size_t i = 0; i < examples.size(); ++i) {
        if (examples[i].tensor().sizes() != first.tensor().sizes()) {
          throw Error(fmt::format("collate: example {} has shape {} at '{}', example 0 has {}", i,
                                  shape_of(examples[i].tensor()), path.empty() ? "(root)" : path,
                                  shape_of(first.tensor())));
        }
        tensors.push_back(examples[i].tensor());
      }
      return torch::stack(tensors);
    }
    case Batch::Kind::kList:
    case Batch::Kind::kDict: {
      std::vector<std::pair<std::string, Batch>> items;
      std::vector<Batch> list;
      for (size_t c = 0; c < first.size(); ++c) {
        std::vector<Batch> column;
        column.reserve(examples.size());
        for (const auto& e : examples) column.push_back(e[c]);
        const std::string key = first.is_dict() ? first.keys()[c] : std::to_string(c);
        Batch child = collate_at(column, path.empty() ? key : path + "." + key);
        if (first.is_dict()) {
          items.emplace_back(key, std::move(child));
        } else {
          list.push_back(std::move(child));
        }
      }
      return first.is_dict() ? Batch::dict(std::move(items)) : Batch::list(std::move(list));
    }
  }
  return Batch();
}

}  // namespace

Batch Batch::collate(const std::vector<Batch>& examples) {
  if (examples.empty()) throw Error("collate: no examples");
  return collate_at(examples, "");
}

}  // namespace crucible
