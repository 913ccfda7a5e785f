#include <mutex>

#include "plugin/registry_state.h"

namespace crucible::plugin {

RegistryState& registry_state() {
  static RegistryState state;
  return state;
}

}  // namespace crucible::plugin

extern "C" void crucible_register_trial_v1(const char* class_name, const char* abi_stamp,
                                           const void* factory) {
  auto& state = crucible::plugin::registry_state();
  std::lock_guard<std::recursive_mutex> lock(state.mu);
  crucible::plugin::Registration r{class_name, abi_stamp,
                                   static_cast<const crucible::TrialFactory*>(factory)};
  (state.capture ? *state.capture : state.linked).push_back(std::move(r));
}
