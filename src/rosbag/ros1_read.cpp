// ROS 1 bags, format 2.0 (http://wiki.ros.org/Bags/Format/2.0): the line "#ROSBAG V2.0\n",
// then records `u32 header length, header, u32 data length, data`; a header is a list of
// `u32 length, name=value` fields with the record's kind in `op`. The file is read front to
// back (connections are repeated at the end, and the index records are not needed), and
// each chunk is decompressed once to index the messages in it.
#include "bag_internal.hpp"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace ndtcu::rosbag::detail {

namespace {

constexpr std::string_view kMagic = "#ROSBAG V2.0\n";

enum Op : std::uint8_t {
  kMessageData = 0x02,
  kBagHeader = 0x03,
  kIndexData = 0x04,
  kChunk = 0x05,
  kChunkInfo = 0x06,
  kConnection = 0x07,
};

// The fields of a record header (or of a connection record's data), by name.
class Fields {
 public:
  Fields(std::string_view bytes, const std::string& file, const std::string& what) : file_(file), what_(what) {
    Cursor c(bytes, file, what);
    while (!c.at_end()) {
      const std::string_view field = c.string32("header field");
      const auto eq = field.find('=');
      if (eq == std::string_view::npos) c.fail("header field without '='");
      fields_.emplace_back(field.substr(0, eq), field.substr(eq + 1));
    }
  }
  std::optional<std::string_view> find(std::string_view name) const {
    for (const auto& [k, v] : fields_) {
      if (k == name) return v;
    }
    return std::nullopt;
  }
  std::string_view get(std::string_view name) const {
    if (auto v = find(name)) return *v;
    throw IoError(file_, what_ + ": the field '" + std::string(name) + "' is missing");
  }
  template <typename T>
  T number(std::string_view name) const {
    const std::string_view v = get(name);
    if (v.size() != sizeof(T)) {
      throw IoError(file_, what_ + ": field '" + std::string(name) + "' has " + std::to_string(v.size()) +
                               " bytes, expected " + std::to_string(sizeof(T)));
    }
    T out;
    std::memcpy(&out, v.data(), sizeof(T));
    return out;
  }

 private:
  std::vector<std::pair<std::string_view, std::string_view>> fields_;
  const std::string& file_;
  std::string what_;
};

struct Connection {
  std::string topic;
  std::string type;
};

struct PendingMessage {
  std::uint32_t connection;
  MessageRef ref;
};

class Ros1Indexer {
 public:
  Ros1Indexer(const ByteSource& source, std::uint32_t file_no, const BagReadLimits& limits)
      : src_(source), file_no_(file_no), limits_(limits) {}

  void run(ChunkedStorage& storage, Index& index) {
    const std::string& name = src_.name();
    if (src_.size() < kMagic.size()) throw IoError(name, "not a ROS 1 bag: shorter than its first line '#ROSBAG V2.0'");
    std::string magic = src_.read_string(0, kMagic.size(), "version line");
    if (magic != kMagic) {
      if (magic.rfind("#ROSBAG V", 0) == 0) {
        throw IoError(name, "ROS 1 bag version '" + magic.substr(9, 3) + "' is not supported (only 2.0)");
      }
      throw IoError(name, "not a ROS 1 bag: the first line is not '#ROSBAG V2.0'");
    }
    std::uint64_t pos = kMagic.size();
    std::uint64_t record_no = 0;
    while (pos < src_.size()) {
      const std::string what = "record " + std::to_string(record_no) + " at offset " + std::to_string(pos);
      const std::uint64_t left = src_.size() - pos;
      std::uint32_t header_length;
      if (left < 4) throw IoError(name, what + ": truncated: " + std::to_string(left) + " bytes, a record starts with 4");
      src_.read(pos, 4, reinterpret_cast<char*>(&header_length), "record header length");
      if (header_length > left - 4) {
        throw IoError(name, what + ": header claims " + std::to_string(header_length) + " bytes, " +
                                std::to_string(left - 4) + " remain in the file");
      }
      const std::string header = src_.read_string(pos + 4, header_length, "record header");
      const std::uint64_t data_length_at = pos + 4 + header_length;
      if (src_.size() - data_length_at < 4) throw IoError(name, what + ": truncated before its data length");
      std::uint32_t data_length;
      src_.read(data_length_at, 4, reinterpret_cast<char*>(&data_length), "record data length");
      const std::uint64_t data = data_length_at + 4;
      if (data_length > src_.size() - data) {
        throw IoError(name, what + ": data claims " + std::to_string(data_length) + " bytes, " +
                                std::to_string(src_.size() - data) + " remain in the file");
      }
      const Fields fields(header, name, what);
      const std::string_view op = fields.get("op");
      if (op.size() != 1) throw IoError(name, what + ": field 'op' has " + std::to_string(op.size()) + " bytes, expected 1");
      switch (static_cast<std::uint8_t>(op[0])) {
        case kConnection: {
          const std::string body = src_.read_string(data, data_length, "connection record");
          connection(fields, body, what + " (connection)");
          break;
        }
        case kMessageData: message(fields, -1, data, data_length, what + " (message data)"); break;
        case kChunk: chunk(storage, index, fields, data, data_length, what + " (chunk)"); break;
        case kBagHeader:
        case kIndexData:
        case kChunkInfo: break;
        default:
          throw IoError(name, what + ": unknown record op 0x" + std::to_string(static_cast<unsigned>(static_cast<std::uint8_t>(op[0]))));
      }
      pos = data + data_length;
      ++record_no;
    }
    finish(index);
  }

