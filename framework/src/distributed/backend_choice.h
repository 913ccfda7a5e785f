#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include <crucible/config.h>
#include <crucible/distributed.h>

namespace crucible::dist {

// How the ranks of a run, met by roll_call under `prefix`, agree on the backend of their CUDA
// tensors: each announced at the roll call the GPU it computes on (gpu_name; "" for none); rank 0
// reads every rank's announcement and posts nccl_for_run's answer under `backend`, which every
// rank returns, so that all take the same backend whatever each one sees. When nccl_for_run
// refuses, every rank throws UsageError starting with `where` and giving its reason; a rank that
// `serves_store` keeps it for `linger` first, so that the others can read the refusal. A store
// that stops answering (rank 0 gone) is a PeerLostError starting with `where`.
bool agree_on_nccl(c10d::Store& store, const std::string& prefix, const Topology& t,
                   DistributedBackend backend, const std::string& where, bool serves_store,
                   std::chrono::milliseconds linger = std::chrono::seconds(2));

}  // namespace crucible::dist
