#include "plugin/loader.h"

#include <crucible/experiment.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "config/paths.h"
#include "plugin/registry_state.h"
#include "util/crash_report.h"
#include "util/file_system.h"

namespace crucible::plugin {

const char* own_abi_stamp() { return CRUCIBLE_ABI_STAMP; }

std::string executable_dir() {
  try {
    return util::parent_path(util::read_symlink("/proc/self/exe"));
  } catch (const std::exception&) {
    return "";
  }
}

std::string crucible_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_abi_stamp), &info) == 0 || !info.dli_fname) return "";
  return util::parent_path(util::absolute(info.dli_fname));
}

namespace {

bool looks_like_path(const std::string& lib) {
  return lib.find('/') != std::string::npos ||
         (lib.size() > 3 && lib.compare(lib.size() - 3, 3, ".so") == 0);
}

// The library that run directory `dir` recorded (kTrialLibraryFile) when it is `lib`'s file and
// still there.
std::optional<std::string> recorded_library(const std::string& lib, const std::string& dir) {
  if (dir.empty()) return std::nullopt;
  const std::string record = util::join(dir, kTrialLibraryFile);
  if (!util::exists(record)) return std::nullopt;
  std::string text;
  try {
    text = util::read_file(record);
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("cannot tell which trial library the run used: {}", e.what()));
  }
  const std::string path = text.substr(0, text.find('\n'));
  if (!util::is_absolute(path)) return std::nullopt;
  // An absolute library path names its file exactly; a relative one or a name is what the run
  // resolved when it started.
  const std::string file = util::file_name(path);
  const bool same = util::is_absolute(lib) ? path == lib
                    : looks_like_path(lib) ? file == util::file_name(lib)
                                           : file == "lib" + lib + ".so" || file == lib + ".so";
  if (!same || !util::is_regular_file(path)) return std::nullopt;
  return path;
}

std::string find_library(const std::string& lib, const std::string& config_dir) {
  if (auto recorded = recorded_library(lib, config_dir)) return *recorded;
  std::vector<std::string> tried;
  // A place that cannot be looked up is passed over, as a search path's unreadable entries are,
  // and listed with its cause should nothing be found.
  // Something else by a library's name (a directory) is listed as what it is.
  auto exists = [&](const std::string& p) {
    try {
      tried.push_back(p);
      if (util::is_regular_file(p)) return true;
      if (util::exists(p)) tried.back() += " (not a file: a directory or other)";
      return false;
    } catch (const std::exception& e) {
      tried.back() = e.what();
      return false;
    }
  };
  if (looks_like_path(lib)) {
    if (util::is_absolute(lib)) {
      if (exists(lib)) return lib;
    } else {
      if (!config_dir.empty() && exists(util::join(config_dir, lib))) {
        return util::absolute(util::join(config_dir, lib));
      }
      if (exists(util::join(util::current_path(), lib))) {
        return util::join(util::current_path(), lib);
      }
    }
  } else {
    for (const auto& dir : search_directories(config_dir)) {
      for (const std::string& file : {"lib" + lib + ".so", lib + ".so"}) {
        if (exists(util::join(dir, file))) return util::absolute(util::join(dir, file));
      }
    }
  }
  std::string where;
  for (const auto& t : tried) where += "\n  " + t;
  throw PluginError(fmt::format(
      "trial library '{}' not found; looked in:{}\nBuild it (e.g. crucible_add_trial({} ...)), "
      "put it in one of these places, set CRUCIBLE_TRIAL_PATH, or give a path in the entrypoint",
      lib, where, looks_like_path(lib) ? "name" : lib));
}

struct Loaded {
  void* handle;
  std::vector<Registration> registrations;
};

const Loaded& open_library(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, Loaded> loaded;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = util::canonical_or_absolute(path);
  auto it = loaded.find(key);
  if (it != loaded.end()) return it->second;

  Loaded lib;
  auto& state = registry_state();
  {
    // A crash in the library's static initialisers is reported, naming the library.
    const util::CrashReports crash_reports("");
    const std::string what = "in the static initialisers of trial library " + key;
    const util::CrashScope crash_scope(what.c_str());
    std::lock_guard<std::recursive_mutex> reg_lock(state.mu);
    state.capture = &lib.registrations;
    dlerror();
    lib.handle = dlopen(key.c_str(), RTLD_NOW | RTLD_LOCAL);
    state.capture = nullptr;
  }
  if (!lib.handle) {
    const char* err = dlerror();
    throw PluginError(
        fmt::format("cannot load trial library {}: {}", key, err ? err : "unknown dlopen error"));
  }
  if (lib.registrations.empty()) {
    throw PluginError(
        fmt::format("{} is not a Crucible trial library: it registers no trial (add "
                    "CRUCIBLE_REGISTER_TRIAL(YourTrial) to one of its sources)",
                    key));
  }
  return loaded.emplace(key, std::move(lib)).first->second;
}

