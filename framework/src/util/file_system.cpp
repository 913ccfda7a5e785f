#include "util/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace crucible::util {

void throw_errno(const char* what, const std::string& path) {
  throw std::runtime_error(std::string(what) + " " + path + ": " + std::strerror(errno));
}

namespace {

std::string without_trailing_slashes(const std::string& path) {
  size_t end = path.size();
  while (end > 1 && path[end - 1] == '/') --end;
  return path.substr(0, end);
}

bool stat_of(const std::string& path, struct stat& st) { return ::stat(path.c_str(), &st) == 0; }

// stat_of that tells absence (false: `path` or a directory on its way is missing) from a file
// system that cannot say (throws naming the path and the cause: an I/O error, a denied search).
bool stat_or_throw(const std::string& path, struct stat& st) {
  if (stat_of(path, st)) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  throw_errno("cannot look up", path);
}

// A directory stream, closed when it goes out of scope.
using Directory = std::unique_ptr<DIR, int (*)(DIR*)>;

// The names in the open directory `dir` (of `path`), without "." and "..".
std::vector<std::string> read_names(DIR* dir, const std::string& path) {
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  if (errno != 0) throw_errno("cannot read directory", path);
  return names;
}

// Removes everything under the open directory `fd` (which it closes), then nothing else.
void remove_children(int fd, const std::string& path) {
  Directory dir(::fdopendir(fd), &::closedir);
  if (!dir) {
    ::close(fd);
    throw_errno("cannot read directory", path);
  }
  for (const auto& name : read_names(dir.get(), path)) {
    const std::string child = join(path, name);
    struct stat st {};
    if (::fstatat(::dirfd(dir.get()), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      throw_errno("cannot stat", child);
    }
    if (S_ISDIR(st.st_mode)) {
      const int child_fd = ::openat(::dirfd(dir.get()), name.c_str(),
                                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child_fd < 0) {
        if (errno == ENOENT) continue;  // removed meanwhile by another process
        throw_errno("cannot open directory", child);
      }
      remove_children(child_fd, child);
    }
    if (::unlinkat(::dirfd(dir.get()), name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 &&
        errno != ENOENT) {
      throw_errno("cannot remove", child);
    }
  }
}

}  // namespace

std::string join(const std::string& base, const std::string& name) {
  if (base.empty() || is_absolute(name)) return name;
  if (name.empty()) return base;
  return base.back() == '/' ? base + name : base + "/" + name;
}

std::string parent_path(const std::string& path) {
  const std::string p = without_trailing_slashes(path);
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  return without_trailing_slashes(p.substr(0, slash));
}

std::string file_name(const std::string& path) {
  const std::string p = without_trailing_slashes(path);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool is_absolute(const std::string& path) { return !path.empty() && path[0] == '/'; }

std::string current_path() {
  std::vector<char> buffer(PATH_MAX);
  while (::getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE) throw_errno("cannot read the working directory", ".");
    buffer.resize(buffer.size() * 2);
  }
  return buffer.data();
}

std::string absolute(const std::string& path) {
  return is_absolute(path) ? path : join(current_path(), path);
}

std::string lexically_normal(const std::string& path) {
  const bool rooted = is_absolute(path);
  std::vector<std::string> parts;
  std::stringstream in(path);
  for (std::string part; std::getline(in, part, '/');) {
    if (part.empty() || part == ".") continue;
    if (part == ".." && !parts.empty() && parts.back() != "..") {
      parts.pop_back();
    } else if (!(part == ".." && rooted)) {
      parts.push_back(part);
    }
  }
  std::string out = rooted ? "/" : "";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "/" : "") + parts[i];
  return out.empty() ? "." : out;
}

std::string canonical_or_absolute(const std::string& path) {
  try {
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      std::string out = real;
      std::free(real);
      return out;
    }
    return absolute(path);
  } catch (const std::exception&) {
    return path;
  }
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat_or_throw(path, st);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return stat_or_throw(path, st) && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return stat_or_throw(path, st) && S_ISREG(st.st_mode);
}

