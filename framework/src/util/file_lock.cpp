#include "util/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace crucible::util {

namespace {

// open(2) of `path` with `flags`; throws std::system_error naming it on failure.
int open_or_throw(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot open " + path);
  return fd;
}

// flock(2) of `fd` (open on `path`) with `operation`: whether it took the lock (false only for
// EWOULDBLOCK under LOCK_NB). Closes `fd` unless it did; throws std::system_error naming `path`
// on failure.
bool lock_or_close(int fd, int operation, const std::string& path) {
  int rc;
  do {
    rc = ::flock(fd, operation);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return true;
  const int error = errno;
  ::close(fd);
  if (error == EWOULDBLOCK) return false;
  throw std::system_error(error, std::generic_category(), "cannot lock " + path);
}

}  // namespace

std::unique_ptr<FileLock> FileLock::try_lock(const std::string& path) {
  const int fd = open_or_throw(path, O_RDWR | O_CREAT);
  if (!lock_or_close(fd, LOCK_EX | LOCK_NB, path)) return nullptr;
  return std::unique_ptr<FileLock>(new FileLock(fd));
}

std::unique_ptr<FileLock> FileLock::try_lock_directory(const std::string& dir) {
  const int fd = open_or_throw(dir, O_RDONLY | O_DIRECTORY);
  if (!lock_or_close(fd, LOCK_EX | LOCK_NB, dir)) return nullptr;
  return std::unique_ptr<FileLock>(new FileLock(fd));
}

std::unique_ptr<FileLock> FileLock::lock_directory_shared(const std::string& dir) {
  const int fd = open_or_throw(dir, O_RDONLY | O_DIRECTORY);
  lock_or_close(fd, LOCK_SH, dir);
  return std::unique_ptr<FileLock>(new FileLock(fd));
}

bool FileLock::held_elsewhere(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw std::system_error(errno, std::generic_category(), "cannot open " + path);
  }
  const bool free = lock_or_close(fd, LOCK_SH | LOCK_NB, path);
  if (free) ::close(fd);
  return !free;
}

bool FileLock::holds(const std::string& path) const {
  struct stat locked {};
  struct stat named {};
  if (::fstat(fd_, &locked) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot look up " + path);
  }
  if (::stat(path.c_str(), &named) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    throw std::system_error(errno, std::generic_category(), "cannot look up " + path);
  }
  return named.st_dev == locked.st_dev && named.st_ino == locked.st_ino;
}

FileLock::~FileLock() { ::close(fd_); }

}  // namespace crucible::util