 private:
  void connection(const Fields& fields, std::string_view body, const std::string& what) {
    const auto id = fields.number<std::uint32_t>("conn");
    const Fields inner(body, src_.name(), what + " data");
    Connection c;
    c.topic = std::string(fields.get("topic"));
    c.type = std::string(inner.get("type"));
    connections_[id] = std::move(c);
  }

  void message(const Fields& fields, std::int64_t chunk, std::uint64_t offset, std::uint64_t length,
               const std::string& what) {
    PendingMessage m;
    m.connection = fields.number<std::uint32_t>("conn");
    const auto time = fields.number<std::uint64_t>("time");
    // sec (u32) then nsec (u32), little endian.
    const std::uint64_t sec = time & 0xffffffffu, nsec = time >> 32;
    if (nsec >= 1000000000u) {
      throw IoError(src_.name(), what + ": time has " + std::to_string(nsec) + " nanoseconds (must be < 1e9)");
    }
    m.ref.time_ns = static_cast<std::int64_t>(sec * 1000000000u + nsec);
    m.ref.file = file_no_;
    m.ref.chunk = chunk;
    m.ref.offset = offset;
    m.ref.length = length;
    pending_.push_back(m);
  }

  void chunk(ChunkedStorage& storage, Index& index, const Fields& fields, std::uint64_t data, std::uint64_t length,
             const std::string& what) {
    const std::string& name = src_.name();
    const std::string compression(fields.get("compression"));
    const std::uint64_t size = fields.number<std::uint32_t>("size");
    if (compression != "none" && compression != "bz2" && compression != "lz4") {
      throw IoError(name, what + ": unknown compression '" + compression + "' (ROS 1 chunks are none, bz2 or lz4)");
    }
    if (compression == "none" && size != length) {
      throw IoError(name, what + ": uncompressed chunk of " + std::to_string(length) + " bytes declares size " +
                              std::to_string(size));
    }
    if (size > limits_.max_chunk_bytes) {
      throw IoError(name, what + ": declares " + std::to_string(size) + " bytes uncompressed, over the limit of " +
                              std::to_string(limits_.max_chunk_bytes));
    }
    const std::size_t k = storage.chunks.size();
    storage.chunks.push_back({data, length, size, compression});
    index.note_compression(compression);
    ++index.chunks;
    const auto bytes = storage.chunk(k, what);
    Cursor c(*bytes, name, what + " inner records");
    std::uint64_t inner = 0;
    while (!c.at_end()) {
      const std::string inner_what = what + ", inner record " + std::to_string(inner++);
      const std::string_view header = c.string32("inner record header");
      const std::uint32_t data_length = c.get<std::uint32_t>("inner record data length");
      const std::size_t start = c.position();
      const std::string_view body = c.bytes(data_length, "inner record data");
      const Fields f(header, name, inner_what);
      const std::string_view op = f.get("op");
      if (op.size() != 1) throw IoError(name, inner_what + ": field 'op' is not one byte");
      if (static_cast<std::uint8_t>(op[0]) == kConnection) {
        connection(f, body, inner_what + " (connection)");
      } else if (static_cast<std::uint8_t>(op[0]) == kMessageData) {
        message(f, static_cast<std::int64_t>(k), start, data_length, inner_what + " (message data)");
      }
    }
  }

  void finish(Index& index) {
    for (const auto& m : pending_) {
      auto c = connections_.find(m.connection);
      if (c == connections_.end()) {
        throw IoError(src_.name(), "a message refers to connection " + std::to_string(m.connection) +
                                       ", which the bag never defines");
      }
      TopicIndex& t = index.topics[c->second.topic];
      if (t.info.name.empty()) {
        t.info.name = c->second.topic;
        t.info.type = c->second.type;
        t.info.encoding = "ros1";
      }
      t.messages.push_back(m.ref);
    }
    for (const auto& [id, c] : connections_) {
      TopicIndex& t = index.topics[c.topic];
      if (t.info.name.empty()) {
        t.info.name = c.topic;
        t.info.type = c.type;
        t.info.encoding = "ros1";
      }
    }
  }

  const ByteSource& src_;
  std::uint32_t file_no_;
  BagReadLimits limits_;
  std::unordered_map<std::uint32_t, Connection> connections_;
  std::vector<PendingMessage> pending_;
};

}  // namespace

std::unique_ptr<Storage> index_ros1(std::unique_ptr<ByteSource> source, std::uint32_t file_no, Index& index,
                                    const BagReadLimits& limits) {
  auto storage = std::make_unique<ChunkedStorage>(std::move(source), limits);
  Ros1Indexer indexer(storage->source(), file_no, limits);
  indexer.run(*storage, index);
  return storage;
}

}  // namespace ndtcu::rosbag::detail
