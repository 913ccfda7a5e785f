#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace crucible::checkpoint {

// Writes `bytes` to `path` and fsyncs it. Throws std::runtime_error with strerror on failure
// (a full disk included); a partial file may remain.
void write_durably(const std::string& path, const std::vector<char>& bytes);
void write_durably(const std::string& path, const std::string& text);

// fsyncs an existing file or directory. Throws std::runtime_error on failure.
void fsync_path(const std::string& path);

// The whole file. Throws std::runtime_error when it cannot be read.
std::vector<char> read_bytes(const std::string& path);

// CRC-32 (zlib's) of a file's bytes as 8 lowercase hex digits.
std::string crc32_hex(const std::vector<char>& bytes);

// Atomically replaces `path` with `text` (temporary file, fsync, rename, fsync of the directory).
void replace_atomically(const std::string& path, const std::string& text);

}  // namespace crucible::checkpoint
