#include "bag_internal.hpp"

#include <bzlib.h>
#include <fcntl.h>
#include <lz4frame.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <memory>

namespace ndtcu::rosbag::detail {

namespace {

class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path) {
    name_ = path;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      throw IoError(path, errno == ENOENT ? "no such file" : std::string("cannot open: ") + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw IoError(path, "not a regular file");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~FileSource() override { ::close(fd_); }
  void read(std::uint64_t offset, std::size_t n, char* out, const char* what) const override {
    if (offset > size_ || n > size_ - offset) {
      throw IoError(name_, std::string("truncated ") + what + ": " + std::to_string(n) + " bytes at offset " +
                               std::to_string(offset) + " run past the end of the file (" +
                               std::to_string(size_) + " bytes)");
    }
    std::size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        throw IoError(name_, std::string("read error in ") + what + " at offset " + std::to_string(offset + done) +
                                 (r == 0 ? ": the file shrank while it was read" : std::string(": ") + std::strerror(errno)));
      }
      done += static_cast<std::size_t>(r);
    }
  }

 private:
  int fd_ = -1;
};

class MemorySource : public ByteSource {
 public:
  MemorySource(std::string_view bytes, const std::string& name) : bytes_(bytes) {
    name_ = name;
    size_ = bytes.size();
  }
  void read(std::uint64_t offset, std::size_t n, char* out, const char* what) const override {
    if (offset > size_ || n > size_ - offset) {
      throw IoError(name_, std::string("truncated ") + what + ": " + std::to_string(n) + " bytes at offset " +
                               std::to_string(offset) + " run past the end of the file (" +
                               std::to_string(size_) + " bytes)");
    }
    if (n > 0) std::memcpy(out, bytes_.data() + offset, n);
  }

 private:
  std::string_view bytes_;
};

}  // namespace

std::unique_ptr<ByteSource> ByteSource::open_file(const std::string& path) { return std::make_unique<FileSource>(path); }

std::unique_ptr<ByteSource> ByteSource::wrap(std::string_view bytes, const std::string& name) {
  return std::make_unique<MemorySource>(bytes, name);
}

std::string ByteSource::read_string(std::uint64_t offset, std::uint64_t n, const char* what) const {
  // Checked before the allocation: a lying length never allocates beyond the file.
  if (offset > size_ || n > size_ - offset) {
    throw IoError(name_, std::string("truncated ") + what + ": " + std::to_string(n) + " bytes at offset " +
                             std::to_string(offset) + " run past the end of the file (" + std::to_string(size_) +
                             " bytes)");
  }
  std::string out(static_cast<std::size_t>(n), '\0');
  read(offset, static_cast<std::size_t>(n), out.data(), what);
  return out;
}

void Cursor::need(std::uint64_t n, const char* field) const {
  if (n > remaining()) {
    fail(std::string("truncated ") + field + ": needs " + std::to_string(n) + " bytes, " +
         std::to_string(remaining()) + " remain");
  }
}

void Cursor::fail(const std::string& why) const { throw IoError(file_, what_ + ": " + why); }

namespace {

// The output of a decompression, grown as the data expands and never beyond the size the
// bag declares. A chunk's header may claim any size up to the cap (1 GiB): sized by the
// claim, a 13 KB file took 1 GiB before a byte was decompressed. Grown from what its
// compressed bytes make at a ratio of 8 (point clouds compress 2 to 4 fold), doubling, a
// chunk costs what its data expands to (at most twice that while the last doubling is
// copied), whatever it claims.
class Expansion {
 public:
  Expansion(std::uint64_t declared, std::size_t compressed) : declared_(declared) {
    constexpr std::uint64_t kFirst = 64 * 1024;
    out_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(
        declared_, std::max<std::uint64_t>(kFirst, static_cast<std::uint64_t>(compressed) * 8))));
  }
  // Where the next bytes go and how many fit; a one-byte spare once the declared size is
  // reached (`full()`), so that a byte beyond it is seen without being kept.
  char* next() {
    if (produced_ == out_.size() && out_.size() < declared_) {
      out_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(declared_, 2 * static_cast<std::uint64_t>(out_.size()))));
    }
    return full() ? &spare_ : out_.data() + produced_;
  }
  std::size_t room() const { return full() ? 1 : out_.size() - produced_; }
  bool full() const { return produced_ == declared_; }
  void wrote(std::size_t n) {
    if (!full()) produced_ += n;
  }
  std::uint64_t produced() const { return produced_; }
  std::string take() {
    out_.resize(static_cast<std::size_t>(produced_));
    return std::move(out_);
  }

 private:
  std::uint64_t declared_;
  std::uint64_t produced_ = 0;
  std::string out_;
  char spare_ = 0;
};

}  // namespace

