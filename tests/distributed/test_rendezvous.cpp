// The launcher conventions: torchrun, Open MPI and Slurm variables into one Rendezvous.
#include "catch.h"

#include <crucible/errors.h>

#include "distributed/rendezvous.h"

using crucible::dist::Env;
using crucible::dist::from_environment;

namespace {

std::string error_of(const Env& env) {
  try {
    from_environment(env);
  } catch (const crucible::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("no launcher variables: a one-process run", "[dist]") {
  CHECK_FALSE(from_environment({}).has_value());
  // An sbatch script itself (no srun step) is not a distributed run.
  CHECK_FALSE(from_environment({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}).has_value());
}

TEST_CASE("half of torchrun's variables is refused, not taken for a one-process run", "[dist]") {
  CHECK_THAT(error_of({{"RANK", "0"}}),
             Catch::StartsWith("torchrun: environment variable RANK='0' is set but WORLD_SIZE is "
                               "not: a launched process needs both, a process on its own neither "
                               "(unset RANK)"));
  CHECK_THAT(error_of({{"WORLD_SIZE", "4"}}),
             Catch::Contains("WORLD_SIZE='4' is set but RANK is not"));
}

TEST_CASE("torchrun's variables, exactly as torchrun sets them", "[dist]") {
  // torchrun --nnodes 2 --nproc_per_node 2: the second process of the second node.
  const auto r = from_environment({{"RANK", "3"},
                                   {"WORLD_SIZE", "4"},
                                   {"LOCAL_RANK", "1"},
                                   {"LOCAL_WORLD_SIZE", "2"},
                                   {"GROUP_RANK", "1"},
                                   {"GROUP_WORLD_SIZE", "2"},
                                   {"ROLE_RANK", "3"},
                                   {"MASTER_ADDR", "10.0.0.5"},
                                   {"MASTER_PORT", "29411"}});
  REQUIRE(r);
  CHECK(r->source == "torchrun");
  CHECK(r->topology.rank == 3);
  CHECK(r->topology.size == 4);
  CHECK(r->topology.local_rank == 1);
  CHECK(r->topology.local_size == 2);
  CHECK(r->topology.cross_rank == 1);
  CHECK(r->topology.cross_size == 2);
  CHECK(r->master_addr == "10.0.0.5");
  CHECK(r->master_port == 29411);
}

TEST_CASE("Open MPI's variables, with MASTER_ADDR needed across nodes", "[dist]") {
  const auto r = from_environment({{"OMPI_COMM_WORLD_RANK", "1"},
                                   {"OMPI_COMM_WORLD_SIZE", "3"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                                   // as mpirun sets it: this process's index on its node
                                   {"OMPI_COMM_WORLD_NODE_RANK", "1"}});
  REQUIRE(r);
  CHECK(r->source == "Open MPI");
  CHECK(r->topology.rank == 1);
  CHECK(r->topology.size == 3);
  CHECK(r->topology.cross_rank == 0);
  CHECK(r->topology.cross_size == 1);
  CHECK(r->master_addr == "127.0.0.1");
  CHECK(r->master_port == 29500);
  // mpirun's job id picks the port, so that two jobs on one machine do not meet.
  const auto job = from_environment({{"OMPI_COMM_WORLD_RANK", "0"},
                                     {"OMPI_COMM_WORLD_SIZE", "2"},
                                     {"OMPI_MCA_ess_base_jobid", "1299316737"}});
  REQUIRE(job);
  CHECK(job->master_port == 20000 + 1299316737 % 10000);
  CHECK_THAT(error_of({{"OMPI_COMM_WORLD_RANK", "2"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
             Catch::Contains("needs MASTER_ADDR"));
}

TEST_CASE("Slurm's variables in an srun step", "[dist]") {
  const auto r = from_environment({{"SLURM_PROCID", "5"},
                                   {"SLURM_NTASKS", "6"},
                                   {"SLURM_LOCALID", "2"},
                                   {"SLURM_NODEID", "1"},
                                   {"SLURM_NNODES", "2"},
                                   {"SLURM_TASKS_PER_NODE", "3(x2)"},
                                   {"SLURM_STEP_ID", "0"},
                                   {"SLURM_JOB_ID", "123456"},
                                   {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"}});
  REQUIRE(r);
  CHECK(r->source == "Slurm");
  CHECK(r->topology.rank == 5);
  CHECK(r->topology.local_rank == 2);
  CHECK(r->topology.local_size == 3);
  CHECK(r->topology.cross_rank == 1);
  CHECK(r->master_addr == "10.1.2.3");
  CHECK(r->master_port == 23456);
  // Rank 0 runs on the step's first node, which is not srun's own when srun ran on a login node
  // (SLURM_LAUNCH_NODE_IPADDR is then the login node's).
  const auto across = [](const std::string& nodes) {
    return from_environment({{"SLURM_PROCID", "1"},
                             {"SLURM_NTASKS", "4"},
                             {"SLURM_NODEID", "0"},
                             {"SLURM_NNODES", "4"},
                             {"SLURM_TASKS_PER_NODE", "1(x4)"},
                             {"SLURM_STEP_ID", "0"},
                             {"SLURM_STEP_NODELIST", nodes},
                             {"SLURM_LAUNCH_NODE_IPADDR", "10.9.9.9"}});
  };
  CHECK(across("gpu[07-09,12]")->master_addr == "gpu07");
  CHECK(across("n0042,n0043,n[1-2]")->master_addr == "n0042");
  CHECK(across("rack[1-2]-n[003-004]-ib")->master_addr == "rack1-n003-ib");
  for (const char* bad : {"gpu[07-09", "gpu]", "n[a-b]", ",n1", "n[]"}) {
    INFO(bad);
    CHECK_THROWS_WITH(across(bad), Catch::Contains(std::string("SLURM_STEP_NODELIST='") + bad +
                                                   "' is not a host list"));
  }
  // On one node every rank is on the same machine as rank 0, wherever srun ran.
  CHECK(from_environment({{"SLURM_PROCID", "0"},
                          {"SLURM_NTASKS", "2"},
                          {"SLURM_NNODES", "1"},
                          {"SLURM_STEP_ID", "0"},
                          {"SLURM_STEP_NODELIST", "gpu07"},
                          {"SLURM_LAUNCH_NODE_IPADDR", "10.9.9.9"}})
            ->master_addr == "127.0.0.1");
  // Another step of the same job, run at the same time, meets at a port of its own.
  const Env env = {{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_STEP_ID", "1"},
                   {"SLURM_JOB_ID", "123456"},
                   {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"}};
  CHECK(from_environment(env)->master_port == 20000 + (123456 + 1009) % 10000);
  CHECK_THAT(error_of({{"SLURM_PROCID", "0"},
                       {"SLURM_NTASKS", "3"},
                       {"SLURM_STEP_ID", "0"},
                       {"SLURM_TASKS_PER_NODE", "2,1"}}),
             Catch::Contains("the same number of tasks on every node"));
}

TEST_CASE("malformed or inconsistent variables are named", "[dist]") {
  CHECK(error_of({{"RANK", "one"}, {"WORLD_SIZE", "2"}}) ==
        "torchrun: environment variable RANK='one' is not a non-negative integer");
  CHECK_THAT(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}),
             Catch::Contains("torchrun: the rank is outside the world (rank 2, size 2"));
  CHECK_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
             Catch::Contains("MASTER_PORT 70000 is not a TCP port"));
}
