#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include <torch/version.h>

#include <crucible/trial.h>
#include <crucible/trial_context.h>
#include <crucible/version.h>

namespace crucible {

// How to build one trial class, and which evaluation method it overrides.
struct TrialFactory {
  std::string name;
  std::function<std::unique_ptr<Trial>(TrialContext&)> create;
  bool overrides_evaluate_batch = false;
  bool overrides_evaluate_full_dataset = false;
  bool overrides_predict_batch = false;

  // Throws PluginError naming the trial unless it overrides exactly one of evaluate_batch and
  // evaluate_full_dataset.
  void check_evaluation_methods() const;

  // The factory of T, a Trial with a constructor T(TrialContext&). `name` is the class name
  // entrypoints use; a namespace qualification ("ns::MyTrial") is dropped.
  template <class T>
  static TrialFactory of(std::string name) {
    static_assert(std::is_base_of_v<Trial, T>, "a trial derives from crucible::Trial");
    static_assert(std::is_constructible_v<T, TrialContext&>,
                  "a trial has a constructor taking crucible::TrialContext&");
    TrialFactory f;
    const auto qualified = name.rfind("::");
    f.name = qualified == std::string::npos ? std::move(name) : name.substr(qualified + 2);
    f.create = [](TrialContext& ctx) -> std::unique_ptr<Trial> { return std::make_unique<T>(ctx); };
    f.overrides_evaluate_batch =
        !std::is_same_v<decltype(&T::evaluate_batch), decltype(&Trial::evaluate_batch)>;
    f.overrides_evaluate_full_dataset = !std::is_same_v<decltype(&T::evaluate_full_dataset),
                                                        decltype(&Trial::evaluate_full_dataset)>;
    f.overrides_predict_batch =
        !std::is_same_v<decltype(&T::predict_batch), decltype(&Trial::predict_batch)>;
    return f;
  }
};

}  // namespace crucible

#define CRUCIBLE_STRINGIFY_(x) #x
#define CRUCIBLE_STRINGIFY(x) CRUCIBLE_STRINGIFY_(x)
#ifndef CRUCIBLE_ABI_STAMP
// What a trial library must share with the `trainer` that loads it.
#define CRUCIBLE_ABI_STAMP                                                      \
  "crucible " CRUCIBLE_VERSION_STRING                                           \
  ", libtorch " CRUCIBLE_STRINGIFY(TORCH_VERSION_MAJOR) "." CRUCIBLE_STRINGIFY( \
      TORCH_VERSION_MINOR) ", cxx11-abi " CRUCIBLE_STRINGIFY(_GLIBCXX_USE_CXX11_ABI)
#endif

// Registers a trial with a loader that is opening its library. C linkage and plain C strings
// keep this call safe across an ABI mismatch; `factory` (a const crucible::TrialFactory*) is used
// only after the stamps match.
extern "C" void crucible_register_trial_v1(const char* class_name, const char* abi_stamp,
                                           const void* factory);

namespace crucible {

// What CRUCIBLE_REGISTER_TRIAL defines: registers `factory` with the loader at static
// initialisation of the trial library, and keeps it alive as long as the library is loaded.
struct TrialRegistrar {
  TrialRegistrar(TrialFactory factory, const char* abi_stamp) : factory_(std::move(factory)) {
    crucible_register_trial_v1(factory_.name.c_str(), abi_stamp, &factory_);
  }
  TrialFactory factory_;
};

}  // namespace crucible

#define CRUCIBLE_CONCAT_(a, b) a##b
#define CRUCIBLE_CONCAT(a, b) CRUCIBLE_CONCAT_(a, b)

// Registers `Class` (a crucible::Trial) under its name as written, for entrypoints
// "<library>:<Class>". A library may register several trials.
#define CRUCIBLE_REGISTER_TRIAL(Class)                                                             \
  static const ::crucible::TrialRegistrar CRUCIBLE_CONCAT(crucible_trial_registrar_, __COUNTER__)( \
      ::crucible::TrialFactory::of<Class>(#Class), CRUCIBLE_ABI_STAMP)
