#include "search/slots.h"

#include <algorithm>

#include <fmt/format.h>
#include <torch/cuda.h>

#include "util/cpus.h"

namespace crucible::search {

std::vector<Slot> local_slots(const std::vector<int>& cpus, int gpus, int64_t slots_per_trial) {
  const int cores = static_cast<int>(cpus.size());
  const auto per_trial = static_cast<int>(slots_per_trial);
  const int count = std::max(1, gpus > 0 ? gpus / per_trial : cores / per_trial);
  const int cores_each = std::max(1, cores / count);
  std::vector<Slot> out(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) {
    Slot& s = out[static_cast<size_t>(k)];
    for (int c = k * cores_each; c < (k + 1) * cores_each && c < cores; ++c) {
      s.cpus.push_back(cpus[static_cast<size_t>(c)]);
    }
    s.threads = std::max(1, cores_each / per_trial);
    for (int g = k * per_trial; g < std::min(gpus, (k + 1) * per_trial); ++g) {
      s.cuda_devices += (s.cuda_devices.empty() ? "" : ",") + std::to_string(g);
    }
  }
  return out;
}

std::string slot_limit(size_t slots, int64_t allowed, int64_t slots_per_trial, int gpus,
                       size_t cores) {
  if (static_cast<int64_t>(slots) >= allowed) return "";
  if (gpus > 0) {
    return fmt::format(" ({} allowed, and this machine's {} GPU(s) hold {} trial(s) of {} GPU(s))",
                       allowed, gpus, slots, slots_per_trial);
  }
  return fmt::format(
      " ({} allowed, and the {} core(s) this process may use hold {} trial(s) of {} slot(s))",
      allowed, cores, slots, slots_per_trial);
}

std::string Placement::at_once(int64_t allowed, int64_t slots_per_trial) const {
  const std::string where = !slurm_job.empty()
                                ? " as job steps of Slurm job " + slurm_job
                                : slot_limit(slots.size(), allowed, slots_per_trial, gpus, cores);
  const int64_t n = std::min(static_cast<int64_t>(slots.size()), allowed);
  return fmt::format("up to {} trial{} at once{}", n, n == 1 ? "" : "s", where);
}

Placement place_trials(const dist::Env& env, int64_t slots_per_trial) {
  Placement p;
  const std::vector<int> cpus = util::allowed_cpus();
  p.cores = cpus.size();
  p.gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  const auto job = env.find("SLURM_JOB_ID");
  if (job == env.end() || env.count("SLURM_STEP_ID")) {
    p.slots = local_slots(cpus, p.gpus, slots_per_trial);
    return p;
  }
  p.slurm_job = job->second;
  const int64_t tasks =
      env.count("SLURM_NTASKS") ? dist::env_integer(env, "SLURM_NTASKS", "Slurm", true) : 1;
  Slot slot;
  slot.threads = env.count("SLURM_CPUS_PER_TASK")
                     ? static_cast<int>(std::min<int64_t>(
                           dist::env_integer(env, "SLURM_CPUS_PER_TASK", "Slurm", true), 1 << 20))
                     : 1;
  p.slots.assign(static_cast<size_t>(std::max<int64_t>(1, tasks / slots_per_trial)), slot);
  return p;
}

}  // namespace crucible::search
