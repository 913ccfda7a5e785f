// dist_worker MODE: joins the run its environment describes (torchrun, Open MPI or Slurm
// variables) and exercises the DistributedContext. Prints one JSON line of results on stdout;
// errors go to stderr as `error: <message>` with the error's exit code.
//   collectives  every collective, with values that reveal what each rank contributed
//   die          rank 1 exits with code 3 right after joining; the others then allreduce
//   hang         rank 1 sleeps forever after joining; the others then allreduce
//   vanish       every rank all-reduces in a loop; rank 0 (which serves the store) exits with
//                code 3 between or in the middle of them, so that the others write to its closed
//                connections
//   misleading   rank 1 prints a peer failure's words, waits past the timeout and fails on its
//                own (exit 1), after the others gave up on it in their allreduce (exit 5)
//   grad_sync    GradientSync on an MLP against all-gathered local gradients, with and without
//                overlap and gradients as bucket views, with two backward passes in one window,
//                with parameters that one rank or no rank has a gradient for, and one that
//                no rank has a gradient for in one step only
//   sparse_grad_sync  GradientSync of sparse embeddings (each rank's rows, one used on rank 0
//                only or on none, one that is dense on one rank, one unused) beside a dense
//                layer, with and without overlap
//   train_metrics  training means across ranks of uneven counts and keys: rank 0's batches return
//                loss 1, loss 3 and rare 10, rank 1's loss 5 (rank 2's, in a 3-rank run, none);
//                every rank counted skipped_steps 2: {"rank": r, "means": {...}}
//   backend      joins under distributed_backend $CRUCIBLE_TEST_BACKEND (auto, gloo, nccl), this
//                rank naming the GPU $CRUCIBLE_TEST_GPU (unset: none), and prints the backend that
//                carries CUDA tensors: {"rank": r, "cuda_backend": "gloo" or "nccl"}
// CRUCIBLE_TEST_TIMEOUT_S sets the run's timeout (default 30).
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <thread>

#include <unistd.h>

#include <crucible/crucible.h>

#include "config/enum_names.h"
#include "distributed/collectives.h"
#include "distributed/grad_sync.h"
#include "metrics/reducer.h"

namespace {

nlohmann::json collectives(const crucible::DistributedContext& ctx) {
  using crucible::ReduceOp;
  const auto rank = static_cast<double>(ctx.rank());
  nlohmann::json out = {{"rank", ctx.rank()},
                        {"size", ctx.size()},
                        {"local_rank", ctx.local_rank()},
                        {"local_size", ctx.local_size()},
                        {"cross_rank", ctx.cross_rank()},
                        {"cross_size", ctx.cross_size()},
                        {"torch_threads", torch::get_num_threads()}};
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
  // Non-finite numbers arrive as they were sent (JSON text would make them null), here as text.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::string> non_finite;
  for (const auto& v :
       ctx.allgather_object({{"nan", std::nan("")}, {"inf", ctx.rank() % 2 == 0 ? inf : -inf}})) {
    non_finite.push_back(std::to_string(v.at("nan").get<double>()) + " " +
                         std::to_string(v.at("inf").get<double>()));
  }
  out["non_finite"] = non_finite;
  out["broadcast_non_finite"] =
      std::to_string(ctx.broadcast_object({{"inf", -inf}}, 0).at("inf").get<double>());
  ctx.barrier();
  return out;
}

// An MLP whose `unused` layer never gets a gradient and whose `rank0` layer gets one on rank 0
// only. They come first, so that they fall in the last bucket.
struct Net : torch::nn::Module {
  Net()
      : unused(register_module("unused", torch::nn::Linear(4, 4))),
        rank0(register_module("rank0", torch::nn::Linear(4, 4))),
        a(register_module("a", torch::nn::Linear(16, 32))),
        b(register_module("b", torch::nn::Linear(32, 32))),
        c(register_module("c", torch::nn::Linear(32, 4))) {}
  torch::Tensor loss(const torch::Tensor& x, bool use_rank0) {
    torch::Tensor y = c(torch::relu(b(torch::relu(a(x)))));
    if (use_rank0) y = rank0(y);
    return y.pow(2).mean();
  }
  torch::nn::Linear unused, rank0, a, b, c;
};

// The largest difference between each parameter's gradient and `expected` (undefined: none).
double max_error(const std::vector<torch::Tensor>& params,
                 const std::vector<torch::Tensor>& expected) {
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& g = params[i].grad();
    if (g.defined() != expected[i].defined()) return 1e9;
    if (g.defined()) worst = std::max(worst, (g - expected[i]).abs().max().item<double>());
  }
  return worst;
}

