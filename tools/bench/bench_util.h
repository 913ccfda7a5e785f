#pragma once

// Small pieces the benchmarks share: medians, numbers out of text, running a command, a port.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "free_port.h"
#include "util/file_system.h"

namespace bench {

// The median of `v` (the upper one of an even count); 0 when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The whitespace-separated numbers of `text`, up to the first that is not one.
inline std::vector<double> read_numbers(const std::string& text) {
  std::vector<double> out;
  std::istringstream in(text);
  for (double d; in >> d;) out.push_back(d);
  return out;
}

// Runs `command` through sh; returns its stdout and stores its wait status in *status.
inline std::string capture(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

using crucible::util::free_port;

}  // namespace bench
