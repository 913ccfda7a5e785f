#pragma once

#include <chrono>
#include <string>

namespace crucible::dist {

// Throws UsageError, naming `host` as `what` gave it ("--master-addr", "MASTER_ADDR"), when
// `host` does not resolve (a resolver that fails for now, EAI_AGAIN, is not refused), or when
// this process is to serve the store (`serving`) and none of its addresses is this machine's (no
// socket binds to one). c10d would otherwise retry the name, or connect to an address nothing
// serves, until its timeout: a rank's is the run's, the built-in launcher's store c10d's default
// of 300 s.
void check_store_host(const std::string& host, bool serving, const std::string& what);

// Throws Error ("the port is taken (Address already in use)") when a rendezvous store could not
// serve on `port` because another socket holds it. It binds what a c10d TCPStore server binds,
// each with SO_REUSEADDR: the IPv6 wildcard address (dual-stack), then the IPv4 one; the port is
// taken when neither binds and one failed with EADDRINUSE. It never listens, so a peer that
// already polls the port cannot connect to it. Any other failure is left to the store to report.
// Does nothing for port 0 (the kernel picks a free one). Checked first so that a taken port is
// reported in one message, before c10d logs its own lines about it; a port free now may still be
// taken before the store binds it, and the store then reports it.
void check_store_port(int port);

// What await_listener found: the numeric address (as getnameinfo writes it) of the first address
// that accepted a connection, or "" and why none did.
struct Listener {
  std::string address;
  std::string why_not;
};

// Connects to `host`:`port` (each address the name resolves to in turn, again and again, 100 ms
// apart; the name is resolved once, again only after a failed lookup, 1 s apart) until an address
// accepts a connection, which it closes at once without sending anything, or until `timeout` has
// passed. why_not says why the last attempt failed ("Connection refused", "no reply to the
// connection request", "the name does not resolve (...)"). It waits no more than `timeout`, plus
// the time one lookup of the name takes, whereas a c10d TCPStore client of LibTorch 2.x, once its
// connection timed out, may sleep and try once more for the whole timeout again.
Listener await_listener(const std::string& host, int port, std::chrono::milliseconds timeout);

}  // namespace crucible::dist
