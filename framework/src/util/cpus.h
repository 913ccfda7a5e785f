#pragma once

#include <vector>

namespace crucible::util {

// The CPUs this process may run on (its affinity mask: what taskset, a cgroup's cpuset or a
// Slurm step allows), in increasing order; 0 .. hardware_concurrency - 1 when the mask cannot be
// read. Never empty.
std::vector<int> allowed_cpus();

}  // namespace crucible::util
