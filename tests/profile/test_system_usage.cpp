// The profiler's system use: /proc's files parsed, a real interval of this process measured, and
// the interval a profiling row covers.
#include <arpa/inet.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "catch.h"

#include "process.h"
#include "profile/profiler.h"
#include "profile/system_usage.h"

using namespace crucible::profile;
using crucible::testing::TempDir;

namespace {

// Keeps this thread's core busy with arithmetic for `duration`.
void keep_busy(std::chrono::milliseconds duration) {
  volatile double sink = 0;
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 10000; ++i) sink = sink + i * 0.5;
  }
}

}  // namespace

TEST_CASE("/proc's counters are parsed from their files' text", "[profile]") {
  const auto ticks = parse_proc_stat(
      "cpu  100 5 45 800 50 0 0 0 0 0\ncpu0 50 2 20 400 25 0 0 0 0 0\nintr 1 2 3\n");
  REQUIRE(ticks);
  CHECK(ticks->first == 150);    // user + nice + system
  CHECK(ticks->second == 1000);  // with idle and iowait
  CHECK_FALSE(parse_proc_stat("intr 1 2 3\n"));

  const std::string status = "Name:\ttrainer\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nVmRSSX: 7\n";
  CHECK(parse_field(status, "VmRSS") == 1024.0 * 1024);
  CHECK(parse_field(status, "VmHWM") == 2048.0 * 1024);
  CHECK_FALSE(parse_field(status, "VmSwap"));
  CHECK(parse_field("rchar: 10\nread_bytes: 4096\nwrite_bytes: 0\n", "read_bytes") == 4096.0);

  const std::string net_dev =
      "Inter-|   Receive                                                |  Transmit\n"
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
      "drop fifo colls carrier compressed\n"
      "    lo:    3000      29    0    0    0     0          0         0     3000      29    0    "
      "0    0     0       0          0\n"
      "  eth0:12000     100    0    0    0     0          0         0      500       9    0    0 "
      "   0     0       0          0\n";
  const auto net = parse_net_dev(net_dev, is_loopback_interface);
  REQUIRE(net);
  CHECK(net->first == 12000);  // eth0's: loopback traffic never leaves the machine
  CHECK(net->second == 500);
  const auto none = parse_net_dev(net_dev, [](const std::string&) { return true; });
  REQUIRE(none);
  CHECK(none->first == 0);
  CHECK(none->second == 0);
  CHECK_FALSE(parse_net_dev("Inter-|\n face |\n", is_loopback_interface));
  CHECK(is_loopback_interface("lo"));
  CHECK_FALSE(is_loopback_interface("crucible-no-such-interface"));
}

