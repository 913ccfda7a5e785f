#pragma once

#include <string>
#include <vector>

namespace crucible::cli {

// Runs the `trainer` command line and returns its exit code (see crucible::ExitCode). Errors are
// printed to stderr as one message without a stack trace.
int run(const std::vector<std::string>& args);

}  // namespace crucible::cli
