// The profiler's system use: /proc's files parsed, and a real interval of this process measured.
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "catch.h"

#include "process.h"
#include "profile/system_usage.h"

using namespace crucible::profile;
using crucible::testing::TempDir;

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

  const auto net = parse_net_dev(
      "Inter-|   Receive                                                |  Transmit\n"
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
      "drop fifo colls carrier compressed\n"
      "    lo:    3000      29    0    0    0     0          0         0     3000      29    0    "
      "0    0     0       0          0\n"
      "  eth0:12000     100    0    0    0     0          0         0      500       9    0    0 "
      "   0     0       0          0\n");
  REQUIRE(net);
  CHECK(net->first == 15000);
  CHECK(net->second == 3500);
  CHECK_FALSE(parse_net_dev("Inter-|\n face |\n"));
}

TEST_CASE("a busy interval of this process shows as CPU, memory and storage use", "[profile]") {
  TempDir tmp;
  const SystemCounters before = read_system_counters();
  // 0.3 s of one thread's arithmetic, 200 MB touched, 32 MB written and synced to disk.
  volatile double sink = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 10000; ++i) sink = sink + i * 0.5;
  }
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
