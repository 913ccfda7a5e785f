#pragma once

#include <string>
#include <vector>

#include <crucible/registry.h>

namespace crucible::plugin {

// The ABI stamp this build of Crucible was compiled with.
const char* own_abi_stamp();

// The directory of the running program, and of the Crucible library; "" when unknown.
std::string executable_dir();
std::string crucible_library_dir();

// The file in a run directory that names, by absolute path, the trial library the run started
// with.
constexpr const char* kTrialLibraryFile = "trial_library";

// Directories searched for a trial library named without a path, in order: CRUCIBLE_TRIAL_PATH
// (colon-separated), `config_dir`, the running executable's directory, and the installed trial
// directory (<prefix>/lib/crucible/trials); each directory once, at its first place.
std::vector<std::string> search_directories(const std::string& config_dir);

// Resolves an entrypoint "<library>:<TrialClass>" to the trial's factory, loading the library
// when needed. When `config_dir` is a run directory whose kTrialLibraryFile names that library
// (the same file name) and it still exists, that file is loaded. Otherwise <library> is a name
// (lib<name>.so looked up in search_directories) or a path to a .so (relative to `config_dir`,
// then to the working directory). Throws PluginError for: library
// not found (listing where it looked), not loadable, not a Crucible trial library, ABI mismatch
// (both stamps), class not registered (listing those registered); TrainingError when the run
// directory's kTrialLibraryFile exists but cannot be read.
TrialFactory resolve_entrypoint(const std::string& entrypoint, const std::string& config_dir);

// The absolute path of the library resolve_entrypoint would load. Throws as resolve_entrypoint.
std::string library_path(const std::string& entrypoint, const std::string& config_dir);

// The entrypoint with its library as the absolute path resolve_entrypoint would load, so that
// it names the same library from any directory. Throws as resolve_entrypoint.
std::string absolute_entrypoint(const std::string& entrypoint, const std::string& config_dir);

}  // namespace crucible::plugin
