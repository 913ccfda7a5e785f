// No binary of the tree imports a std::filesystem symbol (util/file_system.h says why: a LibTorch
// from a PyTorch wheel exports a broken copy of it, pytorch/pytorch#133437).
#include <algorithm>
#include <cctype>
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

// The symbols that the ELF file `path` exports and that are not Crucible's own: anything but the
// trial registration entry point and entities of namespace crucible (functions, data, static
// locals and their guards, type information, vtables and thunks), by their mangled names. A
// symbol of local binding in the dynamic table (nm's lower-case type letters other than i, u, v
// and w) is no export: no other file can bind to it.
std::vector<std::string> foreign_exports(const std::string& path) {
  const CommandResult nm = run_command("nm -D --defined-only '" + path + "'");
  if (nm.exit_code != 0) throw std::runtime_error("nm failed on " + path + ": " + nm.output);
  static const std::regex own(
      "^(crucible_register_trial_v1|_Z(N[KRO]{0,2}|Z{1,2}NK?|GVZ{0,2}NK?|GRN|THN|TWN|T[ISVTC]N|"
      "T[IS]PK?N|T[ISV]ZNK?|T[hv]n?[0-9_n]*_NK?)8crucible.*)$");
  std::vector<std::string> out;
  std::istringstream in(nm.output);
  for (std::string line; std::getline(in, line);) {
    const auto name_at = line.rfind(' ');
    if (name_at == std::string::npos || name_at == 0) continue;  // no "<address> <type> <name>"
    const char type = line[name_at - 1];
    if (std::islower(static_cast<unsigned char>(type)) &&
        std::string("iuvw").find(type) == std::string::npos) {
      continue;
    }
    const std::string name = line.substr(name_at + 1);
    if (!std::regex_match(name, own)) out.push_back(name);
  }
  return out;
}

std::string libcrucible() {
  for (const auto& name : util::list_directory(CRUCIBLE_LIB_DIR)) {
    if (name.rfind("libcrucible.so.", 0) == 0 && name.find('.', 15) != std::string::npos) {
      return util::join(CRUCIBLE_LIB_DIR, name);
    }
  }
  throw std::runtime_error(std::string("no libcrucible.so.X.Y.Z in ") + CRUCIBLE_LIB_DIR);
}

}  // namespace

TEST_CASE("libcrucible exports its own symbols only, never its copies of library templates",
          "[link]") {
  const std::string lib = libcrucible();
  INFO(lib);
  const auto foreign = foreign_exports(lib);
  std::string first;
  for (size_t i = 0; i < foreign.size() && i < 20; ++i) first += foreign[i] + "\n";
  INFO(foreign.size() << " foreign exports, the first:\n" << first);
  CHECK(foreign.empty());
  // What users and trial libraries bind to is there.
  const CommandResult nm = run_command("nm -DC --defined-only '" + lib + "'");
  for (const char* needed : {"crucible::run_experiment(crucible::ExperimentOptions const&)",
                             "typeinfo for crucible::Error", "vtable for crucible::Trial",
                             "crucible_register_trial_v1", "crucible::write_report"}) {
    CHECK_THAT(nm.output, Catch::Contains(needed));
  }
}

TEST_CASE("the export check finds a library that exports other symbols", "[link]") {
  const auto foreign = foreign_exports(CRUCIBLE_FIXTURE_LIB);
  CHECK(std::find(foreign.begin(), foreign.end(),
                  "_Z28crucible_fixture_path_existsRKNSt7__cxx1112basic_stringIcSt11char_"
                  "traitsIcESaIcEEE") != foreign.end());
}

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