std::string decompress(std::string_view in, const std::string& method, std::uint64_t declared, const std::string& file,
                       const std::string& what) {
  auto fail = [&](const std::string& why) -> IoError {
    return IoError(file, what + ": " + method + " data: " + why);
  };
  const auto beyond = [&] { return fail("expands beyond the " + std::to_string(declared) + " bytes the bag declares"); };
  Expansion out(declared, in.size());
  if (method == "zstd") {
    std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> ctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
    if (!ctx) throw fail("cannot create a zstd context");
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    while (true) {
      const bool full = out.full();
      ZSTD_outBuffer output{out.next(), out.room(), 0};
      const std::size_t r = ZSTD_decompressStream(ctx.get(), &output, &input);
      if (ZSTD_isError(r)) throw fail(ZSTD_getErrorName(r));
      if (full && output.pos > 0) throw beyond();
      out.wrote(output.pos);
      if (input.pos == input.size && r == 0) break;  // every frame decoded and flushed
      if (input.pos == input.size && output.pos < output.size) {
        throw fail("the data ends early (" + std::to_string(out.produced()) + " of " + std::to_string(declared) +
                   " bytes)");
      }
    }
  } else if (method == "lz4") {
    LZ4F_dctx* raw = nullptr;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&raw, LZ4F_VERSION))) throw fail("cannot create an lz4 context");
    std::unique_ptr<LZ4F_dctx, decltype(&LZ4F_freeDecompressionContext)> ctx(raw, &LZ4F_freeDecompressionContext);
    std::size_t in_pos = 0;
    std::size_t hint = 1;
    while (hint != 0) {
      std::size_t src = in.size() - in_pos;
      if (src == 0) {
        throw fail("the lz4 frame ends early (" + std::to_string(out.produced()) + " of " + std::to_string(declared) +
                   " bytes)");
      }
      const bool full = out.full();
      char* dst_ptr = out.next();
      std::size_t dst = out.room();
      hint = LZ4F_decompress(ctx.get(), dst_ptr, &dst, in.data() + in_pos, &src, nullptr);
      if (LZ4F_isError(hint)) throw fail(LZ4F_getErrorName(hint));
      if (full && dst > 0) throw beyond();
      // No progress with input pending: the frame wants to write past the declared size.
      if (src == 0 && dst == 0 && hint != 0) throw beyond();
      in_pos += src;
      out.wrote(dst);
    }
  } else if (method == "bz2") {
    if (in.size() > std::numeric_limits<unsigned int>::max()) throw fail("chunk over 4 GiB");
    bz_stream bz{};
    if (BZ2_bzDecompressInit(&bz, 0, 0) != BZ_OK) throw fail("cannot create a bz2 stream");
    std::unique_ptr<bz_stream, void (*)(bz_stream*)> end(&bz, [](bz_stream* b) { BZ2_bzDecompressEnd(b); });
    // bzlib takes non-const pointers but does not write the source.
    bz.next_in = const_cast<char*>(in.data());
    bz.avail_in = static_cast<unsigned int>(in.size());
    while (true) {
      const bool full = out.full();
      bz.next_out = out.next();
      const unsigned int room = static_cast<unsigned int>(std::min<std::size_t>(out.room(), 1u << 30));
      bz.avail_out = room;
      const int r = BZ2_bzDecompress(&bz);
      if (r != BZ_OK && r != BZ_STREAM_END) throw fail("corrupt bz2 data (bzlib error " + std::to_string(r) + ")");
      const std::size_t wrote = room - bz.avail_out;
      if (full && wrote > 0) throw beyond();
      out.wrote(wrote);
      if (r == BZ_STREAM_END) break;
      if (bz.avail_in == 0 && wrote == 0) {
        throw fail("the bz2 stream ends early (" + std::to_string(out.produced()) + " of " + std::to_string(declared) +
                   " bytes)");
      }
    }
  } else {
    throw IoError(file, what + ": unknown compression '" + method + "' (known: none, zstd, lz4, bz2)");
  }
  if (out.produced() != declared) {
    throw fail("expands to " + std::to_string(out.produced()) + " bytes, the bag declares " + std::to_string(declared));
  }
  return out.take();
}

