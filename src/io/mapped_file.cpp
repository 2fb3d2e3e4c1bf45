#include "mapped_file.hpp"

#include <ndtcu/error.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ndtcu::detail {

MappedFile::MappedFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw IoError(path, errno == ENOENT ? "no such file" : std::string("cannot stat: ") + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) throw IoError(path, "is a directory, not a point-cloud file");
  if (!S_ISREG(st.st_mode)) throw IoError(path, "is not a regular file");
  if (st.st_size == 0) throw IoError(path, "empty file (0 bytes)");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path, std::string("cannot open: ") + std::strerror(errno));
  size_ = static_cast<std::size_t>(st.st_size);
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw IoError(path, std::string("cannot map: ") + std::strerror(map_errno));
  ::madvise(p, size_, MADV_SEQUENTIAL);
  data_ = static_cast<const char*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

}  // namespace ndtcu::detail