TEST_CASE("traffic over loopback is not the machine's network traffic", "[profile]") {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&address), length) == 0);
  REQUIRE(listen(listener, 1) == 0);
  REQUIRE(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const int sender = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(connect(sender, reinterpret_cast<sockaddr*>(&address), length) == 0);
  const int receiver = accept(listener, nullptr, nullptr);
  REQUIRE(receiver >= 0);

  // 64 MB through 127.0.0.1, which /proc/net/dev counts on lo, sent and received.
  constexpr size_t kBytes = 64 << 20;
  const SystemCounters before = read_system_counters();
  std::thread send_all([&] {
    const std::vector<char> block(1 << 20, 'x');
    for (size_t sent = 0; sent < kBytes;) {
      const ssize_t n = send(sender, block.data(), std::min(block.size(), kBytes - sent), 0);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    shutdown(sender, SHUT_WR);
  });
  std::vector<char> buffer(1 << 20);
  size_t received = 0;
  for (ssize_t n; (n = recv(receiver, buffer.data(), buffer.size(), 0)) > 0;) {
    received += static_cast<size_t>(n);
  }
  send_all.join();
  const SystemCounters after = read_system_counters();
  for (const int fd : {sender, receiver, listener}) close(fd);
  REQUIRE(received == kBytes);

  REQUIRE(before.sent_bytes);
  REQUIRE(after.sent_bytes);
  // What the rest of the machine sent and received meanwhile, well under 32 MB.
  CHECK(*after.sent_bytes - *before.sent_bytes < kBytes / 2);
  CHECK(*after.received_bytes - *before.received_bytes < kBytes / 2);
}

TEST_CASE("the machine's CPU share is measured over enough of its ticks, else left out",
          "[profile]") {
  SystemCounters from, to;
  from.machine_ticks = {1000, 4000};
  to.machine_ticks = {1000 + 30, 4000 + crucible::profile::kLeastMachineTicks - 1};
  CHECK(system_usage(from, to).count("cpu_percent") == 0);
  to.machine_ticks = {1000 + 25, 4000 + crucible::profile::kLeastMachineTicks};
  CHECK(system_usage(from, to).at("cpu_percent") == 25);
}

TEST_CASE("a busy interval of this process shows as CPU, memory and storage use", "[profile]") {
  TempDir tmp;
  const SystemCounters before = read_system_counters();
  // 0.6 s of one thread's arithmetic (enough of the machine's ticks for its CPU share on 2 cores),
  // 200 MB touched, 32 MB written and synced to disk.
  keep_busy(std::chrono::milliseconds(600));
  std::vector<char> memory(200'000'000, 1);
  const std::vector<char> block(32 << 20, 'x');
  FILE* file = std::fopen((tmp / "written").c_str(), "wb");
  REQUIRE(file);
  REQUIRE(std::fwrite(block.data(), 1, block.size(), file) == block.size());
  REQUIRE(fsync(fileno(file)) == 0);
  std::fclose(file);
  const SystemCounters after = read_system_counters();
  const auto usage = system_usage(before, after);
  INFO("memory[12345] " << int(memory[12345]));
  for (const char* name :
       {"cpu_percent", "process_cpu_percent", "process_memory_gb", "process_peak_memory_gb",
        "available_memory_gb", "storage_write_mb_per_s", "network_sent_mb_per_s"}) {
    INFO(name);
    CHECK(usage.count(name) == 1);
  }
  CHECK(usage.at("process_cpu_percent") > 50);
  CHECK(usage.at("cpu_percent") > 0);
  CHECK(usage.at("cpu_percent") <= 100);
  CHECK(usage.at("process_memory_gb") > 0.2);
  CHECK(usage.at("process_peak_memory_gb") >= usage.at("process_memory_gb"));
  // 32 MB over well under 10 s, where the file system stores to a device; a tmpfs (Debian 13's
  // test root mounts one on /tmp) stores nothing.
  struct statfs fs {};
  REQUIRE(statfs(tmp.path().c_str(), &fs) == 0);
  if (fs.f_type == TMPFS_MAGIC) {
    CHECK(usage.at("storage_write_mb_per_s") < 1);
  } else {
    CHECK(usage.at("storage_write_mb_per_s") > 3);
  }
  CHECK(usage.at("available_memory_gb") > 0);
}

TEST_CASE("a profiling row's system use covers its profiled batches, not the busy ones after them",
          "[profile]") {
  // Batches 0 and 1 are profiled and idle (150 ms asleep each); 2 and 3, after the window and
  // before the report, keep one core busy for 300 ms each. Counted to the report, the process
  // would use about 67% of a core.
  crucible::ProfilingConfig config;
  config.enabled = true;
  config.end_after_batch = 1;
  const crucible::DistributedContext one_process;
  Profiler profiler(config, torch::Device(torch::kCPU), one_process, "",
                    [](const std::string& warning) { FAIL(warning); });
  for (int64_t batch = 0; batch < 4; ++batch) {
    profiler.begin_batch(batch);
    if (profiler.active()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    } else {
      keep_busy(std::chrono::milliseconds(300));
    }
    profiler.end_batch();
  }
  const auto row = profiler.take_period();
  INFO(row.size() << " values");
  REQUIRE(row.count("batch_ms") == 1);
  CHECK(row.at("batch_ms") >= 150);
  REQUIRE(row.count("process_cpu_percent") == 1);
  CHECK(row.at("process_cpu_percent") < 25);
}