std::string decompress_zstd_capped(std::string_view in, std::uint64_t cap, const std::string& file,
                                   const std::string& what) {
  ZSTD_DCtx* ctx = ZSTD_createDCtx();
  if (!ctx) throw IoError(file, what + ": cannot create a zstd context");
  std::string out;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  char buffer[1 << 16];
  std::size_t r = 1;
  while (true) {
    ZSTD_outBuffer output{buffer, sizeof(buffer), 0};
    r = ZSTD_decompressStream(ctx, &output, &input);
    if (ZSTD_isError(r)) {
      ZSTD_freeDCtx(ctx);
      throw IoError(file, what + ": zstd data: " + ZSTD_getErrorName(r));
    }
    if (out.size() + output.pos > cap) {
      ZSTD_freeDCtx(ctx);
      throw IoError(file, what + ": zstd data expands beyond " + std::to_string(cap) + " bytes");
    }
    out.append(buffer, output.pos);
    if (input.pos == input.size && output.pos < output.size) break;
  }
  ZSTD_freeDCtx(ctx);
  if (r != 0) throw IoError(file, what + ": zstd data: the frame ends early");
  return out;
}

void Index::note_compression(const std::string& method) {
  if (method.empty() || method == "none") return;
  if (std::find(compressions.begin(), compressions.end(), method) == compressions.end()) compressions.push_back(method);
}

std::shared_ptr<const std::string> ChunkedStorage::chunk(std::size_t k, const std::string& context) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, bytes] : cache_) {
      if (key == k) return bytes;
    }
  }
  const ChunkLocation& c = chunks.at(k);
  std::string raw = source_->read_string(c.offset, c.compressed, "chunk");
  std::shared_ptr<const std::string> bytes;
  if (c.compression.empty() || c.compression == "none") {
    bytes = std::make_shared<const std::string>(std::move(raw));
  } else {
    bytes = std::make_shared<const std::string>(
        decompress(raw, c.compression, c.uncompressed, source_->name(), context + ": chunk " + std::to_string(k)));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // A few chunks stay: the readers of a sequence work on neighbouring messages.
  constexpr std::size_t kCachedChunks = 4;
  if (cache_.size() >= kCachedChunks) cache_.erase(cache_.begin());
  cache_.emplace_back(k, bytes);
  return bytes;
}

std::string ChunkedStorage::read(const MessageRef& m, const std::string& context) const {
  if (m.chunk < 0) return source_->read_string(m.offset, m.length, "message data");
  const auto bytes = chunk(static_cast<std::size_t>(m.chunk), context);
  // The index was built from these very bytes; checked again all the same.
  if (m.offset > bytes->size() || m.length > bytes->size() - m.offset) {
    throw IoError(source_->name(), context + ": message lies outside its chunk");
  }
  return bytes->substr(static_cast<std::size_t>(m.offset), static_cast<std::size_t>(m.length));
}

}  // namespace ndtcu::rosbag::detail
