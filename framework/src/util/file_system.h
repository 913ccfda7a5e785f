#pragma once

// Paths and file-system operations over POSIX calls.
//
// Crucible never uses std::filesystem. A LibTorch from a PyTorch wheel exports its own, broken,
// statically linked copy of libstdc++'s std::filesystem (pytorch/pytorch#133437); a binary that
// imports any std::filesystem symbol may have it bound to that copy and crash. These functions
// call only libc, so nothing of ours can resolve into LibTorch. The test tests/link checks that no
// binary of the tree imports a std::filesystem symbol.
//
// Paths are plain strings in the platform's byte encoding, '/'-separated. Every function that
// fails throws std::runtime_error naming the path and strerror, unless it says otherwise.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace crucible::util {

// Throws std::runtime_error "WHAT PATH: strerror(errno)", for a call on `path` that failed.
[[noreturn]] void throw_errno(const char* what, const std::string& path);

// `base` and `name` joined by one '/'; `name` alone when it is absolute or `base` is empty.
std::string join(const std::string& base, const std::string& name);

// Everything before the last '/' of `path` (trailing slashes ignored): "a/b" -> "a",
// "/a" -> "/", "a" -> "".
std::string parent_path(const std::string& path);

// The last component of `path` (trailing slashes ignored).
std::string file_name(const std::string& path);

bool is_absolute(const std::string& path);

// The working directory.
std::string current_path();

// `path` joined to the working directory when it is relative; no '.' or '..' is resolved.
std::string absolute(const std::string& path);

// `path` with "." components, empty components and "name/.." pairs removed, by its text alone
// (no link is followed): "/a/b/../c/./d" is "/a/c/d". A relative path keeps its leading "..".
std::string lexically_normal(const std::string& path);

// The real path of `path` (symbolic links, '.' and '..' resolved) when it exists, else
// absolute(path). Never throws.
std::string canonical_or_absolute(const std::string& path);

// Whether `path` names something (following symbolic links): false when it, or a directory on
// its way, is missing. Throws std::runtime_error naming the path and the cause when the file system
// cannot tell (an I/O error, a denied search, a loop of symbolic links), so that no caller takes a
// file it could not see for one that is not there. is_directory and is_regular_file likewise, true
// only for that kind of file.
bool exists(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
// Why `path` is not a directory, for a message: "no such directory" when nothing is there, else
// "a file, not a directory" (or "not a directory" for another kind of file). Requires that
// is_directory(path) is false; throws as exists() does.
std::string not_a_directory(const std::string& path);

// The size of the regular file at `path`; nullopt when there is none. Throws as exists() does
// when the file system cannot tell.
std::optional<uint64_t> file_size(const std::string& path);

// Creates `path` and every missing parent (mode 0777 before the umask). An existing directory is
// not an error.
void create_directories(const std::string& path);

// Removes `path`, and when it is a directory everything under it (symbolic links are removed, not
// followed). A missing path is not an error.
void remove_all(const std::string& path);

// remove_all that reports failure as false instead of throwing.
bool try_remove_all(const std::string& path) noexcept;

// Removes the file or empty directory `path`; a missing path is not an error.
void remove(const std::string& path);

// rename(2): atomically replaces `to` (a file, or an empty directory) with `from`.
void rename(const std::string& from, const std::string& to);

// Moves directory `from` to `to`, replacing a `to` that exists with its contents. Where the file
// system can exchange two names atomically (renameat2 RENAME_EXCHANGE: ext4, xfs, btrfs, tmpfs),
// `to` holds either its old contents or `from`'s at every instant, and the old contents are then
// removed. Elsewhere `to` is first renamed to ".tmp-removed-<its name>" beside it, then `from`
// renamed to `to`, then the old contents removed: a crash in between leaves both whole, `to`'s
// old contents under that name and `from` under its own (checkpoint::remove_unfinished moves a
// whole checkpoint into place). Requires `from` and `to` on one file system. Throws
// std::runtime_error naming the path on failure.
void replace_directory(const std::string& from, const std::string& to);

// Renames `path` to ".tmp-removed-<its name>" beside it (removing what an earlier move left
// there first) and returns that name: out of the names of its kind, whole, for removal.
std::string move_aside(const std::string& path);

// The names in directory `path`, without "." and "..", sorted. Throws when it cannot be read.
std::vector<std::string> list_directory(const std::string& path);

// The bytes of the file at `path`, as text or as bytes. Throws std::system_error (code: the errno;
// what(): "cannot open <path>: <reason>" or "cannot read <path>: <reason>") when it cannot be
// opened or a read fails, so a read error never passes for the end of the file.
std::string read_file(const std::string& path);
std::vector<char> read_file_bytes(const std::string& path);

// The target of the symbolic link `path`.
std::string read_symlink(const std::string& path);

// $TMPDIR when set and non-empty, else "/tmp".
std::string temp_directory();

}  // namespace crucible::util
