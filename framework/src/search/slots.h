#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/rendezvous.h"

namespace crucible::search {

// Where one trial process runs: its cores, and its GPUs when there are any.
struct Slot {
  std::vector<int> cpus;     // the cores it is pinned to; empty: not pinned (a Slurm job step)
  std::string cuda_devices;  // CUDA_VISIBLE_DEVICES; "" without GPUs
  int threads = 1;           // OMP_NUM_THREADS of each of its ranks
};

// The slots of this machine for trials of `slots_per_trial` (>= 1) slots each, given the cores
// this process may use (`cpus`, not empty) and its GPU count. With GPUs, a slot per
// slots_per_trial GPUs, each GPU in one slot only; a trial of more slots than the machine has GPUs
// gets them all, one slot, its ranks sharing them. Without GPUs, a slot per slots_per_trial
// cores, at least one. The cores are split evenly between the slots, in the order given, and each
// rank gets its slot's cores / slots_per_trial threads (at least 1).
std::vector<Slot> local_slots(const std::vector<int>& cpus, int gpus, int64_t slots_per_trial);

// Why `slots` local slots run fewer trials at once than the `allowed` that the searcher allows,
// naming the GPUs (when `gpus` > 0) or the `cores`; "" when they do not. Begins with a space.
std::string slot_limit(size_t slots, int64_t allowed, int64_t slots_per_trial, int gpus,
                       size_t cores);

// Where the trials of a search that this process runs go.
struct Placement {
  std::vector<Slot> slots;  // as many trials at once as it holds
  std::string slurm_job;    // the Slurm allocation whose job steps the trials are; "" for none
  int gpus = 0;             // the GPUs this process sees
  size_t cores = 0;         // the cores this process may use

  // How many trials of `slots_per_trial` slots run at once, of the `allowed` that the searcher
  // allows: "up to N trials at once", then where (" as job steps of Slurm job J") or why fewer
  // than allowed (slot_limit).
  std::string at_once(int64_t allowed, int64_t slots_per_trial) const;
};

// The placement of trials of `slots_per_trial` (>= 1) slots from a process with environment
// `env`: inside a Slurm allocation (SLURM_JOB_ID set, no SLURM_STEP_ID), a job step per
// slots_per_trial of its SLURM_NTASKS tasks (at least one), each rank with SLURM_CPUS_PER_TASK
// threads (held to 2^20); elsewhere local_slots over the cores this process may use and the GPUs
// it sees. Throws UsageError naming a malformed SLURM_NTASKS or SLURM_CPUS_PER_TASK.
Placement place_trials(const dist::Env& env, int64_t slots_per_trial);

}  // namespace crucible::search
