#include <crucible/distributed.h>

#include <crucible/errors.h>

#include "distributed/collectives.h"

namespace crucible {

namespace {

torch::Tensor to_bytes(const nlohmann::json& value) {
  const std::string text = value.dump();
  auto t = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), text.data(), text.size());
  return t;
}

nlohmann::json from_bytes(const torch::Tensor& bytes, int64_t length) {
  const char* data = static_cast<const char*>(bytes.data_ptr());
  return nlohmann::json::parse(data, data + length);
}

}  // namespace

DistributedContext::DistributedContext() = default;

DistributedContext::DistributedContext(Topology topology,
                                       std::shared_ptr<detail::Collectives> collectives)
    : topology_(topology), collectives_(std::move(collectives)) {
  TORCH_INTERNAL_ASSERT(topology_.size == 1 || collectives_,
                        "a distributed context of several ranks needs collectives");
}

void DistributedContext::allreduce(torch::Tensor& tensor, ReduceOp op) const {
  if (!collectives_) return;
  std::vector<torch::Tensor> tensors = {tensor};
  collectives_->allreduce(tensors, op);
}

void DistributedContext::broadcast(torch::Tensor& tensor, int64_t root) const {
  if (!collectives_) return;
  std::vector<torch::Tensor> tensors = {tensor};
  collectives_->broadcast(tensors, root);
}

std::vector<torch::Tensor> DistributedContext::allgather(const torch::Tensor& tensor) const {
  if (!collectives_) return {tensor};
  return collectives_->allgather(tensor, size());
}

void DistributedContext::barrier() const {
  if (collectives_) collectives_->barrier();
}

nlohmann::json DistributedContext::broadcast_object(const nlohmann::json& value,
                                                    int64_t root) const {
  if (!collectives_) return value;
  torch::Tensor bytes = rank() == root ? to_bytes(value) : torch::Tensor();
  auto length = torch::tensor({rank() == root ? bytes.numel() : int64_t{0}}, torch::kLong);
  broadcast(length, root);
  if (rank() != root) bytes = torch::empty({length.item<int64_t>()}, torch::kUInt8);
  broadcast(bytes, root);
  return from_bytes(bytes, bytes.numel());
}

std::vector<torch::Tensor> DistributedContext::allgather_bytes(const torch::Tensor& bytes) const {
  TORCH_INTERNAL_ASSERT(
      bytes.dim() == 1 && bytes.scalar_type() == torch::kUInt8 && bytes.device().is_cpu(),
      "allgather_bytes takes a 1-D kUInt8 CPU tensor");
  if (!collectives_) return {bytes};
  const auto lengths = allgather(torch::tensor({bytes.numel()}, torch::kLong));
  int64_t longest = 0;
  for (const auto& l : lengths) longest = std::max(longest, l.item<int64_t>());
  auto padded = torch::zeros({std::max<int64_t>(longest, 1)}, torch::kUInt8);
  padded.narrow(0, 0, bytes.numel()).copy_(bytes);
  std::vector<torch::Tensor> all = allgather(padded);
  for (size_t i = 0; i < all.size(); ++i) all[i] = all[i].narrow(0, 0, lengths[i].item<int64_t>());
  return all;
}

std::vector<nlohmann::json> DistributedContext::allgather_object(
    const nlohmann::json& value) const {
  if (!collectives_) return {value};
  std::vector<nlohmann::json> out;
  for (const auto& bytes : allgather_bytes(to_bytes(value))) {
    out.push_back(from_bytes(bytes, bytes.numel()));
  }
  return out;
}

std::vector<nlohmann::json> DistributedContext::gather_object(const nlohmann::json& value,
                                                              int64_t root) const {
  auto all = allgather_object(value);
  if (rank() != root) all.clear();
  return all;
}

}  // namespace crucible
