#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace crucible::util {

// A file being written durably: bytes go straight to the file while its size and CRC-32 are
// counted; finish() fsyncs and closes it. Every failure throws std::runtime_error with the path
// and strerror (a full disk included); a partial file may remain. Closes without fsync when
// destroyed unfinished.
class DurableFile {
 public:
  explicit DurableFile(const std::string& path);
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void write(const void* data, size_t size);
  // fsyncs and closes the file.
  void finish();
  uint64_t size() const { return size_; }
  // CRC-32 (zlib's) of the bytes written, as 8 lowercase hex digits.
  std::string crc32_hex() const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  unsigned long crc_ = 0;
};

// Writes `bytes` to `path` and fsyncs it. Throws std::runtime_error with strerror on failure
// (a full disk included); a partial file may remain.
void write_durably(const std::string& path, const std::vector<char>& bytes);
void write_durably(const std::string& path, const std::string& text);

// fsyncs an existing file or directory. Throws std::runtime_error on failure.
void fsync_path(const std::string& path);

// The size and CRC-32 of the file at `path`, read in fixed-size chunks. Throws
// std::runtime_error when it cannot be read.
struct FileSum {
  uint64_t size = 0;
  std::string crc32;
};
FileSum sum_file(const std::string& path);

// CRC-32 (zlib's) of `bytes`, as 8 lowercase hex digits.
std::string crc32_hex(const std::string& bytes);

// Atomically replaces `path` with `text` or `bytes` (temporary file, fsync, rename, fsync of the
// directory): afterwards `path` holds either its old bytes or the new ones, never part of them. On
// failure the temporary file is removed and the error, naming the path, is thrown.
void replace_atomically(const std::string& path, const std::string& text);
void replace_atomically(const std::string& path, const std::vector<char>& bytes);

}  // namespace crucible::util
