#pragma once

#include <string>

#include <fmt/format.h>

namespace crucible::testing {

// The variables torchrun 1.13's local agent gives worker `rank` of `n` on one node
// (torch/distributed/elastic/agent/server/local_elastic_agent.py), as `VAR=value ...`.
// `agent_store`: torchrun's default static rendezvous, under which the agent itself serves the
// store at MASTER_PORT; otherwise (the c10d rendezvous) rank 0 serves it. OMP_NUM_THREADS=1 is
// what torchrun sets when it starts more than one process.
inline std::string torchrun_env(int rank, int n, int port, bool agent_store = false) {
  return fmt::format(
      "LOCAL_RANK={0} RANK={0} GROUP_RANK=0 ROLE_RANK={0} ROLE_NAME=default LOCAL_WORLD_SIZE={1} "
      "WORLD_SIZE={1} GROUP_WORLD_SIZE=1 ROLE_WORLD_SIZE={1} MASTER_ADDR=127.0.0.1 "
      "MASTER_PORT={2} TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 "
      "TORCHELASTIC_RUN_ID=none TORCHELASTIC_USE_AGENT_STORE={3} NCCL_ASYNC_ERROR_HANDLING=1 "
      "TORCHELASTIC_ERROR_FILE=/dev/null OMP_NUM_THREADS=1",
      rank, n, port, agent_store ? "True" : "False");
}

}  // namespace crucible::testing
