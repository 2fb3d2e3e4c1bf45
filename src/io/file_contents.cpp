#include "file_contents.hpp"

#include <ndtcu/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace ndtcu::detail {

void (*file_contents_before_read_hook)(const std::string& path) = nullptr;
void (*file_contents_after_read_hook)(const std::string& path) = nullptr;
void (*file_contents_before_pause_hook)(const std::string& path) = nullptr;

namespace {

// Closes the descriptor on every way out of the constructor.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

std::string changed_while_read(std::uint64_t expected, const std::string& what) {
  return fmt::format("the file changed while it was read ({} bytes when opened, {}); read it again once it is "
                     "complete",
                     expected, what);
}

bool same_time(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

// IoError when the file open as `fd` is no longer as `before` describes it: another size,
// modification time or status-change time (a write, a truncation, a rewrite in place).
void check_same_stat(const std::string& path, int fd, const struct stat& before) {
  struct stat now {};
  if (::fstat(fd, &now) != 0) throw IoError(path, std::string("cannot stat: ") + std::strerror(errno));
  const auto expected = static_cast<std::uint64_t>(before.st_size);
  if (now.st_size != before.st_size) {
    throw IoError(path, changed_while_read(expected, fmt::format("{} after", static_cast<std::uint64_t>(now.st_size))));
  }
  if (!same_time(now.st_mtim, before.st_mtim) || !same_time(now.st_ctim, before.st_ctim)) {
    throw IoError(path, changed_while_read(expected, "then modified"));
  }
}

// Whether some descriptor other than `fd` holds the file open for writing, as far as the
// kernel says: a read lease is refused (EAGAIN) exactly then. A lease granted is given back
// at once; a writer opening the file in between would have it broken with SIGURG (F_SETSIG),
// a signal ignored unless a program asks for it, instead of SIGIO, which ends a process.
// nullopt where leases cannot tell: a file of another user (without CAP_LEASE), a file
// system without leases.
std::optional<bool> open_for_writing_elsewhere(int fd) {
  if (::fcntl(fd, F_SETSIG, SIGURG) != 0) return std::nullopt;
  if (::fcntl(fd, F_SETLEASE, F_RDLCK) == 0) {
    ::fcntl(fd, F_SETLEASE, F_UNLCK);
    return false;
  }
  if (errno == EAGAIN || errno == EBUSY) return true;
  return std::nullopt;
}

// Seconds since the file's last modification (negative for one the clock puts in the future).
double seconds_since_modified(const struct stat& st) {
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec - st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec - st.st_mtim.tv_nsec);
}

}  // namespace

FileContents::FileContents(const std::string& path) {
  // O_NONBLOCK: a FIFO given by mistake is refused below instead of blocking the open;
  // it changes nothing for a regular file.
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) {
    if (errno == ENOENT) throw IoError(path, "no such file");
    if (errno == EISDIR) throw IoError(path, "is a directory, not a point-cloud file");
    throw IoError(path, std::string("cannot open: ") + std::strerror(errno));
  }
  // fstat on the descriptor, not stat on the name: the size is that of the file read.
  struct stat before {};
  if (::fstat(file.fd, &before) != 0) throw IoError(path, std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(before.st_mode)) throw IoError(path, "is a directory, not a point-cloud file");
  if (!S_ISREG(before.st_mode)) throw IoError(path, "is not a regular file");
  if (before.st_size == 0) throw IoError(path, "empty file (0 bytes)");
  const auto expected = static_cast<std::uint64_t>(before.st_size);
  const std::optional<bool> writers_at_open = open_for_writing_elsewhere(file.fd);
  const double age_at_open = seconds_since_modified(before);
  if (file_contents_before_read_hook) file_contents_before_read_hook(path);

  // An anonymous mapping asked for transparent huge pages rather than new char[]: filling
  // 80 MB of 4 KiB pages costs 20,000 page faults, 40 ms on a Xeon VM against 8 ms with
  // huge pages (and the 3 ms of the mmap-ed file this replaces).
  const std::size_t size = static_cast<std::size_t>(expected);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw IoError(path, fmt::format("cannot hold the file in memory ({} bytes): {}", expected, std::strerror(errno)));
  }
  data_ = static_cast<char*>(p);
  size_ = size;
  ::madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP it reads as before
  ::posix_fadvise(file.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  try {
    read_all(path, file.fd, before, writers_at_open, age_at_open);
  } catch (...) {
    ::munmap(data_, size_);
    throw;
  }
}

