#pragma once

// The built-in launcher: N worker processes on this node, their output prefixed with their rank,
// supervised so that one failure stops them all.

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace crucible::launch {

struct LaunchOptions {
  // The worker command: program path and arguments. Each worker also gets torchrun's variables
  // (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR,
  // MASTER_PORT) and CRUCIBLE_STORE_HOSTED=1; and, unless this process's environment sets it,
  // OMP_NUM_THREADS = max(1, cores / slots), so that the workers' threads share the cores.
  TORCH_ARG(std::vector<std::string>, command);
  TORCH_ARG(int64_t, slots) = 1;      // workers on this node
  TORCH_ARG(int64_t, nnodes) = 1;     // nodes of the run, each with its own launcher
  TORCH_ARG(int64_t, node_rank) = 0;  // this node; node 0's launcher serves the rendezvous store
  TORCH_ARG(std::string, master_addr) = "127.0.0.1";
  TORCH_ARG(int, master_port) = 0;  // 0: node 0 picks a free one (only with nnodes 1)
  // After the first failure, how long the other workers get between SIGTERM and SIGKILL.
  TORCH_ARG(std::chrono::milliseconds, grace) = std::chrono::milliseconds(10000);
  // true: rank 0's stdout lines pass through without the "[rank R] " prefix (its stderr and the
  // other ranks' output keep it), for a result that rank 0 alone prints and that must stay
  // parseable.
  TORCH_ARG(bool, plain_rank0_stdout) = false;
  // Lines of each worker's output kept for the failure report.
  TORCH_ARG(size_t, tail_lines) = 20;
};

struct LaunchResult {
  // 0 when every worker exited 0; 4 when every worker exited 0 or 4 (stopped by a signal after
  // a checkpoint); 128 + signal when a stop signal that the launcher passed on ended a worker
  // before it handled it (as it started, or in an evaluation), the others ending as above or by
  // giving up on their peers; otherwise the first failed worker's exit code, or 128 + signal. A
  // worker ended by a signal passed on is not a failed one.
  int exit_code = 0;
  // Empty on success; names the ranks a signal passed on ended, when it did; otherwise names the
  // first failed worker's rank and exit status, with the tail of its output, preceded by the
  // ranks that stopped responding when every failure was a rank giving up on its peers (a hung
  // rank).
  std::string failure;
};

// Serves a rendezvous store (a c10d TCPStore) at host:port, port 0 picking a free one (getPort()
// tells which). Workers started with CRUCIBLE_STORE_HOSTED=1 connect to it as clients. Throws
// crucible::Error naming the address when it cannot be served. A worker that goes away while the
// store answers it must not kill this process (the libuv server writes without MSG_NOSIGNAL):
// SIGPIPE is made harmless first (util::survive_broken_pipes).
c10::intrusive_ptr<c10d::TCPStore> serve_store(const std::string& host, int port);

// Serves the rendezvous store (node 0), starts `slots` workers, writes each line of their stdout
// to `out` and of their stderr to `err` prefixed with "[rank R] " (but rank 0's stdout with
// plain_rank0_stdout), and waits for them. When one
// exits non-zero or is killed, the others get a second to fail too (the failure reported is then
// one that was not caused by a lost peer), then SIGTERM and, after `grace`, SIGKILL. SIGTERM,
// SIGUSR1, SIGINT and SIGHUP sent to the launcher are forwarded to every worker (SIGHUP stays
// ignored when the launcher started with it ignored, and so do the workers). When the reader of
// `out` or `err` went away (a write fails with EPIPE: SIGPIPE is made harmless first,
// util::survive_broken_pipes; or, where they are this process's stdout and stderr, poll finds
// it first), the workers' pipes of that stream are closed, so that each rank finds its own
// console closed: the ranks that train stop at the same batch with a checkpoint, and the cause
// goes to the stream still open. Another write error loses that line only. Workers run in
// their own process group and die with the launcher (PR_SET_PDEATHSIG): none is ever left
// behind. Throws crucible::Error when a worker cannot be started or the store cannot be served.
LaunchResult launch(const LaunchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace crucible::launch
