// A library that imports std::filesystem symbols on purpose: the fixture that shows the import
// check of test_imports.cpp can fail. It is never loaded.
#include <filesystem>
#include <string>

bool crucible_fixture_path_exists(const std::string& path) { return std::filesystem::exists(path); }
