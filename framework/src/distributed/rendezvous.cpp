#include "distributed/rendezvous.h"

#include <unistd.h>  // environ

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "util/parse.h"

namespace crucible::dist {

namespace {

bool has(const Env& env, const std::string& name) { return env.count(name) > 0; }

int64_t integer(const Env& env, const std::string& name, const std::string& source) {
  return env_integer(env, name, source);
}

int64_t integer_or(const Env& env, const std::string& name, int64_t fallback,
                   const std::string& source) {
  return has(env, name) ? integer(env, name, source) : fallback;
}

// Slurm's tasks per node: "2", or "2(x3)" for three nodes of two, or "2(x2),1" (uneven: the
// first node's count is this node's only when they are all equal; uneven layouts are refused).
int64_t slurm_tasks_per_node(const std::string& text, const std::string& name) {
  const auto prefix = util::integer_prefix(text);
  const size_t used = prefix ? prefix->second : 0;
  const int64_t n = prefix ? prefix->first : 0;
  const std::string rest = text.substr(used);
  if (used == 0 || n <= 0 || (!rest.empty() && rest.rfind("(x", 0) != 0) ||
      rest.find(',') != std::string::npos) {
    throw UsageError(fmt::format(
        "Slurm: {}='{}': Crucible needs the same number of tasks on every node", name, text));
  }
  return n;
}

// The first host of a Slurm host list such as SLURM_STEP_NODELIST's ("gpu[07-09,12],login1" gives
// "gpu07", "rack[1-2]-n[3-4]" gives "rack1-n3"), where a step's rank 0 runs. Throws UsageError
// naming `name` when `list` is not one.
std::string first_slurm_host(const std::string& list, const std::string& name) {
  const auto fail = [&] {
    return UsageError(fmt::format("Slurm: {}='{}' is not a host list", name, list));
  };
  std::string host;
  for (size_t i = 0; i < list.size() && list[i] != ',';) {
    if (list[i] == ']') throw fail();
    if (list[i] != '[') {
      host += list[i++];
      continue;
    }
    const size_t close = list.find(']', i);
    if (close == std::string::npos) throw fail();
    const std::string first = list.substr(i + 1, list.find_first_of(",-]", i + 1) - i - 1);
    if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) throw fail();
    host += first;
    i = close + 1;
  }
  if (host.empty()) throw fail();
  return host;
}

void check(const Rendezvous& r) {
  const Topology& t = r.topology;
  auto fail = [&](const std::string& what) {
    throw UsageError(fmt::format(
        "{}: {} (rank {}, size {}, local rank {}, local size {}, node "
        "{} of {})",
        r.source, what, t.rank, t.size, t.local_rank, t.local_size, t.cross_rank, t.cross_size));
  };
  if (t.size < 1) fail("the world size must be at least 1");
  if (t.rank >= t.size) fail("the rank is outside the world");
  if (t.local_size < 1 || t.local_rank >= t.local_size) fail("the local rank is outside its node");
  if (t.cross_size < 1 || t.cross_rank >= t.cross_size) fail("the node rank is outside the nodes");
  if (r.master_port < 1 || r.master_port > 65535) {
    fail(fmt::format("MASTER_PORT {} is not a TCP port", r.master_port));
  }
}

// MASTER_ADDR and MASTER_PORT when set.
void master_from(const Env& env, Rendezvous& r) {
  if (has(env, "MASTER_ADDR")) r.master_addr = env.at("MASTER_ADDR");
  if (has(env, "MASTER_PORT"))
    r.master_port = static_cast<int>(integer(env, "MASTER_PORT", r.source));
}

// The variables a launcher names its topology with; nullptr: the launcher does not set it.
struct TopologyVariables {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  const char* node_rank;
  const char* node_count;
};

constexpr TopologyVariables kTorchrun = {
    "torchrun",         "RANK",       "WORLD_SIZE",      "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"};
// OMPI_COMM_WORLD_NODE_RANK is not the node's index (it counts the node's processes of all
// jobs), so the node is derived from the rank and the local size.
constexpr TopologyVariables kOpenMpi = {"Open MPI",
                                        "OMPI_COMM_WORLD_RANK",
                                        "OMPI_COMM_WORLD_SIZE",
                                        "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "OMPI_COMM_WORLD_LOCAL_SIZE",
                                        nullptr,
                                        nullptr};

// A rendezvous from `vars`; absent local variables mean one node, absent node variables are
// derived from the local size.
Rendezvous read_topology(const Env& env, const TopologyVariables& vars) {
  Rendezvous r;
  r.source = vars.source;
  Topology& t = r.topology;
  auto optional = [&](const char* name, int64_t fallback) {
    return name ? integer_or(env, name, fallback, r.source) : fallback;
  };
  t.rank = integer(env, vars.rank, r.source);
  t.size = integer(env, vars.size, r.source);
  t.local_rank = optional(vars.local_rank, t.rank);
  t.local_size = std::max<int64_t>(1, optional(vars.local_size, t.size));
  t.cross_rank = optional(vars.node_rank, t.rank / t.local_size);
  t.cross_size = optional(vars.node_count, (t.size + t.local_size - 1) / t.local_size);
  master_from(env, r);
  return r;
}

Rendezvous open_mpi(const Env& env) {
  Rendezvous r = read_topology(env, kOpenMpi);
  if (!has(env, "MASTER_PORT") && has(env, "OMPI_MCA_ess_base_jobid")) {
    r.master_port =
        static_cast<int>(20000 + integer(env, "OMPI_MCA_ess_base_jobid", r.source) % 10000);
  }
  if (r.topology.cross_size > 1 && !has(env, "MASTER_ADDR")) {
    throw UsageError(
        "Open MPI: a run over several nodes needs MASTER_ADDR (the address of rank 0's node), "
        "e.g. mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port> ...");
  }
  return r;
}

Rendezvous slurm(const Env& env) {
  Rendezvous r;
  r.source = "Slurm";
  Topology& t = r.topology;
  t.rank = integer(env, "SLURM_PROCID", r.source);
  t.size = integer(env, "SLURM_NTASKS", r.source);
  t.local_rank = integer_or(env, "SLURM_LOCALID", 0, r.source);
  const char* per_node = has(env, "SLURM_NTASKS_PER_NODE")  ? "SLURM_NTASKS_PER_NODE"
                         : has(env, "SLURM_TASKS_PER_NODE") ? "SLURM_TASKS_PER_NODE"
                                                            : nullptr;
  t.local_size = per_node ? slurm_tasks_per_node(env.at(per_node), per_node) : t.size;
  t.cross_rank = integer_or(env, "SLURM_NODEID", 0, r.source);
  t.cross_size = integer_or(env, "SLURM_NNODES", 1, r.source);
  // Rank 0 runs on the step's first node, which is not srun's when srun ran on a login node.
  if (t.cross_size > 1 && has(env, "SLURM_STEP_NODELIST")) {
    r.master_addr = first_slurm_host(env.at("SLURM_STEP_NODELIST"), "SLURM_STEP_NODELIST");
  } else if (t.cross_size > 1 && has(env, "SLURM_LAUNCH_NODE_IPADDR")) {
    r.master_addr = env.at("SLURM_LAUNCH_NODE_IPADDR");
  }
  if (has(env, "SLURM_JOB_ID")) {
    // The step too: concurrent steps of one job (`srun ... &` twice) each get a port of their
    // own, not each other's store.
    const int64_t step = integer_or(env, "SLURM_STEP_ID", 0, r.source);
    r.master_port =
        static_cast<int>(20000 + (integer(env, "SLURM_JOB_ID", r.source) + 1009 * step) % 10000);
  }
  master_from(env, r);
  return r;
}

}  // namespace

