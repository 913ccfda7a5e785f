// dist_worker MODE: joins the run its environment describes (torchrun, Open MPI or Slurm
// variables) and exercises the DistributedContext. Prints one JSON line of results on stdout;
// errors go to stderr as `error: <message>` with the error's exit code.
//   collectives  every collective, with values that reveal what each rank contributed
//   die          rank 1 exits with code 3 right after joining; the others then allreduce
//   hang         rank 1 sleeps forever after joining; the others then allreduce
// CRUCIBLE_TEST_TIMEOUT_S sets the run's timeout (default 30).
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <crucible/crucible.h>

#include "dist/collectives.h"

namespace {

nlohmann::json collectives(const crucible::DistributedContext& ctx) {
  using crucible::ReduceOp;
  const auto rank = static_cast<double>(ctx.rank());
  nlohmann::json out = {{"rank", ctx.rank()},
                        {"size", ctx.size()},
                        {"local_rank", ctx.local_rank()},
                        {"local_size", ctx.local_size()},
                        {"cross_rank", ctx.cross_rank()},
                        {"cross_size", ctx.cross_size()}};
  for (auto [name, op] : {std::pair{"sum", ReduceOp::kSum}, std::pair{"avg", ReduceOp::kAvg},
                          std::pair{"min", ReduceOp::kMin}, std::pair{"max", ReduceOp::kMax}}) {
    auto t = torch::tensor({rank + 1, 10 * (rank + 1)}, torch::kDouble);
    ctx.allreduce(t, op);
    out[name] = {t[0].item<double>(), t[1].item<double>()};
  }
  auto b = torch::full({3}, rank, torch::kFloat);
  ctx.broadcast(b, ctx.size() - 1);
  out["broadcast"] = b.sum().item<double>();
  std::vector<int64_t> gathered;
  for (const auto& t : ctx.allgather(torch::tensor({ctx.rank() * 7}, torch::kLong))) {
    gathered.push_back(t.item<int64_t>());
  }
  out["allgather"] = gathered;
  // Objects of different sizes on each rank.
  out["allgather_object"] =
      ctx.allgather_object({{"rank", ctx.rank()}, {"pad", std::string(ctx.rank() * 5 + 1, 'x')}});
  out["broadcast_object"] =
      ctx.broadcast_object(ctx.rank() == 1 ? nlohmann::json{{"from", 1}} : nlohmann::json(), 1);
  out["gather_object"] = ctx.gather_object(ctx.rank() * ctx.rank(), 0);
  ctx.barrier();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  const char* timeout_env = std::getenv("CRUCIBLE_TEST_TIMEOUT_S");
  const std::chrono::milliseconds timeout(
      static_cast<int64_t>(1000 * (timeout_env ? std::atof(timeout_env) : 30.0)));
  try {
    namespace dist = crucible::dist;
    const auto rendezvous = dist::from_environment(dist::process_environment());
    if (!rendezvous) throw crucible::UsageError("no launcher variables in the environment");
    const crucible::DistributedContext ctx = dist::connect(*rendezvous, timeout);
    if (mode == "collectives") {
      std::cout << collectives(ctx).dump() << std::endl;
      return 0;
    }
    if (ctx.rank() == 1) {
      if (mode == "die") std::_Exit(3);
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    auto t = torch::ones({4});
    ctx.allreduce(t);
    std::cout << "allreduce returned " << t[0].item<double>() << std::endl;
    return 0;
  } catch (const crucible::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return e.exit_code();
  }
}
