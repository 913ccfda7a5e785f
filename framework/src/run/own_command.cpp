#include "run/own_command.h"

#include <fstream>
#include <iterator>

#include "util/file_system.h"

namespace crucible::run {

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < all.size();) {
    const size_t end = all.find('\0', start);
    args.push_back(all.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (args.empty()) args.emplace_back();
  args[0] = util::read_symlink("/proc/self/exe");
  return args;
}

}  // namespace crucible::run
