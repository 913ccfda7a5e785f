#pragma once

// The machine's and this process's use of CPU, memory, storage and network, from Linux's /proc.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <crucible/metrics.h>

namespace crucible::profile {

// Cumulative counters read at one moment. A counter the system does not expose (no /proc/self/io
// in some containers, say) is nullopt.
struct SystemCounters {
  std::chrono::steady_clock::time_point at;
  std::optional<std::pair<double, double>> machine_ticks;  // busy and total, /proc/stat's cpu line
  double process_cpu_seconds = 0;         // user + system time of every thread (getrusage)
  std::optional<double> rss_bytes;        // /proc/self/status VmRSS
  std::optional<double> peak_rss_bytes;   // /proc/self/status VmHWM
  std::optional<double> available_bytes;  // /proc/meminfo MemAvailable
  std::optional<double> storage_read_bytes, storage_written_bytes;  // /proc/self/io
  std::optional<double> received_bytes, sent_bytes;  // /proc/net/dev, all but loopback
};

// The machine's CPU ticks (of all its CPUs together) that cpu_percent needs between two readings:
// half a second of a 2-core machine, 1/32 s of a 16-core one.
inline constexpr double kLeastMachineTicks = 100;

// Reads every counter now.
SystemCounters read_system_counters();

// The use between two readings (`to` taken after `from`), as metric values:
//   cpu_percent               the machine's CPUs busy, 0..100 of all of them
//   process_cpu_percent       this process's CPU time over the wall time; 100 = one core
//   process_memory_gb         resident memory at `to` (GB = 1e9 bytes)
//   process_peak_memory_gb    the most resident memory so far
//   available_memory_gb       the machine's MemAvailable at `to`
//   storage_read_mb_per_s, storage_write_mb_per_s     this process's storage traffic
//   network_received_mb_per_s, network_sent_mb_per_s  the machine's, without loopback
// A value whose counters either reading lacks is left out, and so are the rates when no time
// passed, and cpu_percent when the readings are fewer than kLeastMachineTicks of /proc/stat's
// ticks apart (its 1/100 s ticks cannot measure a shorter window: it would read 0 or 100).
MetricValues system_usage(const SystemCounters& from, const SystemCounters& to);

// The parsers read_system_counters uses, on the text of the files they read.
// /proc/stat: the busy (all but idle and iowait) and total ticks of its aggregate "cpu" line.
std::optional<std::pair<double, double>> parse_proc_stat(const std::string& text);
// The number after "`field`:" on its own line of /proc/self/status, /proc/meminfo or
// /proc/self/io, in bytes (a "kB" after it multiplies by 1024).
std::optional<double> parse_field(const std::string& text, const std::string& field);
// /proc/net/dev: received and sent bytes summed over every interface that `is_loopback` does not
// name (0 and 0 when only loopback ones are listed); nullopt when the text lists no interface.
std::optional<std::pair<double, double>> parse_net_dev(
    const std::string& text, const std::function<bool(const std::string&)>& is_loopback);
// Whether network interface `name` is a loopback one: "lo", or one whose
// /sys/class/net/<name>/flags has IFF_LOOPBACK.
bool is_loopback_interface(const std::string& name);

}  // namespace crucible::profile
