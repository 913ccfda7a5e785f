#include "profile/system_usage.h"

#include <net/if.h>
#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace crucible::profile {
namespace {

std::string read_proc(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

double seconds_of(const timeval& t) {
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
}

// `b - a` for counters both readings have.
std::optional<double> delta(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b) return std::nullopt;
  return *b - *a;
}

}  // namespace

std::optional<std::pair<double, double>> parse_proc_stat(const std::string& text) {
  std::istringstream in(text);
  std::string label;
  if (!(in >> label) || label != "cpu") return std::nullopt;
  // user nice system idle iowait irq softirq steal (guest and guest_nice are inside user/nice).
  double ticks[8] = {};
  int read = 0;
  while (read < 8 && in >> ticks[read]) ++read;
  if (read < 4) return std::nullopt;
  double total = 0;
  for (int i = 0; i < read; ++i) total += ticks[i];
  const double idle = ticks[3] + (read > 4 ? ticks[4] : 0);
  return std::make_pair(total - idle, total);
}

std::optional<double> parse_field(const std::string& text, const std::string& field) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, field.size(), field) != 0 || line.size() <= field.size() ||
        line[field.size()] != ':') {
      continue;
    }
    std::istringstream rest(line.substr(field.size() + 1));
    double value = 0;
    std::string unit;
    if (!(rest >> value)) return std::nullopt;
    rest >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

std::optional<std::pair<double, double>> parse_net_dev(
    const std::string& text, const std::function<bool(const std::string&)>& is_loopback) {
  std::istringstream in(text);
  double received = 0, sent = 0;
  bool any = false;
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;  // the two header lines
    std::istringstream fields(line.substr(colon + 1));
    // Receive: bytes packets errs drop fifo frame compressed multicast; then Transmit: bytes ...
    double values[9] = {};
    int read = 0;
    while (read < 9 && fields >> values[read]) ++read;
    if (read < 9) continue;
    any = true;
    std::string name;
    std::istringstream(line.substr(0, colon)) >> name;
    if (is_loopback(name)) continue;
    received += values[0];
    sent += values[8];
  }
  if (!any) return std::nullopt;
  return std::make_pair(received, sent);
}

bool is_loopback_interface(const std::string& name) {
  if (name == "lo") return true;
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') return false;
  const std::string flags = read_proc(("/sys/class/net/" + name + "/flags").c_str());
  return (std::strtoul(flags.c_str(), nullptr, 0) & IFF_LOOPBACK) != 0;
}

SystemCounters read_system_counters() {
  SystemCounters c;
  c.at = std::chrono::steady_clock::now();
  c.machine_ticks = parse_proc_stat(read_proc("/proc/stat"));
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    c.process_cpu_seconds = seconds_of(usage.ru_utime) + seconds_of(usage.ru_stime);
  }
  const std::string status = read_proc("/proc/self/status");
  c.rss_bytes = parse_field(status, "VmRSS");
  c.peak_rss_bytes = parse_field(status, "VmHWM");
  c.available_bytes = parse_field(read_proc("/proc/meminfo"), "MemAvailable");
  const std::string io = read_proc("/proc/self/io");
  c.storage_read_bytes = parse_field(io, "read_bytes");
  c.storage_written_bytes = parse_field(io, "write_bytes");
  if (const auto net = parse_net_dev(read_proc("/proc/net/dev"), is_loopback_interface)) {
    c.received_bytes = net->first;
    c.sent_bytes = net->second;
  }
  return c;
}

MetricValues system_usage(const SystemCounters& from, const SystemCounters& to) {
  MetricValues out;
  if (from.machine_ticks && to.machine_ticks) {
    const double total = to.machine_ticks->second - from.machine_ticks->second;
    if (total >= kLeastMachineTicks) {
      out["cpu_percent"] = 100 * (to.machine_ticks->first - from.machine_ticks->first) / total;
    }
  }
  if (to.rss_bytes) out["process_memory_gb"] = *to.rss_bytes / 1e9;
  if (to.peak_rss_bytes) out["process_peak_memory_gb"] = *to.peak_rss_bytes / 1e9;
  if (to.available_bytes) out["available_memory_gb"] = *to.available_bytes / 1e9;
  const double seconds = std::chrono::duration<double>(to.at - from.at).count();
  if (!(seconds > 0)) return out;
  out["process_cpu_percent"] = 100 * (to.process_cpu_seconds - from.process_cpu_seconds) / seconds;
  const auto rate = [&](const char* name, const std::optional<double>& bytes) {
    if (bytes) out[name] = *bytes / 1e6 / seconds;
  };
  rate("storage_read_mb_per_s", delta(from.storage_read_bytes, to.storage_read_bytes));
  rate("storage_write_mb_per_s", delta(from.storage_written_bytes, to.storage_written_bytes));
  rate("network_received_mb_per_s", delta(from.received_bytes, to.received_bytes));
  rate("network_sent_mb_per_s", delta(from.sent_bytes, to.sent_bytes));
  return out;
}

}  // namespace crucible::profile
