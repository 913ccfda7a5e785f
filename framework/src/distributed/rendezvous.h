#pragma once

// Where a distributed run's processes meet: read from the variables outside launchers set.

#include <map>
#include <optional>
#include <string>

#include <crucible/distributed.h>

namespace crucible::dist {

using Env = std::map<std::string, std::string>;

// The TCPStore every rank connects to (rank 0 serves it) and this process's place in the run.
struct Rendezvous {
  Topology topology;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // The launcher the variables came from: "torchrun", "Open MPI", "Slurm", or "trainer's
  // launcher" (Crucible's own, which sets torchrun's variables and CRUCIBLE_STORE_HOSTED).
  std::string source;
  // Whether the launcher serves the store (CRUCIBLE_STORE_HOSTED=1, set by Crucible's own, or
  // torchrun's TORCHELASTIC_USE_AGENT_STORE=True); otherwise rank 0 serves it.
  bool store_hosted = false;
  // Whether Crucible's own launcher or search started this process (CRUCIBLE_STORE_HOSTED=1):
  // then that process speaks to the user, and a worker need not repeat it.
  bool started_by_crucible = false;
  // The key prefix of this run in the store (torchrun's agent store:
  // "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>").
  std::string store_prefix;
};

// The variables of this process's environment.
Env process_environment();

// Variable `name` of `env` (which must hold it) as a non-negative integer, or with `positive` a
// positive one. Throws UsageError naming `source` (the launcher that set it), the variable and
// its value otherwise.
int64_t env_integer(const Env& env, const std::string& name, const std::string& source,
                    bool positive = false);

// The rendezvous that `env` describes, looked for in this order:
//   torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
//             MASTER_ADDR, MASTER_PORT;
//   Open MPI: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (node = rank / local size);
//   Slurm (srun steps only, SLURM_STEP_ID set): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//             SLURM_NODEID, SLURM_NNODES, SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE.
// For Open MPI and Slurm, MASTER_ADDR and MASTER_PORT are honoured when set; otherwise the
// address is 127.0.0.1 for a one-node run (across Slurm nodes, the first host of
// SLURM_STEP_NODELIST, where the step's rank 0 runs whichever node srun ran on, or without it
// SLURM_LAUNCH_NODE_IPADDR) and the port
// 20000 + the job id % 10000 (Open MPI: OMPI_MCA_ess_base_jobid; Slurm: (SLURM_JOB_ID + 1009 x
// SLURM_STEP_ID) % 10000, so that concurrent steps of a job differ), 29500 without one. Returns
// nullopt when no launcher's variables are present. Throws UsageError naming the variable when one
// is malformed or they disagree (a rank outside the world, a multi-node Open MPI run without
// MASTER_ADDR), or when one of RANK and WORLD_SIZE is set without the other.
std::optional<Rendezvous> from_environment(const Env& env);

}  // namespace crucible::dist
