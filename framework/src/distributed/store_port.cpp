#include "distributed/store_port.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

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

// 0 when a connection to `address` is accepted within `wait` (it is then closed), otherwise the
// errno of the step that failed (ETIMEDOUT when no reply came within `wait`).
int try_connect(const addrinfo& address, std::chrono::milliseconds wait) {
  const int fd = ::socket(address.ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int error = ::connect(fd, address.ai_addr, address.ai_addrlen) == 0 ? 0 : errno;
  if (error == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    // A signal handled meanwhile interrupts poll (never restarted): it waits on for the rest.
    const auto until = std::chrono::steady_clock::now() + wait;
    int ready;
    do {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      ready = ::poll(&p, 1, static_cast<int>(std::max(left.count(), int64_t{0})));
    } while (ready < 0 && errno == EINTR);
    if (ready == 1) {
      socklen_t size = sizeof(error);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
    } else {
      error = ready == 0 ? ETIMEDOUT : errno;
    }
  }
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

Listener await_listener(const std::string& host, int port, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  const auto deadline = Clock::now() + timeout;
  const auto left = [&] {
    return std::max(milliseconds(0),
                    std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
  };
  Listener out;
  out.why_not = "no attempt within the timeout";
  const std::string service = std::to_string(port);
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> found(nullptr, ::freeaddrinfo);
  while (left().count() > 0) {
    if (!found) {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* list = nullptr;
      const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
      if (rc != 0) {
        out.why_not = fmt::format("the name does not resolve ({})", ::gai_strerror(rc));
        std::this_thread::sleep_for(std::min(left(), milliseconds(1000)));
        continue;
      }
      found.reset(list);
    }
    for (const addrinfo* a = found.get(); a && left().count() > 0; a = a->ai_next) {
      // A bounded wait per address, so that one that drops packets leaves time for the others.
      const int error = try_connect(*a, std::min(left(), milliseconds(2000)));
      if (error == 0) {
        char text[NI_MAXHOST];
        if (::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text), nullptr, 0,
                          NI_NUMERICHOST) != 0) {
          return {host, ""};
        }
        return {std::string(text), ""};
      }
      out.why_not =
          error == ETIMEDOUT ? "no reply to the connection request" : std::strerror(error);
    }
    std::this_thread::sleep_for(std::min(left(), milliseconds(100)));
  }
  return out;
}

}  // namespace crucible::dist
