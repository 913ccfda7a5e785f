#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace crucible::search
