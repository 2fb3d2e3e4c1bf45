#pragma once
// An output folder (`--out`) held by one run at a time, and the signals that stop a run
// between two of its steps.
#include <csignal>
#include <string>
#include <vector>

namespace ndtcu::cli {

/// The name of the lock file a run keeps in its output folder.
inline constexpr const char* kOutputLockFile = ".ndtcu.lock";

/// An output folder taken by this run: created when missing, then locked (flock on
/// `DIR/.ndtcu.lock`, exclusive, never waited for) until this object goes or the process
/// ends, however it ends. The lock file holds the holder's pid, command and start time, and
/// a second run into the folder fails at once with an Error that names them. The lock file
/// is removed when this object goes (a run that ends, also by an error or a signal it
/// handles), so a finished run leaves only its results; a lock is taken only while the path
/// names the file locked, so two runs never hold two different files. A run killed
/// outright leaves the file, naming it; the next run takes it over.
class OutputFolder {
 public:
  /// Takes `dir` for `command` (e.g. "ndtcu localize"). Throws Error when the folder cannot
  /// be made or written, or another run holds it.
  OutputFolder(std::string dir, const std::string& command);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  /// Removes `names` (files of the folder, as an earlier run left them: a link is removed,
  /// never followed) and every temporary file a killed writer left (is_output_temporary()),
  /// so no earlier result stays beside this run's. Throws IoError naming one that cannot go.
  void remove_earlier(const std::vector<std::string>& names) const;

  /// The folder.
  const std::string& path() const noexcept { return dir_; }
  /// When the run took the folder (UTC, ISO 8601, seconds).
  const std::string& started() const noexcept { return started_; }

 private:
  std::string dir_, started_, lock_path_;
  int fd_ = -1;
};

/// The current time, UTC, ISO 8601 to the second ("2026-11-28T00:35:12Z").
std::string utc_now_iso8601();

/// SIGINT and SIGTERM, while this lives, are noted rather than acted on: a run polls
/// received() between two steps (frames), finishes what it has and exits with
/// exit_code(). A signal the process ignores (a background job of a script ignores SIGINT)
/// stays ignored. The handlers it replaced are restored when it goes (the command line also
/// runs in-process, in the tests). One at a time.
class InterruptWatch {
 public:
  InterruptWatch();
  ~InterruptWatch();
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

  /// The first signal received (SIGINT or SIGTERM), 0 while none.
  int received() const noexcept;
  /// The shell's code for a process stopped by `signal`: 128 + its number (130 for
  /// SIGINT, 143 for SIGTERM).
  static int exit_code(int signal) noexcept { return 128 + signal; }
  /// "SIGINT", "SIGTERM".
  static const char* name(int signal) noexcept;

 private:
  struct sigaction old_int_, old_term_;
};

}  // namespace ndtcu::cli
