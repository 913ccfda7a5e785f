#include <crucible/distributed.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <crucible/errors.h>

#include "distributed/collectives.h"

namespace crucible {

namespace {

// `bytes` as a kUInt8 CPU tensor of `size` elements (at least bytes.size()), zero-padded.
torch::Tensor to_tensor(const std::string& bytes, int64_t size) {
  auto t = torch::zeros({size}, torch::kUInt8);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// `value` as bytes that decode() reads back exactly: CBOR, which keeps NaN and infinities (JSON
// text writes them as null) and every number's type.
std::string encode(const nlohmann::json& value) {
  const std::vector<uint8_t> bytes = nlohmann::json::to_cbor(value);
  return std::string(bytes.begin(), bytes.end());
}
nlohmann::json decode(const std::string& bytes) { return nlohmann::json::from_cbor(bytes); }

// The first `length` bytes of kUInt8 CPU tensor `t`.
std::string first_bytes(const torch::Tensor& t, int64_t length) {
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(length));
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
  const std::string text = rank() == root ? encode(value) : std::string();
  auto length = torch::tensor({static_cast<int64_t>(text.size())}, torch::kLong);
  broadcast(length, root);
  torch::Tensor bytes = to_tensor(text, length.item<int64_t>());
  broadcast(bytes, root);
  return decode(first_bytes(bytes, bytes.numel()));
}

std::vector<std::string> DistributedContext::allgather_bytes(const std::string& bytes) const {
  if (!collectives_) return {bytes};
  const auto lengths = allgather(torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong));
  int64_t longest = 0;
  for (const auto& l : lengths) longest = std::max(longest, l.item<int64_t>());
  // Every rank sends as many bytes as the longest (one at least: Gloo gathers equal shapes).
  const std::vector<torch::Tensor> all = allgather(to_tensor(bytes, std::max<int64_t>(longest, 1)));
  std::vector<std::string> out;
  for (size_t i = 0; i < all.size(); ++i)
    out.push_back(first_bytes(all[i], lengths[i].item<int64_t>()));
  return out;
}

std::vector<nlohmann::json> DistributedContext::allgather_object(
    const nlohmann::json& value) const {
  if (!collectives_) return {value};
  std::vector<nlohmann::json> out;
  for (const auto& bytes : allgather_bytes(encode(value))) out.push_back(decode(bytes));
  return out;
}

std::vector<nlohmann::json> DistributedContext::gather_object(const nlohmann::json& value,
                                                              int64_t root) const {
  auto all = allgather_object(value);
  if (rank() != root) all.clear();
  return all;
}

}  // namespace crucible
