#include "distributed/collectives.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>

#include "util/broken_pipes.h"
#include "util/error_text.h"

namespace crucible::detail {

using util::first_line;

Collectives::Collectives(c10::intrusive_ptr<c10d::Store> store,
                         c10::intrusive_ptr<dist::Group> group,
                         c10::intrusive_ptr<dist::Group> cuda_group, int64_t rank,
                         std::chrono::milliseconds timeout)
    : store_(std::move(store)),
      group_(std::move(group)),
      cuda_group_(std::move(cuda_group)),
      rank_(rank),
      timeout_(timeout) {}

Collectives::~Collectives() {
  if (cuda_group_) dist::shut_down_nccl(*cuda_group_);
}

dist::Group& Collectives::group_for(const torch::Device& device) const {
  return device.is_cuda() && cuda_group_ ? *cuda_group_ : *group_;
}

std::string Collectives::backend_for(const torch::Device& device) const {
  return group_for(device).getBackendName();
}

void Collectives::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op) {
  try {
    work->wait(timeout_);
  } catch (const std::exception& e) {
    throw PeerLostError(fmt::format(
        "rank {}: {} across ranks failed ({}); a peer rank died, hangs or is unreachable "
        "(timeout {} s)",
        rank_, op, first_line(e), timeout_.count() / 1000.0));
  }
}

c10::intrusive_ptr<c10d::Work> Collectives::start_allreduce(std::vector<torch::Tensor>& tensors,
                                                            ReduceOp op) {
  c10d::AllreduceOptions options;
  options.timeout = timeout_;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // Gloo has no AVG: a sum, divided by allreduce()
      options.reduceOp = c10d::ReduceOp::SUM;
      break;
    case ReduceOp::kMin:
      options.reduceOp = c10d::ReduceOp::MIN;
      break;
    case ReduceOp::kMax:
      options.reduceOp = c10d::ReduceOp::MAX;
      break;
  }
  return group_for(tensors.front().device()).allreduce(tensors, options);
}

void Collectives::allreduce(std::vector<torch::Tensor>& tensors, ReduceOp op) {
  wait(start_allreduce(tensors, op), "allreduce");
  if (op == ReduceOp::kAvg) {
    for (auto& t : tensors) t.div_(group_->getSize());
  }
}

c10::intrusive_ptr<c10d::Work> Collectives::allreduce_async(torch::Tensor& tensor, ReduceOp op) {
  TORCH_INTERNAL_ASSERT(op != ReduceOp::kAvg, "allreduce_async has no AVG: sum, then divide");
  std::vector<torch::Tensor> tensors = {tensor};
  return start_allreduce(tensors, op);
}

void Collectives::broadcast(std::vector<torch::Tensor>& tensors, int64_t root) {
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = timeout_;
  wait(group_for(tensors.front().device()).broadcast(tensors, options), "broadcast");
}

std::vector<torch::Tensor> Collectives::allgather(const torch::Tensor& tensor, int64_t size) {
  std::vector<torch::Tensor> input = {tensor.contiguous()};
  std::vector<std::vector<torch::Tensor>> output(1);
  for (int64_t i = 0; i < size; ++i) output[0].push_back(torch::empty_like(input[0]));
  c10d::AllgatherOptions options;
  options.timeout = timeout_;
  wait(group_for(input[0].device()).allgather(output, input, options), "allgather");
  return output[0];
}

void Collectives::barrier() {
  c10d::BarrierOptions options;
  options.timeout = timeout_;
  wait(group_->barrier(options), "barrier");
}

}  // namespace crucible::detail

