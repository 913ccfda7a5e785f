#pragma once

// An advisory lock on a file or a directory, held by this process until destroyed or until the
// process dies.

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
  // An exclusive flock(2) on directory `dir`; null when another open file holds a lock on it, in
  // this process or another. Throws std::system_error as try_lock does (ENOENT: `dir` does not
  // exist).
  static std::unique_ptr<FileLock> try_lock_directory(const std::string& dir);
  // A shared flock(2) on directory `dir`, waiting while another open file holds an exclusive one.
  // Throws std::system_error as try_lock does (ENOENT: `dir` does not exist).
  static std::unique_ptr<FileLock> lock_directory_shared(const std::string& dir);
  // Whether another open file holds an exclusive flock(2) on `path` (a process writing what the
  // file guards); false when `path` does not exist. Creates nothing: it takes a shared lock and
  // drops it at once. Throws std::system_error naming `path` when it cannot be opened or locked
  // for another reason.
  static bool held_elsewhere(const std::string& path);
  // Whether `path` names the file or directory this lock is on: false when it names nothing or
  // another (the locked one was renamed or removed). Throws std::system_error naming `path` when
  // it cannot be looked up for another reason.
  bool holds(const std::string& path) const;
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace crucible::util
