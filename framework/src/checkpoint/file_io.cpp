#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

namespace crucible::checkpoint {

namespace {

[[noreturn]] void fail(const char* what, const std::string& path) {
  throw std::runtime_error(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

void write_all(const std::string& path, const char* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", path);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail("cannot write", path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail("cannot fsync", path);
  }
  if (::close(fd) != 0) fail("cannot close", path);
}

}  // namespace

void write_durably(const std::string& path, const std::vector<char>& bytes) {
  write_all(path, bytes.data(), bytes.size());
}

void write_durably(const std::string& path, const std::string& text) {
  write_all(path, text.data(), text.size());
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path);
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail("cannot fsync", path);
  }
  ::close(fd);
}

std::vector<char> read_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path);
  std::vector<char> out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail("cannot read", path);
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

std::string crc32_hex(const std::vector<char>& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < bytes.size()) {
    const auto chunk = static_cast<uInt>(std::min<size_t>(bytes.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), chunk);
    done += chunk;
  }
  return fmt::format("{:08x}", static_cast<uint32_t>(crc));
}

void replace_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  write_durably(tmp, text);
  std::filesystem::rename(tmp, path);
  fsync_path(std::filesystem::path(path).parent_path().string());
}

}  // namespace crucible::checkpoint