// The mean over ranks of the gradients of `net`'s parameters after the backward passes of
// `passes` from no gradients (all-gathered; none where no rank has one). `net` keeps no gradients.
std::vector<torch::Tensor> reference_means(const crucible::DistributedContext& ctx, Net& net,
                                           const std::function<void()>& passes) {
  for (auto& p : net.parameters()) p.mutable_grad() = torch::Tensor();
  passes();
  std::vector<torch::Tensor> out;
  for (auto& p : net.parameters()) {
    const bool has = p.grad().defined();
    auto flags = ctx.allgather(torch::tensor({has ? 1 : 0}));
    const auto grads = ctx.allgather(has ? p.grad() : torch::zeros_like(p));
    bool anyone = false;
    for (const auto& f : flags) anyone = anyone || f.item<int64_t>() > 0;
    out.push_back(anyone ? torch::stack(grads).sum(0) / static_cast<double>(ctx.size())
                         : torch::Tensor());
    p.mutable_grad() = torch::Tensor();
  }
  return out;
}

// Whether no gradient of `params` is an autograd view and detach_() works on each.
bool plain_gradients(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    if (p.grad().is_view()) return false;
    p.grad().detach_();
  }
  return true;
}

// One GradientSync with `options` on a fresh Net, for six update steps as the trainer takes
// them: gradients start as none, then the sync clears them between steps (as step_optimizer
// does). The third step runs backward twice in one window; in the fourth no rank uses the rank0
// layer; in the fifth rank 0 uses it again; the sixth is the fifth followed by a backward pass
// outside the window and a second finish() (as step_optimizer's after a plain loss.backward()).
nlohmann::json grad_sync_case(const crucible::DistributedContext& ctx,
                              const crucible::dist::GradientSyncOptions& options) {
  torch::manual_seed(7);
  Net net;
  torch::manual_seed(100 + static_cast<uint64_t>(ctx.rank()));
  const torch::Tensor x1 = torch::randn({8, 16}), x2 = torch::randn({8, 16});
  const bool rank0 = ctx.rank() == 0;
  const std::function<void()> once = [&] { net.loss(x1, rank0).backward(); };
  const std::function<void()> twice = [&] {
    net.loss(x1, rank0).backward();
    net.loss(x2, false).backward();
  };
  const std::function<void()> nobody = [&] { net.loss(x1, false).backward(); };
  const std::function<void()> later = [&] { net.loss(x2, false).backward(); };
  const auto one = reference_means(ctx, net, once);
  const auto two = reference_means(ctx, net, twice);
  const auto none = reference_means(ctx, net, nobody);
  struct Step {
    const std::function<void()>* pass;
    const std::function<void()>* after;  // outside the window, then finish() again
    const std::vector<torch::Tensor>* expected;
  };
  const std::vector<Step> steps = {{&once, nullptr, &one},  {&once, nullptr, &one},
                                   {&twice, nullptr, &two}, {&nobody, nullptr, &none},
                                   {&once, nullptr, &one},  {&once, &later, &two}};

  crucible::dist::GradientSync sync(ctx, net.parameters(), options);
  nlohmann::json out = {{"buckets", sync.bucket_count()}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string step = "step" + std::to_string(i + 1);
    if (i > 0) sync.clear_gradients();
    sync.open_window();
    (*steps[i].pass)();
    try {
      sync.finish();
      if (steps[i].after) {
        (*steps[i].after)();
        sync.finish();
      }
    } catch (const crucible::TrainingError& e) {
      out[step] = {{"threw", e.what()}};
      continue;
    }
    out[step] = {{"started_early", sync.buckets_started_early()},
                 {"redone", sync.last_finish_redone()},
                 {"copies", sync.last_finish_copies()},
                 {"error", max_error(net.parameters(), *steps[i].expected)},
                 {"plain_gradients", plain_gradients(net.parameters())},
                 {"unused_has_grad", net.unused->weight.grad().defined()},
                 {"rank0_has_grad", net.rank0->weight.grad().defined()}};
  }
  // A step with no backward since the gradients were cleared, as step_optimizer takes it: no rank
  // has a gradient, so none is left, not the cleared zeros (an optimizer would step on those).
  sync.clear_gradients();
  const bool changed = sync.changed_since_finish();
  if (changed) sync.finish();
  bool any_gradient = false;
  for (const auto& p : net.parameters()) any_gradient = any_gradient || p.grad().defined();
  out["no_backward"] = {{"changed", changed}, {"any_gradient", any_gradient}};
  return out;
}

