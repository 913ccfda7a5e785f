// Paths and files over POSIX (util/file_system.h).
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "catch.h"

#include "process.h"

using namespace crucible::testing;

TEST_CASE("paths are joined and split like the shell's", "[util]") {
  CHECK(util::join("a", "b") == "a/b");
  CHECK(util::join("a/", "b") == "a/b");
  CHECK(util::join("a", "/b") == "/b");
  CHECK(util::join("", "b") == "b");
  CHECK(util::parent_path("a/b/c") == "a/b");
  CHECK(util::parent_path("a/b/c/") == "a/b");
  CHECK(util::parent_path("/a") == "/");
  CHECK(util::parent_path("a") == "");
  CHECK(util::file_name("a/b/c.pt") == "c.pt");
  CHECK(util::file_name("a/b/") == "b");
  CHECK(util::absolute("x") == util::current_path() + "/x");
  CHECK(util::absolute("/x") == "/x");
  CHECK(util::lexically_normal("/a/b/../c/./d/") == "/a/c/d");
  CHECK(util::lexically_normal("/a/../../b") == "/b");
  CHECK(util::lexically_normal("a/../../b") == "../b");
  CHECK(util::lexically_normal("a/..") == ".");
  CHECK(util::lexically_normal("configs/../runs") == "runs");
}

TEST_CASE("directories are made, listed and removed without following links", "[util]") {
  TempDir tmp;
  const std::string deep = tmp / "a/b/c";
  util::create_directories(deep);
  util::create_directories(deep);  // existing: not an error
  CHECK(util::is_directory(deep));
  write_file(deep + "/f.txt", "12345");
  write_file(tmp / "a/z.txt", "");
  CHECK(util::file_size(deep + "/f.txt") == std::optional<uint64_t>(5));
  CHECK_FALSE(util::file_size(tmp / "a/missing").has_value());
  CHECK(util::list_directory(tmp / "a") == std::vector<std::string>{"b", "z.txt"});

  // A link out of the tree being removed: its target survives.
  write_file(tmp / "outside.txt", "keep");
  REQUIRE(::symlink((tmp / "outside.txt").c_str(), (deep + "/link").c_str()) == 0);
  CHECK(util::read_symlink(deep + "/link") == tmp / "outside.txt");
  util::remove_all(tmp / "a");
  CHECK_FALSE(util::exists(tmp / "a"));
  CHECK(read_file(tmp / "outside.txt") == "keep");
  util::remove_all(tmp / "a");  // missing: not an error

  util::rename(tmp / "outside.txt", tmp / "moved.txt");
  CHECK(util::is_regular_file(tmp / "moved.txt"));
  CHECK_THROWS_WITH(util::rename(tmp / "nothing", tmp / "x"),
                    Catch::Contains("cannot rename") && Catch::Contains("nothing"));
  CHECK_THROWS_WITH(util::list_directory(tmp / "nothing"),
                    Catch::Contains("cannot read directory") && Catch::Contains("nothing"));
}

TEST_CASE("replace_directory puts a directory in place of another, or of none", "[util]") {
  TempDir tmp;
  util::create_directories(tmp / "old/sub");
  write_file(tmp / "old/sub/a.txt", "old");
  util::create_directories(tmp / "new");
  write_file(tmp / "new/b.txt", "new");
  util::replace_directory(tmp / "new", tmp / "old");
  CHECK(util::list_directory(tmp / "old") == std::vector<std::string>{"b.txt"});
  CHECK(read_file(tmp / "old/b.txt") == "new");
  CHECK_FALSE(util::exists(tmp / "new"));  // nothing of the replaced contents is left behind
  CHECK(util::list_directory(tmp.path()) == std::vector<std::string>{"old"});

  util::replace_directory(tmp / "old", tmp / "fresh");  // no directory to replace
  CHECK(read_file(tmp / "fresh/b.txt") == "new");
  CHECK_THROWS_WITH(util::replace_directory(tmp / "nothing", tmp / "fresh"),
                    Catch::Contains("nothing"));
  CHECK(read_file(tmp / "fresh/b.txt") == "new");  // a failed replace keeps what was there
}

TEST_CASE("exists tells a missing path from one the file system cannot look up", "[util]") {
  TempDir tmp;
  write_file(tmp / "file", "x");
  CHECK(util::exists(tmp / "file"));
  CHECK_FALSE(util::exists(tmp / "missing"));
  CHECK_FALSE(util::exists(tmp / "file/below"));  // ENOTDIR: nothing can be there
  CHECK_FALSE(util::is_directory(tmp / "missing/below"));
  // A loop of symbolic links can be named but not looked up: neither there nor missing.
  REQUIRE(::symlink((tmp / "b").c_str(), (tmp / "a").c_str()) == 0);
  REQUIRE(::symlink((tmp / "a").c_str(), (tmp / "b").c_str()) == 0);
  // (Catch2 2's composed matchers hold their parts by reference: each is made in place.)
  const std::string place = "cannot look up " + (tmp / "a");
  const std::string cause = std::strerror(ELOOP);
  CHECK_THROWS_WITH(util::exists(tmp / "a"), Catch::Contains(place) && Catch::Contains(cause));
  CHECK_THROWS_WITH(util::is_directory(tmp / "a"),
                    Catch::Contains(place) && Catch::Contains(cause));
  CHECK_THROWS_WITH(util::is_regular_file(tmp / "a"),
                    Catch::Contains(place) && Catch::Contains(cause));
  CHECK_THROWS_WITH(util::file_size(tmp / "a"), Catch::Contains(place) && Catch::Contains(cause));
}
