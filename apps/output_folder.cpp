#include "output_folder.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/output_file.hpp>

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace ndtcu::cli {

namespace {

namespace fs = std::filesystem;

// How often a run opens the lock file anew when another run removed it meanwhile.
constexpr int kLockTries = 100;

// The holder's line in a lock file is short; more is not read.
constexpr std::size_t kHolderBytes = 512;

// The holder named in `fd`'s lock file, trimmed, or a note that it says nothing.
std::string read_holder(int fd) {
  char text[kHolderBytes];
  const ssize_t n = ::pread(fd, text, sizeof(text), 0);
  std::string holder = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string();
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\r' || holder.back() == ' ')) holder.pop_back();
  // Control characters (a file not written by ndtcu) are not printed raw on a terminal.
  for (char& c : holder) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return holder.empty() ? std::string("its pid not written yet") : holder;
}

// Written by the handler on whichever thread takes the signal, read by the run's loop: a
// lock-free atomic is safe in a handler and orders the two threads.
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

extern "C" void note_signal(int signal) {
  int none = 0;
  g_received.compare_exchange_strong(none, signal);  // the first signal counts
}

}  // namespace

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

OutputFolder::OutputFolder(std::string dir, const std::string& command)
    : dir_(std::move(dir)), started_(utc_now_iso8601()) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) {
    throw IoError(dir_, "cannot create output folder" + (ec ? ": " + ec.message() : std::string(": not a folder")));
  }
  lock_path_ = (fs::path(dir_) / kOutputLockFile).string();
  const std::string& lock_path = lock_path_;
  // A run removes its lock file as it ends: a run that opened that file before it went
  // may lock it once it is gone, so a lock counts only while the path still names the file
  // locked; else the file is opened anew (only a run ending in between makes it go, so a
  // few tries do).
  for (int tries = 0;; ++tries) {
    // O_NOFOLLOW: a link planted at the lock's name is refused, never written through.
    fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int err = errno;
      if (err == ELOOP) {
        throw IoError(lock_path, "is a symbolic link; a run's lock file must be a plain file (remove the link)");
      }
      throw IoError(dir_, fmt::format("output folder is not writable (cannot create its lock file {}: {})",
                                      kOutputLockFile, std::strerror(err)));
    }
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0 && tries < kLockTries) {
      ::close(fd_);  // removed by a run that just ended: open it anew
      fd_ = -1;
      continue;
    }
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
      ::close(fd_);
      fd_ = -1;
      throw IoError(lock_path, "is not a plain file of its own (a link or a special file); remove it");
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = err == EWOULDBLOCK ? read_holder(fd_) : std::string();
      ::close(fd_);
      fd_ = -1;
      if (err == EWOULDBLOCK) {
        throw Error(fmt::format("{}: the output folder is in use by another run ({}; lock file {}); wait for it to "
                                "end or choose another --out",
                                dir_, holder, lock_path));
      }
      throw IoError(lock_path, fmt::format("cannot lock the output folder: {}", std::strerror(err)));
    }
    struct stat locked {}, named {};
    if (::fstat(fd_, &locked) == 0 && ::lstat(lock_path.c_str(), &named) == 0 && locked.st_dev == named.st_dev &&
        locked.st_ino == named.st_ino) {
      break;
    }
    ::close(fd_);
    fd_ = -1;
    if (tries == kLockTries) {
      throw IoError(lock_path, "cannot lock the output folder: its lock file keeps being replaced");
    }
  }
  const std::string holder = fmt::format("pid {}, {}, started {}\n", ::getpid(), command, started_);
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
    const int err = errno;
    ::unlink(lock_path.c_str());
    ::close(fd_);
    fd_ = -1;
    throw IoError(lock_path, fmt::format("cannot write the output folder's lock file: {}", std::strerror(err)));
  }
  // The results must have a place before the work starts: a file can be made in the folder.
  try {
    OutputFile probe((fs::path(dir_) / ".ndtcu-write-probe").string());
  } catch (const IoError& e) {
    ::unlink(lock_path.c_str());
    ::close(fd_);
    fd_ = -1;
    throw IoError(dir_, "output folder is not writable (" + e.reason() + ")");
  }
}

OutputFolder::~OutputFolder() {
  if (fd_ < 0) return;
  // Removed while still locked (a run that opened it meanwhile finds its path gone and
  // opens it anew), so that a finished run leaves only its results: two runs of one
  // command give the same folder but for their times. A run killed outright leaves it,
  // naming the run.
  ::unlink(lock_path_.c_str());
  ::close(fd_);  // releases the lock
}

void OutputFolder::remove_earlier(const std::vector<std::string>& names) const {
  std::error_code ec;
  for (const std::string& name : names) {
    const fs::path p = fs::path(dir_) / name;
    fs::remove(p, ec);  // a link itself, never its target
    if (ec) throw IoError(p.string(), "cannot remove an earlier run's file: " + ec.message());
  }
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (!is_output_temporary(entry.path().filename().string())) continue;
    std::error_code remove_ec;
    fs::remove(entry.path(), remove_ec);
    if (remove_ec) throw IoError(entry.path().string(), "cannot remove a killed run's temporary file: " + remove_ec.message());
  }
  if (ec) throw IoError(dir_, "cannot list the output folder: " + ec.message());
}

InterruptWatch::InterruptWatch() {
  g_received.store(0);
  struct sigaction action {};
  action.sa_handler = note_signal;
  sigemptyset(&action.sa_mask);
  // Interrupted system calls restart: the run goes on to the end of its step.
  action.sa_flags = SA_RESTART;
  // A signal ignored when the program started stays ignored (a job a script put in the
  // background ignores the terminal's SIGINT, as POSIX shells arrange).
  ::sigaction(SIGINT, nullptr, &old_int_);
  ::sigaction(SIGTERM, nullptr, &old_term_);
  if (old_int_.sa_handler != SIG_IGN) ::sigaction(SIGINT, &action, nullptr);
  if (old_term_.sa_handler != SIG_IGN) ::sigaction(SIGTERM, &action, nullptr);
}

InterruptWatch::~InterruptWatch() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

int InterruptWatch::received() const noexcept { return g_received.load(); }

const char* InterruptWatch::name(int signal) noexcept {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace ndtcu::cli
