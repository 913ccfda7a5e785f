#include "distributed/backend_choice.h"

#include <thread>
#include <vector>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "distributed/backend.h"
#include "distributed/roll_call.h"
#include "distributed/store_text.h"
#include "util/error_text.h"

namespace crucible::dist {
namespace {

const std::string kRefused = "refused: ";

// Rank 0's part: every rank's GPU, as it announced it at the roll call, and the answer for them
// ("nccl", "gloo", or kRefused and why).
std::string decide(c10d::Store& store, const std::string& prefix, int64_t size,
                   DistributedBackend backend) {
  std::vector<std::string> gpus;
  for (int64_t rank = 0; rank < size; ++rank) gpus.push_back(announced(store, prefix, rank));
  try {
    return nccl_for_run(backend, gpus) ? "nccl" : "gloo";
  } catch (const UsageError& e) {
    return kRefused + e.what();
  }
}

}  // namespace

bool agree_on_nccl(c10d::Store& store, const std::string& prefix, const Topology& t,
                   DistributedBackend backend, const std::string& where, bool serves_store,
                   std::chrono::milliseconds linger) {
  const std::string answer_key = prefix + "backend";
  std::string answer;
  try {
    if (t.rank == 0) store.set(answer_key, store_bytes(decide(store, prefix, t.size, backend)));
    answer = store_text(store.get(answer_key));
  } catch (const std::exception& e) {
    throw PeerLostError(fmt::format(
        "{} failed while the ranks agreed on their backend ({}): rank 0, which decides for them, "
        "or whoever serves the store (rank 0 or the launcher) ended or cannot be reached",
        where, util::first_line(e)));
  }
  if (answer.rfind(kRefused, 0) != 0) return answer == "nccl";
  if (serves_store) std::this_thread::sleep_for(linger);
  throw UsageError(fmt::format("{}: {}", where, answer.substr(kRefused.size())));
}

}  // namespace crucible::dist
