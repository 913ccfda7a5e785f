#pragma once

// Temporary directories and whole-file reads and writes for tests and fuzz targets.

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "util/file_system.h"

namespace crucible::testing {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = util::join(util::temp_directory(),
                       "crucible-test-" + std::to_string(rd()) + std::to_string(rd()));
    util::create_directories(path_);
  }
  ~TempDir() { util::try_remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  const std::string& str() const { return path_; }
  std::string operator/(const std::string& name) const { return util::join(path_, name); }

 private:
  std::string path_;
};

// The bytes of the file at `path` ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Replaces the file at `path` with `bytes`.
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace crucible::testing