nlohmann::json grad_sync(const crucible::DistributedContext& ctx) {
  nlohmann::json out = {{"rank", ctx.rank()}};
  for (const bool overlap : {true, false}) {
    for (const bool view : {true, false}) {
      const std::string name = std::string(overlap ? "overlap" : "plain") + (view ? "_view" : "");
      out[name] = grad_sync_case(
          ctx,
          crucible::dist::GradientSyncOptions().bucket_bytes(1024).overlap(overlap).as_bucket_view(
              view));
    }
  }
  return out;
}

// The elements of `t` (dense or sparse), as doubles.
std::vector<double> elements(const torch::Tensor& t) {
  const torch::Tensor d = (t.is_sparse() ? t.to_dense() : t).to(torch::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// float16 parameters' gradients averaged by GradientSync, where rank r gives 40000 - 10000 r, so
// that the ranks' sum lies beyond float16's range (65504) while their mean does not: `view` and
// `copy`, a dense [4] with and without as_bucket_view, with that value everywhere; `sparse`, a
// [4, 2] whose sparse gradient has that value in rows 0 and 2 on every rank; `mixed`, the same
// but for rank 0's, which is dense, with 40000 everywhere. The gradients after finish().
nlohmann::json half_grad_sync(const crucible::DistributedContext& ctx) {
  nlohmann::json out = {{"rank", ctx.rank()}};
  const double value = 40000.0 - 10000.0 * ctx.rank();
  const auto half = torch::TensorOptions(torch::kHalf).requires_grad(true);
  for (const bool view : {true, false}) {
    const torch::Tensor p = torch::zeros({4}, half);
    crucible::dist::GradientSync sync(ctx, {p},
                                      crucible::dist::GradientSyncOptions().as_bucket_view(view));
    sync.open_window();
    p.mutable_grad() = torch::full({4}, value, torch::kHalf);
    sync.finish();
    out[view ? "view" : "copy"] = elements(p.grad());
  }
  const torch::Tensor sparse = torch::zeros({4, 2}, half), mixed = torch::zeros({4, 2}, half);
  crucible::dist::GradientSync sync(ctx, {sparse, mixed}, crucible::dist::GradientSyncOptions(),
                                    {sparse, mixed});
  sync.open_window();
  const torch::Tensor rows =
      torch::sparse_coo_tensor(torch::tensor({0, 2}, torch::kLong).unsqueeze(0),
                               torch::full({2, 2}, value, torch::kHalf), {4, 2});
  sparse.mutable_grad() = rows;
  mixed.mutable_grad() = ctx.rank() == 0 ? torch::full({4, 2}, value, torch::kHalf) : rows;
  sync.finish();
  out["sparse"] = elements(sparse.grad());
  out["mixed"] = elements(mixed.grad());
  return out;
}

// Embeddings of sparse gradients beside a dense layer: `rows` looked up with different indices on
// each rank (some shared, some repeated), `rank0` on rank 0 only (and, when asked, on none),
// `tied` looked up on every rank and on the last rank also used whole (a dense gradient there),
// `unused` never.
struct SparseNet : torch::nn::Module {
  SparseNet()
      : rows(register_module("rows", embedding(1000, 4))),
        rank0(register_module("rank0", embedding(10, 3))),
        tied(register_module("tied", embedding(10, 3))),
        unused(register_module("unused", embedding(10, 3))),
        head(register_module("head", torch::nn::Linear(4, 1))) {}
  static torch::nn::Embedding embedding(int64_t n, int64_t dim) {
    return torch::nn::Embedding(torch::nn::EmbeddingOptions(n, dim).sparse(true));
  }
  torch::Tensor loss(const torch::Tensor& index, bool use_rank0, bool use_tied_whole) {
    torch::Tensor y = head(rows(index)).pow(2).mean() + tied(index.remainder(10)).mean();
    if (use_rank0) y = y + rank0(index.remainder(10)).sum();
    if (use_tied_whole) y = y + tied->weight.pow(2).sum();
    return y;
  }
  torch::nn::Embedding rows, rank0, tied, unused;
  torch::nn::Linear head;
};

// Step `step`'s indices on this rank: 40 lookups among rows [100 r, 100 r + 300), so that ranks
// share rows and each repeats some.
torch::Tensor sparse_indices(const crucible::DistributedContext& ctx, int step) {
  torch::manual_seed(static_cast<uint64_t>(1000 * step + ctx.rank()));
  return torch::randint(100 * ctx.rank(), 100 * ctx.rank() + 300, {40}, torch::kLong);
}

// GradientSync of SparseNet's parameters with `options` for three steps (the sync clears the
// gradients before each; in the third no rank uses `rank0`); for each, what the embeddings'
// gradients are after finish().
nlohmann::json sparse_grad_sync_case(const crucible::DistributedContext& ctx,
                                     const crucible::dist::GradientSyncOptions& options,
                                     const torch::Device& device) {
  torch::manual_seed(7);
  SparseNet net;
  net.to(device);
  const std::vector<std::pair<const char*, torch::Tensor>> sparse = {
      {"rows", net.rows->weight},
      {"rank0", net.rank0->weight},
      {"tied", net.tied->weight},
      {"unused", net.unused->weight}};
  std::vector<torch::Tensor> sparse_params;
  for (const auto& [name, p] : sparse) sparse_params.push_back(p);
  crucible::dist::GradientSync sync(ctx, net.parameters(), options, sparse_params);
  nlohmann::json out = {{"buckets", sync.bucket_count()}};
  for (const int step : {1, 2, 3}) {
    const torch::Tensor index = sparse_indices(ctx, step).to(device);
    const bool use_rank0 = ctx.rank() == 0 && step < 3;
    const bool use_tied_whole = ctx.rank() == ctx.size() - 1;
    // The reference: the mean of every rank's dense gradient, from a pass without the sync.
    if (step > 1) net.zero_grad(/*set_to_none=*/false);
    net.loss(index, use_rank0, use_tied_whole).backward();
    std::vector<torch::Tensor> expected;
    for (const auto& [name, p] : sparse) {
      const torch::Tensor mine = p.grad().defined() ? p.grad().to_dense() : torch::zeros_like(p);
      expected.push_back(torch::stack(ctx.allgather(mine)).sum(0) /
                         static_cast<double>(ctx.size()));
    }
    sync.clear_gradients();
    sync.open_window();
    net.loss(index, use_rank0, use_tied_whole).backward();
    sync.finish();
    nlohmann::json result;
    for (size_t i = 0; i < sparse.size(); ++i) {
      const auto& [name, p] = sparse[i];
      const torch::Tensor& g = p.grad();
      if (!g.defined()) {
        result[name] = {{"has_grad", false}};
        continue;
      }
      const torch::Tensor dense = g.to_dense();
      bool same = true;
      for (const auto& other : ctx.allgather(dense)) same = same && torch::equal(other, dense);
      result[name] = {{"has_grad", true},
                      {"sparse", g.is_sparse()},
                      {"error", (dense - expected[i]).abs().max().item<double>()},
                      {"same_on_every_rank", same}};
      if (g.is_sparse()) {
        result[name]["coalesced"] = g.is_coalesced();
        result[name]["sparse_dim"] = g.sparse_dim();
        result[name]["nnz"] = g._nnz();
      }
    }
    // The rows any rank looked up: the entries a mean gradient of `rows` must have.
    result["rows_looked_up"] = std::get<0>(at::_unique(torch::cat(ctx.allgather(index)))).numel();
    out["step" + std::to_string(step)] = result;
  }
  return out;
}

// The cases on the CPU ("overlap", "plain") and, when there is a GPU, on CUDA device 0 too
// ("overlap_cuda", "plain_cuda": every rank on that device, through Gloo).
nlohmann::json sparse_grad_sync(const crucible::DistributedContext& ctx) {
  nlohmann::json out = {{"rank", ctx.rank()}};
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA, 0);
  for (const auto& device : devices) {
    for (const bool overlap : {true, false}) {
      out[std::string(overlap ? "overlap" : "plain") + (device.is_cuda() ? "_cuda" : "")] =
          sparse_grad_sync_case(
              ctx, crucible::dist::GradientSyncOptions().bucket_bytes(1024).overlap(overlap),
              device);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  if (mode == "orphan") {
    // Leaves a child running for 30 s that holds this process's stdout and stderr.
    if (::fork() == 0) {
      std::this_thread::sleep_for(std::chrono::seconds(30));
      std::_Exit(0);
    }
    std::cout << "left a child behind" << std::endl;
    return 0;
  }
  if (mode == "interrupted") {
    // As `trainer fit` does: the first SIGINT asks for a graceful stop, the second ends the
    // process at once with kExitInterrupted.
    std::signal(SIGINT, [](int) {
      static volatile sig_atomic_t seen = 0;
      seen = seen + 1;
      if (seen >= 2) std::_Exit(crucible::kExitInterrupted);
    });
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  const char* timeout_env = std::getenv("CRUCIBLE_TEST_TIMEOUT_S");
  const std::chrono::milliseconds timeout(
      static_cast<int64_t>(1000 * (timeout_env ? std::atof(timeout_env) : 30.0)));
  try {
    namespace dist = crucible::dist;
    const auto rendezvous = dist::from_environment(dist::process_environment());
    if (!rendezvous) throw crucible::UsageError("no launcher variables in the environment");
    if (mode == "train_metrics") {
      const crucible::DistributedContext ctx = dist::connect(*rendezvous, timeout);
      crucible::metrics::TrainingAccumulator training;
      if (ctx.rank() == 0) {
        training.add({{"loss", torch::tensor(1.0)}}, 0);
        training.add({{"loss", torch::tensor(3.0)}}, 1);
        training.add({{"rare", torch::tensor(10.0)}}, 2);
      } else if (ctx.rank() == 1) {
        training.add({{"loss", torch::tensor(5.0)}}, 0);
      }
      training.add_count("skipped_steps", 2);
      std::cout << nlohmann::json{{"rank", ctx.rank()},
                                  {"means", crucible::metrics::across_ranks(ctx, training)}}
                       .dump()
                << std::endl;
      return 0;
    }
    if (mode == "backend") {
      const char* gpu = std::getenv("CRUCIBLE_TEST_GPU");
      const crucible::DistributedContext ctx =
          dist::connect(*rendezvous, timeout,
                        crucible::config::names<crucible::DistributedBackend>()
                            .parse(std::getenv("CRUCIBLE_TEST_BACKEND"))
                            .value(),
                        std::string(gpu ? gpu : ""));
      const std::string cuda_backend =
          crucible::detail::DistributedAccess::collectives(ctx)->backend_for(torch::kCUDA);
      std::cout << nlohmann::json{{"rank", ctx.rank()}, {"cuda_backend", cuda_backend}}.dump()
                << std::endl;
      return 0;
    }
    const crucible::DistributedContext ctx = dist::connect(*rendezvous, timeout);
    if (mode == "collectives" || mode == "grad_sync" || mode == "sparse_grad_sync" ||
        mode == "half_grad_sync") {
      const auto out = mode == "collectives"      ? collectives(ctx)
                       : mode == "grad_sync"      ? grad_sync(ctx)
                       : mode == "half_grad_sync" ? half_grad_sync(ctx)
                                                  : sparse_grad_sync(ctx);
      std::cout << out.dump() << std::endl;
      return 0;
    }
    // connect() returns once every rank has built its process groups, so the others fail in the
    // all-reduce below, not while still connecting. The pause lets connect's barrier's last
    // messages arrive before rank 1's connections close.
    if (mode == "vanish") {
      if (ctx.rank() == 0) {
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          std::_Exit(3);
        }).detach();
      }
      auto small = torch::ones({4});
      for (int i = 0; i < 10000000; ++i) ctx.allreduce(small);
      std::cout << "all-reduces returned" << std::endl;
      return 0;
    }
    if (mode == "one_ignores_sigterm") {
      // Rank 0 ignores SIGTERM and waits for rank 1 in an all-reduce; rank 1 never handles it.
      if (ctx.rank() == 0) std::signal(SIGTERM, SIG_IGN);
      if (ctx.rank() != 0) {
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      }
    }
    if (ctx.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (mode == "die") std::_Exit(3);
      if (mode == "misleading") {
        std::cerr << "error: rank 1: allreduce across ranks failed (its own words, not a peer's)"
                  << std::endl;
        std::this_thread::sleep_for(timeout + std::chrono::milliseconds(100));
        std::_Exit(crucible::kExitTrainingFailed);
      }
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
