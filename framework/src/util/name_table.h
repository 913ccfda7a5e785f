#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>

namespace crucible::util {

// The one spelling of each value of an enum, as it appears in files and messages. A table lists
// every value once; name() of a value that is not listed is an internal error.
template <typename E>
class NameTable {
 public:
  NameTable(std::initializer_list<std::pair<E, const char*>> entries) : entries_(entries) {}

  const char* name(E value) const {
    for (const auto& [v, n] : entries_) {
      if (v == value) return n;
    }
    TORCH_INTERNAL_ASSERT(false, "an enum value has no name in its table");
  }
  // The value spelled `name`, or nullopt.
  std::optional<E> parse(const std::string& name) const {
    for (const auto& [v, n] : entries_) {
      if (name == n) return v;
    }
    return std::nullopt;
  }
  // Every name, in table order.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : entries_) out.emplace_back(entry.second);
    return out;
  }

 private:
  std::vector<std::pair<E, const char*>> entries_;
};

}  // namespace crucible::util