int64_t env_integer(const Env& env, const std::string& name, const std::string& source,
                    bool positive) {
  const std::string& text = env.at(name);
  const auto value = util::whole_integer(text);
  if (!value || *value < (positive ? 1 : 0)) {
    throw UsageError(fmt::format("{}: environment variable {}='{}' is not a {} integer", source,
                                 name, text, positive ? "positive" : "non-negative"));
  }
  return *value;
}

Env process_environment() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

std::optional<Rendezvous> from_environment(const Env& env) {
  std::optional<Rendezvous> r;
  if (has(env, "RANK") != has(env, "WORLD_SIZE")) {
    const char* set = has(env, "RANK") ? "RANK" : "WORLD_SIZE";
    const char* unset = has(env, "RANK") ? "WORLD_SIZE" : "RANK";
    throw UsageError(fmt::format(
        "torchrun: environment variable {}='{}' is set but {} is not: a launched process needs "
        "both, a process on its own neither (unset {})",
        set, env.at(set), unset, set));
  }
  if (has(env, "RANK") && has(env, "WORLD_SIZE")) {
    r = read_topology(env, kTorchrun);
  } else if (has(env, "OMPI_COMM_WORLD_RANK") && has(env, "OMPI_COMM_WORLD_SIZE")) {
    r = open_mpi(env);
  } else if (has(env, "SLURM_PROCID") && has(env, "SLURM_NTASKS") && has(env, "SLURM_STEP_ID")) {
    r = slurm(env);
  }
  if (r) {
    r->store_hosted = has(env, "CRUCIBLE_STORE_HOSTED") && env.at("CRUCIBLE_STORE_HOSTED") == "1";
    r->started_by_crucible = r->store_hosted;
    // torchrun's static rendezvous (its default): the agent on node 0 serves the store at
    // MASTER_PORT and the workers meet under a per-restart prefix, as torch.distributed does.
    if (r->source == "torchrun" && has(env, "TORCHELASTIC_USE_AGENT_STORE") &&
        env.at("TORCHELASTIC_USE_AGENT_STORE") == "True") {
      r->store_hosted = true;
      r->store_prefix = "/worker/attempt_" +
                        std::to_string(integer_or(env, "TORCHELASTIC_RESTART_COUNT", 0, r->source));
    }
    // Crucible's own launcher sets torchrun's variables; a search's Slurm steps keep Slurm's.
    if (r->started_by_crucible && r->source == "torchrun") r->source = "trainer's launcher";
    check(*r);
  }
  return r;
}

}  // namespace crucible::dist
