#pragma once

// Commands run under fault_injection.cpp's LD_PRELOAD library, and the calls it traced.

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "catch.h"
#include "process.h"

namespace crucible::testing {

// Which file-system calls under a directory fail, as fault_injection.cpp's variables say.
struct Fault {
  std::string kinds;  // CRUCIBLE_FAULT_OPS: comma-separated kinds of call that count
  int error = ENOSPC;
  bool sticky = false;  // every counted call after the failing one fails too
  int64_t at = 0;       // the counted call that fails (1-based); 0: count and trace only
};

// A disk that fills up: from one call on, everything that would take space fails.
inline Fault full_disk() { return {"create,write,fsync,mkdir,rename,truncate", ENOSPC, true}; }

// Storage that fails one read, open or deletion with an I/O error (full_disk covers the writes).
inline Fault io_error() { return {"open,read,unlink", EIO, false}; }

// Storage that fails one look-up (stat, lstat, fstatat of a path) with an I/O error.
inline Fault stat_error() { return {"stat", EIO, false}; }

#ifdef CRUCIBLE_BIN_DIR
// `command` (a program and its arguments) prefixed with the variables that run it under the
// library, faulting `fault` on calls under `dir` and tracing every counted call to `trace`.
inline std::string with_faults(const std::string& command, const std::string& dir,
                               const Fault& fault, const std::string& trace) {
  return "CRUCIBLE_FAULT_DIR='" + dir + "' CRUCIBLE_FAULT_OPS=" + fault.kinds +
         " CRUCIBLE_FAULT_AT=" + std::to_string(fault.at) +
         " CRUCIBLE_FAULT_ERRNO=" + std::to_string(fault.error) +
         " CRUCIBLE_FAULT_STICKY=" + (fault.sticky ? "1" : "0") + " CRUCIBLE_FAULT_TRACE='" +
         trace + "' ASAN_OPTIONS=\"$ASAN_OPTIONS:verify_asan_link_order=0\" LD_PRELOAD='" +
         CRUCIBLE_BIN_DIR + "/libcrucible_fault_injection.so' " + command;
}
#endif

struct TracedCall {
  int64_t number = 0;
  std::string kind;
  std::string path;
  bool failed = false;
};

// The calls a trace file lists, in order.
inline std::vector<TracedCall> read_trace(const std::string& path) {
  std::vector<TracedCall> calls;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    TracedCall call;
    std::string flag;
    fields >> call.number >> call.kind >> call.path >> flag;
    call.failed = flag == "FAIL";
    calls.push_back(call);
  }
  return calls;
}

// The call that failed in `trace`, "KIND PATH" ("" when none did).
inline std::string failed_call(const std::string& trace) {
  for (const TracedCall& call : read_trace(trace)) {
    if (call.failed) return call.kind + " " + call.path;
  }
  return "";
}

