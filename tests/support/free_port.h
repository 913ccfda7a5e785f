#pragma once

// A free TCP port of the loopback interface, for tests and benchmarks that start servers.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace crucible::util {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released); another
// process may take it before the caller binds it. Throws std::runtime_error when no socket can be
// bound.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("free_port: cannot bind a socket on 127.0.0.1");
  return ntohs(addr.sin_port);
}

}  // namespace crucible::util