std::string not_a_directory(const std::string& path) {
  struct stat st {};
  if (!stat_or_throw(without_trailing_slashes(path), st)) return "no such directory";
  return S_ISREG(st.st_mode) ? "a file, not a directory" : "not a directory";
}

std::optional<uint64_t> file_size(const std::string& path) {
  struct stat st {};
  if (!stat_or_throw(path, st) || !S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<uint64_t>(st.st_size);
}

void create_directories(const std::string& path) {
  const std::string p = without_trailing_slashes(path);
  if (p.empty() || is_directory(p)) return;
  const std::string parent = parent_path(p);
  if (!parent.empty() && parent != p) create_directories(parent);
  if (::mkdir(p.c_str(), 0777) != 0 && !(errno == EEXIST && is_directory(p))) {
    throw_errno("cannot create directory", p);
  }
}

void remove_all(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw_errno("cannot stat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) throw_errno("cannot open directory", path);
    remove_children(fd, path);
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) throw_errno("cannot remove", path);
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw_errno("cannot remove", path);
  }
}

bool try_remove_all(const std::string& path) noexcept {
  try {
    remove_all(path);
    return true;
  } catch (...) {
    return false;
  }
}

void remove(const std::string& path) {
  if (::remove(path.c_str()) != 0 && errno != ENOENT) throw_errno("cannot remove", path);
}

void rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw_errno(("cannot rename " + from + " to").c_str(), to);
}

void replace_directory(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    remove_all(from);  // now the old contents of `to`
    return;
  }
  const int error = errno;
  if (!is_directory(from)) throw_errno("cannot replace a directory with", from);
  if (error == ENOENT) {
    rename(from, to);
    return;
  }
  if (error != EINVAL && error != ENOSYS) {
    errno = error;
    throw_errno(("cannot exchange " + from + " and").c_str(), to);
  }
  // The file system cannot exchange names: the old one goes aside whole first, so that a kill
  // leaves both complete, never `to` half deleted.
  if (!exists(to)) {
    rename(from, to);
    return;
  }
  const std::string aside = move_aside(to);
  rename(from, to);
  remove_all(aside);
}

std::string move_aside(const std::string& path) {
  const std::string aside = join(parent_path(path), ".tmp-removed-" + file_name(path));
  remove_all(aside);  // left by an earlier move cut short
  rename(path, aside);
  return aside;
}

std::vector<std::string> list_directory(const std::string& path) {
  Directory dir(::opendir(path.c_str()), &::closedir);
  if (!dir) throw_errno("cannot read directory", path);
  std::vector<std::string> names = read_names(dir.get(), path);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// The whole file, read straight into a Buffer (std::string or std::vector<char>) sized from its
// length; a file that grows or shrinks meanwhile is read to its end.
template <typename Buffer>
Buffer read_whole(const std::string& path) {
  const auto error = [&](const char* what) {
    return std::system_error(errno, std::generic_category(), what + path);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw error("cannot open ");
  struct stat st {};
  const size_t size = ::fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
  Buffer out(size + 1, '\0');  // a spare byte, so that the read confirming the end needs no growth
  size_t done = 0;
  for (;;) {
    if (done == out.size()) out.resize(2 * out.size());
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const std::system_error e = error("cannot read ");
      ::close(fd);
      throw e;
    }
  }
  ::close(fd);
  out.resize(done);
  return out;
}

}  // namespace

std::string read_file(const std::string& path) { return read_whole<std::string>(path); }

std::vector<char> read_file_bytes(const std::string& path) {
  return read_whole<std::vector<char>>(path);
}

std::string read_symlink(const std::string& path) {
  std::vector<char> buffer(PATH_MAX);
  for (;;) {
    const ssize_t n = ::readlink(path.c_str(), buffer.data(), buffer.size());
    if (n < 0) throw_errno("cannot read link", path);
    if (static_cast<size_t>(n) < buffer.size()) return std::string(buffer.data(), n);
    buffer.resize(buffer.size() * 2);
  }
}

std::string temp_directory() {
  const char* env = std::getenv("TMPDIR");
  return env && *env ? env : "/tmp";
}

}  // namespace crucible::util