// The number of the first call at each site of `calls`, in order: a site is a kind of call on a
// path whose digit runs are taken as one (the 10 checkpoint directories are one site, and so
// are a file's 200 writes). With `last_too`, each site's last call as well.
inline std::vector<int64_t> one_call_per_site(const std::vector<TracedCall>& calls, bool last_too) {
  static const std::regex digits("[0-9]+");
  std::map<std::string, std::pair<int64_t, int64_t>> sites;
  for (const TracedCall& call : calls) {
    const std::string site = call.kind + " " + std::regex_replace(call.path, digits, "#");
    auto [it, fresh] = sites.try_emplace(site, call.number, call.number);
    if (!fresh) it->second.second = call.number;
  }
  std::vector<int64_t> out;
  for (const auto& [site, numbers] : sites) {
    out.push_back(numbers.first);
    if (last_too && numbers.second != numbers.first) out.push_back(numbers.second);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Requires what a process that met `fault` in directory `dir` must have done: exit 1 or 2 with an
// error naming the cause and a path in `dir`, or exit 0 after a warning naming the cause (on the
// console or in `log`); no crash either way.
inline void check_fault_outcome(const CommandResult& r, const std::string& dir, const Fault& fault,
                                const std::string& log) {
  const std::string cause = std::strerror(fault.error);
  CHECK(r.output.find("terminate called") == std::string::npos);
  if (r.exit_code == 0) {
    CHECK_THAT(r.output + read_file(log), Catch::Contains(cause));
  } else {
    CHECK((r.exit_code == 1 || r.exit_code == 2));
    CHECK_THAT(r.output,
               Catch::Contains("error: ") && Catch::Contains(cause) && Catch::Contains(dir));
  }
}

#ifdef CRUCIBLE_BIN_DIR
// For one call at each site of `calls` (a traced run of the same process): makes a fresh
// directory `parent`/fault-<call> with prepare(dir), runs command(dir) with that call failing as
// `fault` says, and hands the result to check(dir, result). Requires at least `min_sites` sites.
template <typename Prepare, typename Command, typename Check>
void fault_each_site(const std::vector<TracedCall>& calls, Fault fault, size_t min_sites,
                     const std::string& parent, const Prepare& prepare, const Command& command,
                     const Check& check) {
  const std::vector<int64_t> sites = one_call_per_site(calls, false);
  CHECK(sites.size() >= min_sites);
  for (const int64_t at : sites) {
    const std::string dir = parent + "/fault-" + std::to_string(at);
    const std::string trace = dir + ".trace";
    prepare(dir);
    fault.at = at;
    const CommandResult r = run_command(with_faults(command(dir), dir, fault, trace));
    INFO("fault at call " << at << ": " << failed_call(trace));
    INFO(r.output);
    check(dir, r);
    util::try_remove_all(dir);
  }
}

// `text` with every occurrence of `from` replaced by `to`.
inline std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

// Faults `fault` at one call of each site (at least `min_sites`) of command(dir), a command that
// reads `dir`/run, a copy of run directory `source`, and writes the one file `dir`/`output`; the
// fault directory is `dir`, a fresh `parent`/fault-<call>. Requires of each: the outcome
// check_fault_outcome names (a command that goes on names the cause on the console or in its
// output: a report shows an unreadable file as such); no temporary file beside the output; a
// rerun without the fault that writes what the unfaulted run wrote (with `dir` in place of its
// own directory); and, where the faulted command failed but left the output, the same bytes as
// the rerun's (whole, never part).
template <typename Command>
void fault_single_output(const std::string& source, const std::string& parent, const Fault& fault,
                         size_t min_sites, const std::string& output, const Command& command) {
  const auto prepare = [&](const std::string& dir) {
    util::create_directories(dir);
    copy_tree(source, dir + "/run");
  };
  const std::string traced = parent + "/traced";
  prepare(traced);
  const auto unfaulted =
      run_command(with_faults(command(traced), traced, Fault{fault.kinds}, traced + ".trace"));
  INFO(unfaulted.output);
  REQUIRE(unfaulted.exit_code == 0);
  const std::string expected = read_file(traced + "/" + output);
  REQUIRE(!expected.empty());
  fault_each_site(read_trace(traced + ".trace"), fault, min_sites, parent, prepare, command,
                  [&](const std::string& dir, const CommandResult& r) {
                    const std::string path = dir + "/" + output;
                    check_fault_outcome(r, dir, fault, path);
                    // A failed fsync of the directory after the rename leaves the output whole.
                    const bool left = util::exists(path);
                    const std::string was = left ? read_file(path) : "";
                    CHECK_FALSE(util::exists(path + ".tmp"));
                    const auto again = run_command(command(dir));
                    INFO(again.output);
                    REQUIRE(again.exit_code == 0);
                    const std::string now = read_file(path);
                    CHECK(replace_all(now, dir, traced) == expected);
                    if (left && r.exit_code != 0) CHECK(was == now);
                  });
}
#endif

}  // namespace crucible::testing