FileContents::~FileContents() { ::munmap(data_, size_); }

void FileContents::read_all(const std::string& path, int fd, const struct stat& before,
                            std::optional<bool> writers_at_open, double age_at_open) {
  const auto expected = static_cast<std::uint64_t>(before.st_size);
  std::size_t done = 0;
  while (done < size_) {
    // pread reads at most 0x7ffff000 bytes a call on Linux; loop until all are in.
    const ssize_t got = ::pread(fd, data_ + done, size_ - done, static_cast<off_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IoError(path, fmt::format("read error at byte {}: {}", done, std::strerror(errno)));
    }
    if (got == 0) throw IoError(path, changed_while_read(expected, fmt::format("only {} could be read", done)));
    done += static_cast<std::size_t>(got);
  }
  if (file_contents_after_read_hook) file_contents_after_read_hook(path);
  // A file that grew, or was rewritten in place, while it was read: its bytes may be half
  // old, half new. A write stamps the times when it starts, before it copies its bytes, and
  // stamps them again only once the clock has moved on (kernels before 6.13: a tick of a
  // few ms): a write already under way when the file was opened, or one within the tick of
  // the first stat, leaves the times as they were.
  check_same_stat(path, fd, before);
  constexpr double kRecent = 2.0;  // seconds
  const std::optional<bool> writers_now = open_for_writing_elsewhere(fd);
  const bool writers = writers_at_open.value_or(false) || writers_now.value_or(false);
  const bool known = writers_at_open.has_value() && writers_now.has_value();
  // Open for writing elsewhere (when opened or now) and modified in the last 2 s: it is
  // being written.
  if (writers && age_at_open < kRecent) {
    throw IoError(path, fmt::format("the file is being written: it is open for writing elsewhere and was modified "
                                    "{:.3g} s ago; read it once it is complete",
                                    std::max(0.0, age_at_open)));
  }
  // Nobody held it open for writing when it was opened or holds it now, and it was last
  // modified well before (beyond any clock tick): no write was under way, and a write since
  // has stamped a new time, which the stat above saw. Otherwise a second read must find the
  // same bytes (it sees what a write under way changed after the first read passed), the
  // times checked again after it.
  if (!(known && !writers && age_at_open > 1.0)) {
    check_same_bytes(path, fd);
    check_same_stat(path, fd, before);
  }
  // Both reads can still agree on half a write: one that the scheduler (or the kernel's
  // throttling of dirty pages) stopped in the middle while both ran. A file open for
  // writing elsewhere (not modified lately: that was an error above) or, where leases
  // cannot tell, one modified in the last 2 s, is checked once more after a pause long
  // enough for a stopped writer to run on (a few scheduler periods).
  if (writers || (!known && age_at_open < kRecent)) {
    if (file_contents_before_pause_hook) file_contents_before_pause_hook(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    check_same_stat(path, fd, before);
    check_same_bytes(path, fd);
    check_same_stat(path, fd, before);
  }
}

void FileContents::check_same_bytes(const std::string& path, int fd) const {
  // In pieces of 1 MiB (they stay in cache for the comparison): the page cache holds the
  // file after the first read, so this costs a copy of it, not a second trip to the disk.
  constexpr std::size_t kPiece = std::size_t{1} << 20;
  const std::size_t piece = std::min(kPiece, size_);
  std::unique_ptr<char[]> buffer(new char[piece]);
  std::size_t done = 0;
  while (done < size_) {
    const std::size_t want = std::min(piece, size_ - done);
    const ssize_t got = ::pread(fd, buffer.get(), want, static_cast<off_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IoError(path, fmt::format("read error at byte {}: {}", done, std::strerror(errno)));
    }
    if (got == 0) {
      throw IoError(path, changed_while_read(size_, fmt::format("only {} could be read the second time", done)));
    }
    const auto n = static_cast<std::size_t>(got);
    if (std::memcmp(buffer.get(), data_ + done, n) != 0) {
      std::size_t at = 0;
      while (buffer[at] == data_[done + at]) ++at;
      throw IoError(path, changed_while_read(size_, fmt::format("a second read finds other bytes from byte {}", done + at)));
    }
    done += n;
  }
}

}  // namespace ndtcu::detail
