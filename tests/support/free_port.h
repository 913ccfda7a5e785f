#pragma once

// A free TCP port of the loopback interface, for tests and benchmarks that start servers.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>

namespace crucible::util {

// Binds a TCP socket to 127.0.0.1:`port` (0: a port of the kernel's choice) and releases it.
// Returns the port it was bound to, or -1 when it could not be bound.
inline int bind_and_release(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  return ok ? ntohs(addr.sin_port) : -1;
}

// A TCP port on 127.0.0.1 that was free a moment ago; another listener may take it before the
// caller binds it. It lies below the kernel's ephemeral range (net.ipv4.ip_local_port_range,
// where every outgoing connection on the machine takes its source port), from 20000 up, so that
// no connection can take it meanwhile; where that range starts below 21000, it is the kernel's
// choice instead. Throws std::runtime_error when no socket can be bound.
inline int free_port() {
  int ephemeral_low = 32768;
  {
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    int low = 0, high = 0;
    if (range >> low >> high) ephemeral_low = low;
  }
  constexpr int kFirst = 20000;
  if (ephemeral_low - kFirst >= 1000) {
    std::mt19937 pick(std::random_device{}() ^ static_cast<uint32_t>(::getpid()));
    std::uniform_int_distribution<int> port(kFirst, ephemeral_low - 1);
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int p = port(pick);
      if (bind_and_release(p) == p) return p;
    }
  }
  const int p = bind_and_release(0);
  if (p < 0) throw std::runtime_error("free_port: cannot bind a socket on 127.0.0.1");
  return p;
}

}  // namespace crucible::util
