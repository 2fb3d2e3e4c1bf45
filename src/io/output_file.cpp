// Files written whole: a temporary file beside the destination, renamed onto it.
#include <ndtcu/error.hpp>
#include <ndtcu/output_file.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

namespace ndtcu {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTemporaryMark = ".ndtcu-tmp.";
// Bytes buffered before a write(2): few system calls for a file written line by line.
constexpr std::size_t kBufferBytes = std::size_t{1} << 20;
// The destination's name is cut to this many bytes in the temporary name, so that the
// mark, a pid and a counter still fit the 255 bytes a file name may have.
constexpr std::size_t kNameBytesKept = 200;

std::string errno_text(int err) { return std::strerror(err); }

// Writes all of `size` bytes to `fd`, through interrupted and partial writes.
bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  const fs::path destination(path_);
  const std::string name = destination.filename().string();
  if (name.empty() || name == "." || name == "..") throw IoError(path_, "names a folder, not a file to write");
  const fs::path folder = destination.parent_path();
  static std::atomic<unsigned> counter{0};
  // O_EXCL | O_NOFOLLOW: the temporary file is always a new one, never an entry (or a
  // link) that was there; a clash with one (another process's, a planted name) takes the
  // next number.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const std::string temporary_name = "." + name.substr(0, kNameBytesKept) + std::string(kTemporaryMark) +
                                       std::to_string(::getpid()) + "." + std::to_string(counter++);
    temporary_ = (folder / temporary_name).string();
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) {
      const int err = errno;
      const std::string where = folder.empty() ? std::string(".") : folder.string();
      throw IoError(path_, err == ENOENT ? "its folder " + where + " does not exist"
                                         : "cannot create a file in " + where + ": " + errno_text(err));
    }
  }
  throw IoError(path_, "cannot create a temporary file beside it: 1000 names taken (" + temporary_ + ")");
}

OutputFile::~OutputFile() { discard(); }

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      temporary_(std::move(other.temporary_)),
      buffer_(std::move(other.buffer_)),
      fd_(other.fd_),
      committed_(other.committed_) {
  other.fd_ = -1;
  other.temporary_.clear();
}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    discard();
    path_ = std::move(other.path_);
    temporary_ = std::move(other.temporary_);
    buffer_ = std::move(other.buffer_);
    fd_ = other.fd_;
    committed_ = other.committed_;
    other.fd_ = -1;
    other.temporary_.clear();
  }
  return *this;
}

void OutputFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
}

void OutputFile::write(const void* data, std::size_t size) {
  if (fd_ < 0) throw IoError(path_, committed_ ? "written to after its commit" : "written to after a failure");
  const char* bytes = static_cast<const char*>(data);
  if (buffer_.size() + size <= kBufferBytes) {
    buffer_.append(bytes, size);
    return;
  }
  flush();
  if (size >= kBufferBytes) {
    if (!write_all(fd_, bytes, size)) throw IoError(path_, "write failed: " + errno_text(errno));
  } else {
    buffer_.append(bytes, size);
  }
}

void OutputFile::write(std::string_view text) { write(text.data(), text.size()); }

void OutputFile::flush() {
  if (fd_ < 0) throw IoError(path_, committed_ ? "written to after its commit" : "written to after a failure");
  if (buffer_.empty()) return;
  if (!write_all(fd_, buffer_.data(), buffer_.size())) throw IoError(path_, "write failed: " + errno_text(errno));
  buffer_.clear();
}

void OutputFile::commit() {
  flush();
  // No fsync: the guarantee is against a writer that stops (killed, an error), which the
  // rename alone gives; ext4 and XFS also flush a file renamed over another before the
  // rename is committed (ext4's auto_da_alloc), and a sync per file would cost the
  // simulator and the tiler one disk flush per scan or tile.
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    discard();
    throw IoError(path_, "write failed: " + errno_text(err));
  }
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    discard();
    throw IoError(path_, err == EISDIR || err == ENOTEMPTY || err == EEXIST
                             ? std::string("is a folder; cannot replace it with a file")
                             : "cannot put the written file in place: " + errno_text(err));
  }
  committed_ = true;
  buffer_.clear();
  buffer_.shrink_to_fit();
}

void write_file_whole(const std::string& path, std::string_view bytes) {
  OutputFile f(path);
  f.write(bytes);
  f.commit();
}

bool is_output_temporary(std::string_view file_name) {
  return !file_name.empty() && file_name.front() == '.' && file_name.find(kTemporaryMark) != std::string_view::npos;
}

}  // namespace ndtcu
