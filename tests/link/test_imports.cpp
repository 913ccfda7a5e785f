// No binary of the tree imports a std::filesystem symbol (util/file_system.h says why: a LibTorch
// from a PyTorch wheel exports a broken copy of it, pytorch/pytorch#133437).
#include <algorithm>
#include <regex>
#include <set>

#include "catch.h"

#include "process.h"

using namespace crucible::testing;

namespace {

// The std::filesystem (or std::experimental::filesystem) symbols that the ELF file `path` imports,
// read with `nm -D --undefined-only`.
std::vector<std::string> filesystem_imports(const std::string& path) {
  const CommandResult nm = run_command("nm -D --undefined-only '" + path + "'");
  if (nm.exit_code != 0) throw std::runtime_error("nm failed on " + path + ": " + nm.output);
  static const std::regex mangled("St(12experimental)?10filesystem");
  std::vector<std::string> out;
  std::istringstream in(nm.output);
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, mangled)) out.push_back(line);
  }
  return out;
}

bool is_elf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
}

// Every ELF file directly in `dir`.
std::vector<std::string> elf_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& name : util::list_directory(dir)) {
    const std::string path = util::join(dir, name);
    if (util::is_regular_file(path) && is_elf(path)) out.push_back(path);
  }
  return out;
}

}  // namespace

TEST_CASE("no binary of the tree imports a std::filesystem symbol", "[link]") {
  std::vector<std::string> files = elf_files(CRUCIBLE_BIN_DIR);
  for (const auto& f : elf_files(CRUCIBLE_LIB_DIR)) files.push_back(f);
  std::set<std::string> names;
  for (const auto& f : files) names.insert(util::file_name(f));
  // The scan sees the library, the CLI, the example trials and the test binaries.
  for (const char* expected : {"trainer", "libfashion_mnist.so", "liblinear.so",
                               "libcrucible_test_trials.so", "test_checkpoint", "test_imports"}) {
    CHECK(names.count(expected) == 1);
  }
  CHECK(std::any_of(names.begin(), names.end(),
                    [](const std::string& n) { return n.rfind("libcrucible.so", 0) == 0; }));
  for (const auto& f : files) {
    INFO(f);
    CHECK(filesystem_imports(f).empty());
  }
}

TEST_CASE("the import check finds a library that uses std::filesystem", "[link]") {
  const auto imports = filesystem_imports(CRUCIBLE_FIXTURE_LIB);
  INFO(CRUCIBLE_FIXTURE_LIB);
  CHECK(!imports.empty());
}
