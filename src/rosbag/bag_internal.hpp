#pragma once
// Internals shared by the bag readers: where bytes come from (a file read with pread, or
// memory), a bounds-checked cursor over them, decompression under a declared size, and
// the index every storage format fills.
#include <ndtcu/error.hpp>
#include <ndtcu/rosbag.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ndtcu::rosbag::detail {

// CDR, little endian: primitives aligned to their size from the end of the 4-byte
// encapsulation header; strings carry their NUL.
class CdrBuffer {
 public:
  CdrBuffer() { bytes.assign("\x00\x01\x00\x00", 4); }
  template <typename T>
  void put(T v) {
    while ((bytes.size() - 4) % sizeof(T) != 0) bytes.push_back('\0');
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes.append(b, sizeof(T));
  }
  void str(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size() + 1));
    bytes.append(s);
    bytes.push_back('\0');
  }
  std::string bytes;
};

/// Random access to a storage file's bytes. Thread-safe reads (pread or memory).
class ByteSource {
 public:
  /// Opens `path` for reading; throws IoError naming it.
  static std::unique_ptr<ByteSource> open_file(const std::string& path);
  /// Wraps bytes in memory (not copied).
  static std::unique_ptr<ByteSource> wrap(std::string_view bytes, const std::string& name);
  virtual ~ByteSource() = default;
  /// Size in bytes.
  std::uint64_t size() const { return size_; }
  /// The file's name, for errors.
  const std::string& name() const { return name_; }
  /// Reads `n` bytes at `offset`; throws IoError ("truncated ...", naming `what`) when
  /// they are not all there.
  virtual void read(std::uint64_t offset, std::size_t n, char* out, const char* what) const = 0;
  /// read() into a new string; `n` is checked against the size first.
  std::string read_string(std::uint64_t offset, std::uint64_t n, const char* what) const;

 protected:
  std::string name_;
  std::uint64_t size_ = 0;
};

/// A bounds-checked little-endian cursor over a buffer; every failure throws IoError with
/// `file` and `what` (the record being read).
class Cursor {
 public:
  Cursor(std::string_view bytes, const std::string& file, std::string what)
      : bytes_(bytes), file_(file), what_(std::move(what)) {}
  std::size_t remaining() const { return bytes_.size() - pos_; }
  std::size_t position() const { return pos_; }
  bool at_end() const { return pos_ == bytes_.size(); }
  template <typename T>
  T get(const char* field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view bytes(std::uint64_t n, const char* field) {
    need(n, field);
    std::string_view v = bytes_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return v;
  }
  void skip(std::uint64_t n, const char* field) { bytes(n, field); }
  /// A u32-length-prefixed string (MCAP, ROS 1 serialization).
  std::string_view string32(const char* field) { return bytes(get<std::uint32_t>(field), field); }
  [[noreturn]] void fail(const std::string& why) const;

 private:
  void need(std::uint64_t n, const char* field) const;
  std::string_view bytes_;
  const std::string& file_;
  std::string what_;
  std::size_t pos_ = 0;
};

/// Decompresses `in` ("zstd", "lz4" frame, "bz2") into exactly `declared` bytes; anything
/// else (more, fewer, corrupt data, an unknown method) throws IoError naming `file` and
/// `what`. `declared` must already be bounded by the caller's cap.
std::string decompress(std::string_view in, const std::string& method, std::uint64_t declared,
                       const std::string& file, const std::string& what);

/// zstd frames of unknown content size (rosbag2 per-message compression): decompressed
/// with output capped at `cap` bytes.
std::string decompress_zstd_capped(std::string_view in, std::uint64_t cap, const std::string& file,
                                   const std::string& what);

/// A chunk of a storage file: where its compressed bytes lie and what they expand to.
struct ChunkLocation {
  std::uint64_t offset = 0;        ///< of the compressed bytes in the file
  std::uint64_t compressed = 0;    ///< bytes in the file
  std::uint64_t uncompressed = 0;  ///< declared size after decompression
  std::string compression;         ///< "" or "none": stored as is
};

/// A topic while indexing: its description and its messages.
struct TopicIndex {
  TopicInfo info;
  std::vector<MessageRef> messages;
};

/// What a storage file's reader fills while indexing, and reads messages from after.
class Storage {
 public:
  virtual ~Storage() = default;
  /// The serialized bytes of `m`. Thread-safe.
  virtual std::string read(const MessageRef& m, const std::string& context) const = 0;
};

/// The index shared by all storage files of a bag, keyed by topic name.
struct Index {
  std::map<std::string, TopicIndex> topics;
  std::vector<std::string> compressions;  ///< methods seen, first use order
  std::uint64_t chunks = 0;
  void note_compression(const std::string& method);
};

/// Chunked storage (MCAP, ROS 1): chunks decompressed on demand, the last few kept.
class ChunkedStorage : public Storage {
 public:
  ChunkedStorage(std::unique_ptr<ByteSource> source, BagReadLimits limits)
      : source_(std::move(source)), limits_(limits) {}
  std::string read(const MessageRef& m, const std::string& context) const override;
  /// The decompressed bytes of chunk `k` (cached).
  std::shared_ptr<const std::string> chunk(std::size_t k, const std::string& context) const;
  const ByteSource& source() const { return *source_; }
  std::vector<ChunkLocation> chunks;

 protected:
  std::unique_ptr<ByteSource> source_;
  BagReadLimits limits_;

 private:
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<std::size_t, std::shared_ptr<const std::string>>> cache_;  // most recent last
};

/// Indexes an MCAP file into `index` (messages get `file_no`); returns its storage.
std::unique_ptr<Storage> index_mcap(std::unique_ptr<ByteSource> source, std::uint32_t file_no, Index& index,
                                    const BagReadLimits& limits);
/// Indexes a ROS 1 bag (format 2.0) into `index`.
std::unique_ptr<Storage> index_ros1(std::unique_ptr<ByteSource> source, std::uint32_t file_no, Index& index,
                                    const BagReadLimits& limits);
/// Indexes a rosbag2 sqlite3 file; `message_zstd` when metadata.yaml says messages are
/// zstd-compressed one by one.
std::unique_ptr<Storage> index_sqlite3(const std::string& path, std::uint32_t file_no, Index& index,
                                       bool message_zstd, const BagReadLimits& limits);

}  // namespace ndtcu::rosbag::detail
