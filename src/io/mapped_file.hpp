#pragma once
// Read-only view of a whole file (mmap), with the checks every reader needs first:
// missing file, directory, empty file, unreadable file -> IoError naming the path.
#include <cstddef>
#include <string>
#include <string_view>

namespace ndtcu::detail {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const noexcept { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ndtcu::detail
