#include "util/user_code.h"

#include <cstdlib>
#include <memory>
#include <typeinfo>

#include <fmt/format.h>

namespace crucible::util {

std::string describe_foreign_exception() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "something that is not a std::exception";
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(type->name(), nullptr, nullptr, &status), &std::free);
  return fmt::format("a value of type '{}', not a std::exception",
                     status == 0 && demangled ? demangled.get() : type->name());
}

}  // namespace crucible::util
