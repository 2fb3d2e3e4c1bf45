#include "file_contents.hpp"

#include <ndtcu/error.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ndtcu::detail {

void (*file_contents_before_read_hook)(const std::string& path) = nullptr;

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
    read_all(path, file.fd, before);
  } catch (...) {
    ::munmap(data_, size_);
    throw;
  }
}

FileContents::~FileContents() { ::munmap(data_, size_); }

void FileContents::read_all(const std::string& path, int fd, const struct stat& before) {
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
  // A file that grew, or was rewritten in place, while it was read: its bytes may be half
  // old, half new.
  struct stat after {};
  if (::fstat(fd, &after) != 0) throw IoError(path, std::string("cannot stat: ") + std::strerror(errno));
  if (after.st_size != before.st_size) {
    throw IoError(path, changed_while_read(expected, fmt::format("{} after", static_cast<std::uint64_t>(after.st_size))));
  }
  if (after.st_mtim.tv_sec != before.st_mtim.tv_sec || after.st_mtim.tv_nsec != before.st_mtim.tv_nsec) {
    throw IoError(path, changed_while_read(expected, "then modified"));
  }
}

}  // namespace ndtcu::detail