TrialFactory pick(const std::vector<Registration>& registrations, const std::string& class_name,
                  const std::string& library) {
  std::string names;
  const Registration* found = nullptr;
  for (const auto& r : registrations) {
    if (r.abi_stamp != own_abi_stamp()) {
      throw PluginError(fmt::format(
          "trial library {} was built for a different Crucible/LibTorch ABI and cannot be used "
          "by this trainer; rebuild it against this installation.\n  library: {}\n  trainer: {}",
          library, r.abi_stamp, own_abi_stamp()));
    }
    if (r.class_name == class_name) {
      if (found) {
        throw PluginError(fmt::format(
            "trial class '{}' is registered more than once in {} (CRUCIBLE_REGISTER_TRIAL "
            "drops namespaces: ns1::{} and ns2::{} are both '{}'); give the classes distinct "
            "names",
            class_name, library, class_name, class_name, class_name));
      }
      found = &r;
    }
    names += (names.empty() ? "" : ", ") + r.class_name;
  }
  if (found) return *found->factory;
  const size_t scope = class_name.rfind("::");
  throw PluginError(fmt::format(
      "trial class '{}' is not registered in {}; it registers: {}{}", class_name, library, names,
      scope == std::string::npos
          ? ""
          : fmt::format(" (CRUCIBLE_REGISTER_TRIAL registers a class without its namespace: "
                        "name it '{}' in the entrypoint)",
                        class_name.substr(scope + 2))));
}

}  // namespace

std::vector<std::string> search_directories(const std::string& config_dir) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("CRUCIBLE_TRIAL_PATH")) {
    std::stringstream ss(env);
    for (std::string dir; std::getline(ss, dir, ':');) {
      if (!dir.empty()) dirs.push_back(dir);
    }
  }
  if (!config_dir.empty()) dirs.push_back(config_dir);
  const std::string exe = executable_dir();
  if (!exe.empty()) dirs.push_back(exe);
  const std::string libdir = crucible_library_dir();
  if (!libdir.empty()) dirs.push_back(util::join(libdir, "crucible/trials"));
  // Each place once, at its first position: the same directory named twice (CRUCIBLE_TRIAL_PATH
  // set to the trainer's own) would only be looked in, and listed, twice.
  std::vector<std::string> unique, normals;
  for (const std::string& dir : dirs) {
    std::string normal = util::lexically_normal(util::absolute(dir));
    if (std::find(normals.begin(), normals.end(), normal) != normals.end()) continue;
    normals.push_back(std::move(normal));
    unique.push_back(dir);
  }
  return unique;
}

namespace {

// The library part of an entrypoint and its class.
std::pair<std::string, std::string> split_entrypoint(const std::string& entrypoint) {
  // The last ':' that is not part of a class's "::" (lib:ns::Class).
  size_t colon = entrypoint.size();
  do {
    colon = colon == 0 ? std::string::npos : entrypoint.rfind(':', colon - 1);
  } while (colon != std::string::npos &&
           ((colon > 0 && entrypoint[colon - 1] == ':') ||
            (colon + 1 < entrypoint.size() && entrypoint[colon + 1] == ':')));
  if (colon == std::string::npos || colon == 0 || colon + 1 == entrypoint.size()) {
    throw PluginError("entrypoint '" + entrypoint + "' is not of the form <library>:<TrialClass>");
  }
  return {entrypoint.substr(0, colon), entrypoint.substr(colon + 1)};
}

}  // namespace

TrialFactory resolve_entrypoint(const std::string& entrypoint, const std::string& config_dir) {
  const auto [lib, class_name] = split_entrypoint(entrypoint);
  const std::string path = find_library(lib, config_dir);
  const Loaded& loaded = open_library(path);
  return pick(loaded.registrations, class_name, path);
}

std::string library_path(const std::string& entrypoint, const std::string& config_dir) {
  return util::absolute(find_library(split_entrypoint(entrypoint).first, config_dir));
}

std::string absolute_entrypoint(const std::string& entrypoint, const std::string& config_dir) {
  return library_path(entrypoint, config_dir) + ":" + split_entrypoint(entrypoint).second;
}

}  // namespace crucible::plugin

namespace crucible {

TrialFactory load_trial(const ExperimentConfig& config, const std::string& search_dir) {
  return plugin::resolve_entrypoint(config.entrypoint,
                                    search_dir.empty() ? config::config_dir(config) : search_dir);
}

}  // namespace crucible
