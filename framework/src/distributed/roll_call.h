#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <string>

#include <crucible/distributed.h>

namespace crucible::dist {

// What every rank of a run must have been started with, compared at the roll call.
struct Agreement {
  // Equal on every rank; "" on every rank compares nothing.
  std::string text;
  // How another rank's `theirs` differs from this rank's text, as changes from theirs to this
  // one's, for the error; the default names the first line that differs (first_difference).
  std::function<std::string(const std::string& theirs)> describe;
};

// The roll call that starts a run, before its process groups are built: every rank announces
// itself on `store` (keys under `prefix`, which must be fresh for each attempt of the run), with
// `announcement` for the others to read (announced()), and waits until all t.size ranks have,
// so that a rank that never comes is named instead of being left to a socket timeout inside
// Gloo.
//
// Each rank is compared on arrival with the first rank to come: a rank whose world size or
// `agreement` text differs, or a second process of the same rank, fails the roll call at once,
// and every rank throws UsageError naming the rank, the first one and the difference (a
// mismatched rank that came after every rank of the first one's world throws alone).
//
// Returns once every rank has come. When `timeout` passes first, the first rank to notice closes
// the roll call and records which ranks had not come; then every rank, including any that comes
// later, throws PeerLostError starting with `where` and naming them and the timeout. A rank
// that `serves_store` keeps serving for `linger` after learning of the failure, so that the
// others can read the record before the store goes. A store that stops answering is a
// PeerLostError too.
void roll_call(c10d::Store& store, const std::string& prefix, const Topology& t,
               std::chrono::milliseconds timeout, const std::string& where, bool serves_store,
               const std::string& announcement = "", const Agreement& agreement = {},
               std::chrono::milliseconds linger = std::chrono::seconds(2));

// Where two texts first differ, as "line N: 'THEIRS' -> 'MINE'": an Agreement's default
// description.
std::string first_difference(const std::string& theirs, const std::string& mine);

// What rank `rank` announced at the roll call under `prefix`. Requires that roll call to have
// returned (every rank came). Throws what the store throws.
std::string announced(c10d::Store& store, const std::string& prefix, int64_t rank);

}  // namespace crucible::dist
