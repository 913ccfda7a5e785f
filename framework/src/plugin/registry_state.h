#pragma once

#include <mutex>
#include <string>
#include <vector>

#include <crucible/registry.h>

namespace crucible::plugin {

// One CRUCIBLE_REGISTER_TRIAL, as reported by the library that holds it.
struct Registration {
  std::string class_name;
  std::string abi_stamp;
  const TrialFactory* factory;  // valid only when abi_stamp matches own_abi_stamp()
};

// Where registrations go: into `capture` while the loader opens a library, otherwise into
// `linked` (trials linked into the executable itself).
struct RegistryState {
  std::recursive_mutex mu;
  std::vector<Registration>* capture = nullptr;
  std::vector<Registration> linked;
};

RegistryState& registry_state();

}  // namespace crucible::plugin
