#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <crucible/reduce_op.h>

namespace crucible {

// Where one process stands in a distributed run. Ranks are 0-based; "local" counts the processes
// of this node, "cross" the nodes.
struct Topology {
  int64_t rank = 0;
  int64_t size = 1;
  int64_t local_rank = 0;
  int64_t local_size = 1;
  int64_t cross_rank = 0;
  int64_t cross_size = 1;
};

namespace detail {
class Collectives;
struct DistributedAccess;
}  // namespace detail

// The ranks of a run and the collectives between them, over c10d process groups: Gloo for CPU
// tensors; for CUDA tensors NCCL or Gloo, as resources.distributed_backend picks. A trial reaches
// it through TrialContext::distributed(). In a one-process run every collective returns its input.
// Every rank must call the same collectives in the same order, with tensors on the same kind of
// device.
// A collective that a peer never joins (it died or hangs) throws PeerLostError after the run's
// timeout, naming this rank and the operation.
class DistributedContext {
 public:
  // A one-process context.
  DistributedContext();

  const Topology& topology() const { return topology_; }
  int64_t rank() const { return topology_.rank; }
  int64_t size() const { return topology_.size; }
  int64_t local_rank() const { return topology_.local_rank; }
  int64_t local_size() const { return topology_.local_size; }
  int64_t cross_rank() const { return topology_.cross_rank; }
  int64_t cross_size() const { return topology_.cross_size; }
  // Rank 0: the process that writes checkpoints and reports metrics.
  bool is_chief() const { return topology_.rank == 0; }
  bool distributed() const { return topology_.size > 1; }

  // Replaces `tensor` on every rank by the combination of all ranks' tensors (same shape and
  // dtype on every rank).
  void allreduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum) const;
  // Replaces `tensor` on every rank by rank `root`'s.
  void broadcast(torch::Tensor& tensor, int64_t root = 0) const;
  // Every rank's `tensor` (same shape and dtype on every rank), in rank order.
  std::vector<torch::Tensor> allgather(const torch::Tensor& tensor) const;
  // Every rank's `bytes` (any length, which may differ between ranks), in rank order.
  std::vector<std::string> allgather_bytes(const std::string& bytes) const;
  // Returns when every rank has called it.
  void barrier() const;

  // Rank `root`'s value on every rank. Numbers travel exactly, NaN and infinities included (a
  // non-negative integer may arrive as an unsigned one, as JSON text would make it).
  nlohmann::json broadcast_object(const nlohmann::json& value, int64_t root = 0) const;
  // Every rank's value, in rank order.
  std::vector<nlohmann::json> allgather_object(const nlohmann::json& value) const;
  // On rank `root`, every rank's value in rank order; empty on the others.
  std::vector<nlohmann::json> gather_object(const nlohmann::json& value, int64_t root = 0) const;

 private:
  friend struct detail::DistributedAccess;  // Crucible's internals (distributed/collectives.h)
  DistributedContext(Topology topology, std::shared_ptr<detail::Collectives> collectives);

  Topology topology_;
  std::shared_ptr<detail::Collectives> collectives_;
};

}  // namespace crucible
