#include "util/file_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "util/file_system.h"

namespace crucible::util {

namespace {

// Closes `fd` after a failed call, keeping that call's errno for the message.
[[noreturn]] void close_and_fail(int fd, const char* what, const std::string& path) {
  const int saved = errno;
  ::close(fd);
  errno = saved;
  throw_errno(what, path);
}

int open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open", path);
  return fd;
}

// Reads up to `size` bytes; returns how many (0 at the end of the file).
size_t read_some(int fd, char* data, size_t size, const std::string& path) {
  for (;;) {
    const ssize_t n = ::read(fd, data, size);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) close_and_fail(fd, "cannot read", path);
  }
}

unsigned long crc32_update(unsigned long crc, const char* data, size_t size) {
  while (size > 0) {
    const auto chunk = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    size -= chunk;
  }
  return crc;
}

std::string hex(unsigned long crc) { return fmt::format("{:08x}", static_cast<uint32_t>(crc)); }

}  // namespace

DurableFile::DurableFile(const std::string& path) : path_(path), crc_(crc32(0L, Z_NULL, 0)) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_errno("cannot create", path);
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::write(const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  crc_ = crc32_update(crc_, bytes, size);
  size_ += size;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      throw_errno("cannot write", path_);
    }
    done += static_cast<size_t>(n);
  }
}

void DurableFile::finish() {
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) close_and_fail(fd, "cannot fsync", path_);
  if (::close(fd) != 0) throw_errno("cannot close", path_);
}

std::string DurableFile::crc32_hex() const { return hex(crc_); }

std::string crc32_hex(const std::string& bytes) {
  return hex(crc32_update(crc32(0L, Z_NULL, 0), bytes.data(), bytes.size()));
}

void write_durably(const std::string& path, const std::vector<char>& bytes) {
  DurableFile file(path);
  file.write(bytes.data(), bytes.size());
  file.finish();
}

void write_durably(const std::string& path, const std::string& text) {
  DurableFile file(path);
  file.write(text.data(), text.size());
  file.finish();
}

void fsync_path(const std::string& path) {
  const int fd = open_for_reading(path);
  if (::fsync(fd) != 0) close_and_fail(fd, "cannot fsync", path);
  ::close(fd);
}

FileSum sum_file(const std::string& path) {
  const int fd = open_for_reading(path);
  std::vector<char> buf(1 << 20);
  unsigned long crc = crc32(0L, Z_NULL, 0);
  FileSum sum;
  while (const size_t n = read_some(fd, buf.data(), buf.size(), path)) {
    crc = crc32_update(crc, buf.data(), n);
    sum.size += n;
  }
  ::close(fd);
  sum.crc32 = hex(crc);
  return sum;
}

namespace {

template <typename Bytes>
void replace_with(const std::string& path, const Bytes& bytes) {
  const std::string tmp = path + ".tmp";
  try {
    write_durably(tmp, bytes);
    util::rename(tmp, path);
  } catch (...) {
    util::try_remove_all(tmp);
    throw;
  }
  const std::string dir = util::parent_path(path);
  fsync_path(dir.empty() ? "." : dir);
}

}  // namespace

void replace_atomically(const std::string& path, const std::string& text) {
  replace_with(path, text);
}

void replace_atomically(const std::string& path, const std::vector<char>& bytes) {
  replace_with(path, bytes);
}

}  // namespace crucible::util
