#pragma once

namespace crucible::dist {

// Throws Error ("port PORT is taken: ...", naming the cause the kernel gave) when a rendezvous
// store could not listen on `port` because another socket listens there. It tries what a c10d
// TCPStore server does: a socket with SO_REUSEADDR bound to the IPv6 wildcard address
// (dual-stack), then to the IPv4 one; the port is taken when neither binds and one failed with
// EADDRINUSE. Any other failure is left to the store to report. Does nothing for port 0 (the
// kernel picks a free one). Checked first so that a taken port is reported in one message,
// before c10d logs its own lines about it; a port free now may still be taken before the store
// binds it, and the store then reports it.
void check_store_port(int port);

}  // namespace crucible::dist
