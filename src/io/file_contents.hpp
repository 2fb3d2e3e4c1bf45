#pragma once
// A whole file read into memory, with the checks every reader needs first: missing file,
// directory, empty file, unreadable file -> IoError naming the path. The bytes are copied
// (pread), not memory-mapped: a mapped file that shrinks while it is parsed kills the
// process with SIGBUS, whereas a copy is checked once, here, and a file that changed while
// it was read (shorter, longer, rewritten in place) is an IoError. Changed means: its size,
// modification or status-change time differ after the read, or, unless no one held it open
// for writing and it was last modified more than a second before, a second read of the
// file finds other bytes than the first (a write already under way when the file was
// opened has stamped its times before copying its bytes, so only the bytes show it). A
// file open for writing elsewhere and modified in the last 2 s is being written: an error;
// one open for writing otherwise is checked once more after a pause (see read_all).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

struct stat;

namespace ndtcu::detail {

class FileContents {
 public:
  /// Reads all of `path`; throws IoError naming it.
  explicit FileContents(const std::string& path);
  ~FileContents();
  FileContents(const FileContents&) = delete;
  FileContents& operator=(const FileContents&) = delete;

  /// The file's bytes, as they were when it was read.
  std::string_view bytes() const noexcept { return {data_, size_}; }

 private:
  // `writers_at_open`: whether another descriptor held the file open for writing when it
  // was opened (nullopt: unknown); `age_at_open`: seconds since its last modification then.
  void read_all(const std::string& path, int fd, const struct stat& before, std::optional<bool> writers_at_open,
                double age_at_open);
  // IoError when the bytes of the file (open as `fd`) are not those read.
  void check_same_bytes(const std::string& path, int fd) const;

  // Anonymous memory of our own (no file behind it, so nothing can take it away).
  char* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Test seam: when set, FileContents calls it with the path once the file is open and its
/// size known, before the first byte is read (where another process may truncate it).
/// Null (the default) in every program but the tests.
extern void (*file_contents_before_read_hook)(const std::string& path);

/// Test seam: when set, FileContents calls it with the path once every byte has been read,
/// before the checks that the file did not change. Null in every program but the tests.
extern void (*file_contents_after_read_hook)(const std::string& path);

/// Test seam: when set, FileContents calls it with the path before the pause after which a
/// file that may be under a write is checked once more. Null in every program but the tests.
extern void (*file_contents_before_pause_hook)(const std::string& path);

}  // namespace ndtcu::detail
