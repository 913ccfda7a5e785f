#include "distributed/collectives.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <future>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "distributed/backend.h"
#include "distributed/backend_choice.h"
#include "distributed/gpu_name.h"
#include "distributed/roll_call.h"
#include "distributed/store_port.h"
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

// Who serves r's store: "the launcher" or "rank 0".
const char* store_server(const Rendezvous& r) { return r.store_hosted ? "the launcher" : "rank 0"; }

// The error of a rank that found no store at r's address within `timeout`, `why` saying what
// failed.
PeerLostError no_store(const Rendezvous& r, const std::string& where,
                       std::chrono::milliseconds timeout, const std::string& why) {
  return PeerLostError(fmt::format(
      "{} failed: no store answered within {} s ({}); {}, which serves it, failed before "
      "serving, hangs, or cannot be reached",
      where, timeout.count() / 1000.0, why, store_server(r)));
}

// A client of the store at r's address. First waits up to `options.timeout` for a connection to
// be accepted there (a c10d client of 2.x may take twice its timeout and more to give up), then
// builds the client for the address that accepted and asks it a first question on another
// thread, waited for at most `options.timeout`: c10d's client waits for an answer with no limit
// (LibTorch 2.x asks one as it is built), so a program that accepts connections on the port but
// is no store would otherwise hang the rank. When that fails or times out, one more connection
// tells a store that went away (its port no longer accepts) from another program on the port.
// Throws PeerLostError starting with `where` when no store answers; the thread, blocked, is then
// left behind.
c10::intrusive_ptr<c10d::Store> reach_store(const Rendezvous& r, c10d::TCPStoreOptions options,
                                            const std::string& where) {
  const Listener listener = await_listener(r.master_addr, r.master_port, options.timeout);
  if (listener.address.empty()) throw no_store(r, where, options.timeout, listener.why_not);
  using Reached = std::promise<c10::intrusive_ptr<c10d::Store>>;
  auto reached = std::make_shared<Reached>();
  auto answer = reached->get_future();
  std::thread([host = listener.address, options, reached] {
    try {
      c10::intrusive_ptr<c10d::Store> store = open_tcp_store(host, options);
      store->check({"crucible/answers"});
      reached->set_value(store);
    } catch (...) {
      reached->set_exception(std::current_exception());
    }
  }).detach();
  std::string failure;
  if (answer.wait_for(options.timeout) == std::future_status::ready) {
    try {
      return answer.get();
    } catch (const std::exception& e) {
      failure = first_line(e);
    }
  }
  const std::string held = fmt::format("{}:{}", r.master_addr, r.master_port);
  const Listener again =
      await_listener(listener.address, r.master_port, std::chrono::milliseconds(1000));
  if (again.address.empty()) {
    throw PeerLostError(fmt::format(
        "{} failed: {} accepted a connection, then stopped listening before the store answered "
        "({}); {}, which serves it, ended or cannot be reached",
        where, held, again.why_not, store_server(r)));
  }
  if (!failure.empty()) {
    throw PeerLostError(fmt::format(
        "{} failed: what holds {} accepted the connection, then the exchange with it failed "
        "({}); is another program on that port, not the run's rendezvous store?",
        where, held, failure));
  }
  throw PeerLostError(fmt::format(
      "{} failed: what holds {} accepted the connection but did not answer within {} s; is "
      "another program on that port, not the run's rendezvous store?",
      where, held, options.timeout.count() / 1000.0));
}

}  // namespace

DistributedContext connect(const Rendezvous& r, std::chrono::milliseconds timeout,
                           DistributedBackend backend, const std::optional<std::string>& gpu,
                           const Agreement& agreement) {
  const Topology& t = r.topology;
  if (t.size == 1) return DistributedContext();
  util::survive_broken_pipes();
  const std::string where = fmt::format("rank {}: rendezvous at {}:{} ({})", t.rank, r.master_addr,
                                        r.master_port, r.source);
  c10::intrusive_ptr<c10d::Store> store;
  // Rank 0 serves the store unless the launcher does. The store does not count the workers: the
  // roll call does, and names the ranks that do not come.
  const bool serves_store = t.rank == 0 && !r.store_hosted;
  try {
    check_store_host(r.master_addr, serves_store, "MASTER_ADDR");
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{} failed: {}", where, e.what()));
  }
  try {
    if (serves_store) check_store_port(r.master_port);
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(r.master_port);
    options.isServer = serves_store;
    options.waitWorkers = false;
    options.timeout = timeout;
    if (serves_store) {
      store = open_tcp_store(r.master_addr, options);
    } else {
      store = reach_store(r, options, where);
    }
  } catch (const PeerLostError&) {
    throw;
  } catch (const std::exception& e) {
    if (!serves_store) throw no_store(r, where, timeout, first_line(e));
    throw TrainingError(fmt::format(
        "{} failed: {}; this rank serves the store: if another process holds the port, give the "
        "run a free one (MASTER_PORT)",
        where, util::first_sentence(e)));
  }
  const std::string prefix = r.store_prefix + "crucible/";
  // Each rank announces the GPU it would run NCCL on ("" for none), for the backend's choice.
  const std::string own_gpu = backend == DistributedBackend::kGloo ? ""
                              : gpu                                ? *gpu
                              : nccl_built() ? gpu_name(rank_device(t.local_rank))
                                             : "";
  roll_call(*store, prefix, t, timeout, where, serves_store, own_gpu, agreement);
  const bool nccl = backend != DistributedBackend::kGloo &&
                    agree_on_nccl(*store, prefix, t, backend, where, serves_store);
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
  DistributedContext ctx = detail::DistributedAccess::make(
      t, std::make_shared<detail::Collectives>(store, group, cuda_group, t.rank, timeout));
  // Gloo's connecting side counts a pair as connected before its listening side has accepted
  // it: a rank that ended right after building its group would close a connection another rank
  // still has to accept, failing that rank's build. No rank returns before all have built.
  ctx.barrier();
  return ctx;
}

}  // namespace crucible::dist
