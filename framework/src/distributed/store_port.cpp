#include "distributed/store_port.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::dist {

namespace {

// 0 when a socket of `family` with SO_REUSEADDR binds `port` on the wildcard address (it is closed
// again without listening), otherwise the errno of the step that failed.
int try_listen(int family, int port) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int on = 1, off = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  int rc;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  }
  const int error = rc == 0 ? 0 : errno;
  ::close(fd);
  return error;
}

}  // namespace

void check_store_host(const std::string& host, bool serving, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc == EAI_AGAIN) return;  // the resolver may answer later: c10d retries until its timeout
  if (rc != 0) {
    throw UsageError(fmt::format("{} {}: the name does not resolve ({}){}", what, host,
                                 ::gai_strerror(rc),
                                 serving ? "; give this machine's name or address"
                                         : "; give the name or address of the machine that "
                                           "serves the rendezvous (node 0)"));
  }
  bool own = false;
  for (const addrinfo* a = found; a && serving && !own; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage address{};
    std::memcpy(&address, a->ai_addr, a->ai_addrlen);
    if (address.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(address).sin_port = 0;
    if (address.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(address).sin6_port = 0;
    own = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), a->ai_addrlen) == 0;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (serving && !own) {
    throw UsageError(fmt::format(
        "{} {}: not an address of this machine, which serves the rendezvous store: give node "
        "0's own name or address, one that every node reaches",
        what, host));
  }
}

void check_store_port(int port) {
  if (port == 0) return;
  const int v6 = try_listen(AF_INET6, port);
  if (v6 == 0) return;
  const int v4 = try_listen(AF_INET, port);
  if (v4 == 0) return;
  if (v6 != EADDRINUSE && v4 != EADDRINUSE) return;
  throw Error(fmt::format("the port is taken ({})", std::strerror(EADDRINUSE)));
}

}  // namespace crucible::dist
