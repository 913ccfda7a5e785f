#include <mutex>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "plugin/registry_state.h"

namespace crucible {

void TrialFactory::check_evaluation_methods() const {
  if (overrides_evaluate_batch != overrides_evaluate_full_dataset) return;
  throw PluginError(fmt::format(
      "trial {} must override exactly one of evaluate_batch and evaluate_full_dataset; it "
      "overrides {}",
      name, overrides_evaluate_batch ? "both" : "neither"));
}

}  // namespace crucible

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
