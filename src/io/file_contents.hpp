#pragma once
// A whole file read into memory, with the checks every reader needs first: missing file,
// directory, empty file, unreadable file -> IoError naming the path. The bytes are copied
// (pread), not memory-mapped: a mapped file that shrinks while it is parsed kills the
// process with SIGBUS, whereas a copy is checked once, here, and a file that changed while
// it was read (shorter, longer, rewritten) is an IoError.
#include <cstddef>
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
  void read_all(const std::string& path, int fd, const struct stat& before);

  // Anonymous memory of our own (no file behind it, so nothing can take it away).
  char* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Test seam: when set, FileContents calls it with the path once the file is open and its
/// size known, before the first byte is read (where another process may truncate it).
/// Null (the default) in every program but the tests.
extern void (*file_contents_before_read_hook)(const std::string& path);

}  // namespace ndtcu::detail
