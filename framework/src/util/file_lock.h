#pragma once

// An advisory lock on a file, held by this process until destroyed or until the process dies.

#include <memory>
#include <string>

namespace crucible::util {

class FileLock {
 public:
  // An exclusive flock(2) on `path`, created when missing (its parent must exist); null when
  // another open file holds it, in this process or another. Throws std::system_error, its code
  // the errno and its message naming the path, when the file cannot be opened or locked (a file
  // system without flock: ENOSYS, EOPNOTSUPP or ENOLCK).
  static std::unique_ptr<FileLock> try_lock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace crucible::util