namespace crucible::dist {

using util::first_line;

namespace {

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// Announces rank t.rank on `store` (keys under `prefix`) and waits until all t.size ranks have.
// Throws PeerLostError naming the ranks that had not after `timeout`.
void wait_for_every_rank(c10d::Store& store, const std::string& prefix, const Topology& t,
                         std::chrono::milliseconds timeout, const std::string& where) {
  const auto joined = [&](int64_t rank) { return prefix + "joined/rank" + std::to_string(rank); };
  store.set(joined(t.rank), std::vector<uint8_t>{1});
  const std::string count = prefix + "joined/count";
  store.add(count, 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (store.add(count, 0) < t.size) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::vector<int64_t> missing;
      for (int64_t rank = 0; rank < t.size; ++rank) {
        if (!store.check({joined(rank)})) missing.push_back(rank);
      }
      const bool one = missing.size() == 1;
      throw PeerLostError(fmt::format(
          "{} failed: {} {} had not joined after {} s (resources.distributed_timeout_seconds, "
          "or $CRUCIBLE_DIST_TIMEOUT); {} failed before joining, hangs or cannot reach the store",
          where, one ? "rank" : "ranks", fmt::join(missing, ", "), timeout.count() / 1000.0,
          one ? "it" : "they"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// An NCCL group over `store` (its own key prefix). A collective a peer never joins aborts the
// communicator after `timeout` (TORCH_NCCL_ASYNC_ERROR_HANDLING, unless set), so a dead or hung
// rank cannot hang the others on the GPU.
c10::intrusive_ptr<dist::Group> nccl_group(const Rendezvous& r,
                                           const c10::intrusive_ptr<c10d::Store>& store,
                                           std::chrono::milliseconds timeout,
                                           const std::string& where) {
#ifdef USE_C10D_NCCL
  try {
    setenv(kNcclErrorHandlingVariable, "1", /*overwrite=*/0);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto prefixed =
        c10::make_intrusive<c10d::PrefixStore>(r.store_prefix + "crucible/nccl/", store);
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, static_cast<int>(r.topology.rank),
                                                       static_cast<int>(r.topology.size), options);
  } catch (const std::exception& e) {
    throw TrainingError(
        fmt::format("{}: cannot build the NCCL process group: {}", where, first_line(e)));
  }
#else
  (void)r;
  (void)store;
  (void)timeout;
  TORCH_INTERNAL_ASSERT(false, where, ": NCCL asked for, but this LibTorch has no NCCL");
  return {};
#endif
}

}  // namespace

DistributedContext connect(const Rendezvous& r, std::chrono::milliseconds timeout, bool nccl) {
  const Topology& t = r.topology;
  if (t.size == 1) return DistributedContext();
  util::survive_broken_pipes();
  const std::string where = fmt::format("rank {}: rendezvous at {}:{} ({})", t.rank, r.master_addr,
                                        r.master_port, r.source);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(r.master_port);
    // Rank 0 serves the store unless the launcher does. The store does not count the workers:
    // wait_for_every_rank does, and names the ranks that do not come.
    options.isServer = t.rank == 0 && !r.store_hosted;
    options.waitWorkers = false;
    options.timeout = timeout;
    store = open_tcp_store(r.master_addr, options);
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("{} failed: {}", where, first_line(e)));
  }
  const std::string prefix = r.store_prefix + "crucible/";
  try {
    wait_for_every_rank(*store, prefix, t, timeout, where);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerLostError(fmt::format(
        "{} failed: the store stopped answering while this rank waited for the others to join "
        "({}); whoever serves it (rank 0 or the launcher) ended or cannot be reached",
        where, first_line(e)));
  }
  c10::intrusive_ptr<dist::Group> group;
  try {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname && *ifname) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (is_loopback(r.master_addr)) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    options->threads = 2;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
    group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, static_cast<int>(t.rank),
                                                        static_cast<int>(t.size), options);
  } catch (const std::exception& e) {
    throw TrainingError(
        fmt::format("{}: cannot build the Gloo process group: {}", where, first_line(e)));
  }
  c10::intrusive_ptr<dist::Group> cuda_group;
  if (nccl) cuda_group = nccl_group(r, store, timeout, where);
  return detail::DistributedAccess::make(
      t, std::make_shared<detail::Collectives>(store, group, cuda_group, t.rank, timeout));
}

}  // namespace crucible::dist
