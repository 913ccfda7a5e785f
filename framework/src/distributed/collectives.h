#pragma once

// The c10d process group behind a DistributedContext, and how a process joins one.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <crucible/config.h>
#include <crucible/distributed.h>

#include "distributed/c10d_compat.h"
#include "distributed/rendezvous.h"
#include "distributed/roll_call.h"

namespace crucible::detail {

// Collectives of one rank over c10d groups: `group` (Gloo) for CPU tensors and, when given,
// `cuda_group` (NCCL) for CUDA tensors; without it Gloo takes CUDA tensors too. Every failure of
// a collective (a peer that closed its connection, a timeout) is a PeerLostError naming this rank
// and the operation. Destruction shuts the NCCL group down.
class Collectives {
 public:
  Collectives(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<dist::Group> group,
              c10::intrusive_ptr<dist::Group> cuda_group, int64_t rank,
              std::chrono::milliseconds timeout);
  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  void allreduce(std::vector<torch::Tensor>& tensors, ReduceOp op);
  // Starts an all-reduce of `tensor` in place (SUM, MIN or MAX) and returns at once; complete
  // it with wait().
  c10::intrusive_ptr<c10d::Work> allreduce_async(torch::Tensor& tensor,
                                                 ReduceOp op = ReduceOp::kSum);
  void broadcast(std::vector<torch::Tensor>& tensors, int64_t root);
  std::vector<torch::Tensor> allgather(const torch::Tensor& tensor, int64_t size);
  void barrier();

  // Blocks until `work` completes; a failure or the timeout is a PeerLostError naming `op`.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op);

  std::chrono::milliseconds timeout() const { return timeout_; }
  // The backend that carries tensors on `device`: "gloo" or "nccl".
  std::string backend_for(const torch::Device& device) const;

 private:
  c10::intrusive_ptr<c10d::Work> start_allreduce(std::vector<torch::Tensor>& tensors, ReduceOp op);
  dist::Group& group_for(const torch::Device& device) const;

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<dist::Group> group_;
  c10::intrusive_ptr<dist::Group> cuda_group_;
  int64_t rank_;
  std::chrono::milliseconds timeout_;
};

// Crucible's side of a DistributedContext.
struct DistributedAccess {
  // A context of `topology.size` ranks; `collectives` may be null only for one rank.
  static DistributedContext make(Topology topology, std::shared_ptr<Collectives> collectives) {
    return DistributedContext(topology, std::move(collectives));
  }
  // The collectives under `dist` (gradient synchronisation, the stop vote); null in a
  // one-process context.
  static const std::shared_ptr<Collectives>& collectives(const DistributedContext& dist) {
    return dist.collectives_;
  }
};

}  // namespace crucible::detail

namespace crucible::dist {

// Joins the run `rendezvous` describes: connects to (rank 0: serves) the TCPStore at
// master_addr:master_port, holds the roll call (every rank must come within `timeout`, all of
// one world size and with equal `agreement` texts: roll_call), agrees
// with the other ranks on the backend of CUDA tensors under `backend` (agree_on_nccl; this rank
// names `gpu`, by default gpu_name of the device rank_device gives it, "" without NCCL; a `gpu`
// given, as tests do, must be "" without NCCL too), builds a Gloo process group over the store,
// and when they agree on NCCL an NCCL process group for CUDA tensors too, then waits at a
// barrier: on return, every rank has built its groups. Every wait (the rendezvous, the barrier,
// each collective) fails after `timeout`. A peer that closes its connections makes the
// collective that writes to them fail, not this process die of SIGPIPE
// (util::survive_broken_pipes). Throws PeerLostError naming the rank, the address and the cause
// when the store does not answer or a rank does not come (roll_call) or a peer fails after
// building its groups (the barrier), UsageError when the ranks cannot take the nccl asked for
// or differ in world size or agreement (or two came as one rank), and TrainingError when this rank
// cannot serve the store or build its groups.
DistributedContext connect(const Rendezvous& rendezvous, std::chrono::milliseconds timeout,
                           DistributedBackend backend = DistributedBackend::kGloo,
                           const std::optional<std::string>& gpu = std::nullopt,
                           const Agreement& agreement = {});

}  // namespace crucible::dist
