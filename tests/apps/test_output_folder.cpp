// An output folder held by one run at a time (its lock names the holder), an earlier run's
// results removed (links removed, never followed), and SIGINT/SIGTERM noted, not acted on,
// while a run watches for them.
#include "../support/test_support.hpp"

#include "output_folder.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/output_file.hpp>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

using namespace ndtcu;
namespace fs = std::filesystem;

TEST_CASE("an output folder is taken by one run at a time, and the refusal names the holder", "[unit][cli]") {
  const fs::path dir = test::temp_dir("output_folder_lock") / "out";
  {
    const cli::OutputFolder first(dir.string(), "ndtcu localize");
    CHECK(fs::is_directory(dir));
    const std::string holder = test::read_bytes(dir / cli::kOutputLockFile);
    CHECK(holder == "pid " + std::to_string(::getpid()) + ", ndtcu localize, started " + first.started() + "\n");
    // A second taker (another open of the lock file: flock refuses it even in this process).
    CHECK_THROWS_WITH(cli::OutputFolder(dir.string(), "ndtcu localize"),
                      Catch::StartsWith(dir.string() + ": the output folder is in use by another run (pid " +
                                        std::to_string(::getpid()) + ", ndtcu localize, started " + first.started()) &&
                          Catch::Contains("wait for it to end or choose another --out"));
    // The refusal changed nothing: the holder is still named.
    CHECK(test::read_bytes(dir / cli::kOutputLockFile) == holder);
  }
  // Released with its holder.
  CHECK_NOTHROW(cli::OutputFolder(dir.string(), "ndtcu simulate"));
  // A link at the lock file's name is refused, not followed.
  const fs::path linked = test::temp_dir("output_folder_lock_link");
  test::write_bytes(linked / "target", "not a lock\n");
  fs::create_directories(linked / "out");
  fs::create_symlink(linked / "target", linked / "out" / cli::kOutputLockFile);
  CHECK_THROWS_WITH(cli::OutputFolder((linked / "out").string(), "ndtcu localize"),
                    Catch::Contains("is a symbolic link"));
  CHECK(test::read_bytes(linked / "target") == "not a lock\n");
}

TEST_CASE("an earlier run's results and temporary files go; a link goes, not its target", "[unit][cli]") {
  const fs::path base = test::temp_dir("output_folder_earlier");
  const fs::path dir = base / "out";
  fs::create_directories(dir);
  test::write_bytes(base / "elsewhere.json", "someone else's file\n");
  fs::create_symlink(base / "elsewhere.json", dir / "summary.json");
  test::write_bytes(dir / "frames.csv", "old rows\n");
  test::write_bytes(dir / ".frames.csv.ndtcu-tmp.12345.0", "a killed run's rows\n");
  test::write_bytes(dir / "notes.txt", "the user's\n");
  const cli::OutputFolder folder(dir.string(), "ndtcu localize");
  folder.remove_earlier({"summary.json", "frames.csv", "trajectory_tum.txt"});
  CHECK(test::read_bytes(base / "elsewhere.json") == "someone else's file\n");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{cli::kOutputLockFile, "notes.txt"});
}

TEST_CASE("SIGINT and SIGTERM are noted while a run watches, and give 130 and 143", "[unit][cli]") {
  struct sigaction before_int {}, before_term {};
  ::sigaction(SIGINT, nullptr, &before_int);
  ::sigaction(SIGTERM, nullptr, &before_term);
  for (int signal : {SIGINT, SIGTERM}) {
    CAPTURE(signal);
    const cli::InterruptWatch watch;
    CHECK(watch.received() == 0);
    REQUIRE(std::raise(signal) == 0);  // the process goes on
    CHECK(watch.received() == signal);
    REQUIRE(std::raise(signal == SIGINT ? SIGTERM : SIGINT) == 0);
    CHECK(watch.received() == signal);  // the first one counts
  }
  CHECK(cli::InterruptWatch::exit_code(SIGINT) == 130);
  CHECK(cli::InterruptWatch::exit_code(SIGTERM) == 143);
  CHECK(std::string(cli::InterruptWatch::name(SIGTERM)) == "SIGTERM");
  // The handlers in place before are back.
  struct sigaction now_int {}, now_term {};
  ::sigaction(SIGINT, nullptr, &now_int);
  ::sigaction(SIGTERM, nullptr, &now_term);
  CHECK(now_int.sa_handler == before_int.sa_handler);
  CHECK(now_term.sa_handler == before_term.sa_handler);
}

TEST_CASE("a run's lock file goes with it, and a stale one a killed run left is taken over", "[unit][cli]") {
  const fs::path dir = test::temp_dir("output_folder_unlock") / "out";
  {
    const cli::OutputFolder folder(dir.string(), "ndtcu localize");
    CHECK(fs::exists(dir / cli::kOutputLockFile));
  }
  // Gone with its holder: two runs of one command leave the same files.
  CHECK_FALSE(fs::exists(dir / cli::kOutputLockFile));
  CHECK(fs::is_empty(dir));
  // What a run killed outright (SIGKILL) leaves: its file, unlocked, naming it.
  test::write_bytes(dir / cli::kOutputLockFile, "pid 1, ndtcu localize, started 2020-01-01T00:00:00Z\n");
  {
    const cli::OutputFolder folder(dir.string(), "ndtcu simulate");
    CHECK(test::read_bytes(dir / cli::kOutputLockFile) ==
          "pid " + std::to_string(::getpid()) + ", ndtcu simulate, started " + folder.started() + "\n");
    // Held while it lives, even when taken over.
    CHECK_THROWS_WITH(cli::OutputFolder(dir.string(), "ndtcu localize"), Catch::Contains("in use by another run"));
  }
  CHECK_FALSE(fs::exists(dir / cli::kOutputLockFile));
  // A folder that cannot be taken keeps nothing of the attempt.
  {
    const cli::OutputFolder held(dir.string(), "ndtcu localize");
    CHECK_THROWS(cli::OutputFolder(dir.string(), "ndtcu localize"));
    CHECK(fs::exists(dir / cli::kOutputLockFile));  // the holder's, still there
  }
  CHECK(fs::is_empty(dir));
}
