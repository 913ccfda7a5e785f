#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include <crucible/distributed.h>

namespace crucible::dist {

// The roll call that starts a run, before its process groups are built: every rank announces
// itself on `store` (keys under `prefix`, which must be fresh for each attempt of the run), with
// `announcement` for the others to read (announced()), and waits until all t.size ranks have,
// so that a rank that never comes is named instead of being left to a socket timeout inside
// Gloo.
//
// Returns once every rank has come. When `timeout` passes first, the first rank to notice closes
// the roll call and records which ranks had not come; then every rank, including any that comes
// later, throws PeerLostError starting with `where` and naming them and the timeout. A rank
// that `serves_store` keeps serving for `linger` after learning of the failure, so that the
// others can read the record before the store goes. A store that stops answering is a
// PeerLostError too.
void roll_call(c10d::Store& store, const std::string& prefix, const Topology& t,
               std::chrono::milliseconds timeout, const std::string& where, bool serves_store,
               const std::string& announcement = "",
               std::chrono::milliseconds linger = std::chrono::seconds(2));

// What rank `rank` announced at the roll call under `prefix`. Requires that roll call to have
// returned (every rank came). Throws what the store throws.
std::string announced(c10d::Store& store, const std::string& prefix, int64_t rank);

}  // namespace crucible::dist
