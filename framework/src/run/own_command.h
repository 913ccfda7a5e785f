#pragma once

// The command line a process relaunches itself with, as the built-in launcher's workers.

#include <string>
#include <vector>

namespace crucible::run {

// This process's command line, its program named by /proc/self/exe (an absolute path, so it
// holds from any working directory).
std::vector<std::string> own_command_line();

}  // namespace crucible::run
