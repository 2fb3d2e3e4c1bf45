// MCAP (https://mcap.dev/spec): a magic, then records `opcode u8, length u64, content`,
// a footer and the magic again. The file is read front to back (the summary section is not
// needed: it repeats schemas and channels, and its chunk indexes only say where the chunks
// are, which a pass finds as well), and each chunk is decompressed once to index the
// messages in it.
#include "bag_internal.hpp"

#include <algorithm>
#include <unordered_map>

namespace ndtcu::rosbag::detail {

namespace {

constexpr char kMagic[8] = {'\x89', 'M', 'C', 'A', 'P', '0', '\r', '\n'};

enum Opcode : std::uint8_t {
  kHeader = 0x01,
  kFooter = 0x02,
  kSchema = 0x03,
  kChannel = 0x04,
  kMessage = 0x05,
  kChunk = 0x06,
};

struct Channel {
  std::string topic;
  std::uint16_t schema = 0;
  std::string encoding;
};

struct PendingMessage {
  std::uint16_t channel;
  MessageRef ref;
  std::uint64_t order;  // position in the file, for ties in time
};

class McapIndexer {
 public:
  McapIndexer(const ByteSource& source, std::uint32_t file_no, const BagReadLimits& limits)
      : src_(source), file_no_(file_no), limits_(limits) {}

  void run(ChunkedStorage& storage, Index& index) {
    const std::string& name = src_.name();
    char magic[8];
    if (src_.size() < 8) throw IoError(name, "not an MCAP file: " + std::to_string(src_.size()) + " bytes, shorter than its magic");
    src_.read(0, 8, magic, "magic");
    if (std::memcmp(magic, kMagic, 8) != 0) throw IoError(name, "not an MCAP file: the magic '\\x89MCAP0\\r\\n' is missing");
    std::uint64_t pos = 8;
    bool footer = false;
    std::uint64_t record_no = 0;
    while (!footer) {
      if (src_.size() - pos < 9) {
        throw IoError(name, "truncated: the file ends at offset " + std::to_string(src_.size()) +
                                " without an MCAP footer (record " + std::to_string(record_no) + " cut short)");
      }
      char head[9];
      src_.read(pos, 9, head, "record header");
      const auto op = static_cast<std::uint8_t>(head[0]);
      std::uint64_t length;
      std::memcpy(&length, head + 1, 8);
      const std::uint64_t content = pos + 9;
      if (length > src_.size() - content) {
        throw IoError(name, "record " + std::to_string(record_no) + " (opcode 0x" + hex(op) + ") at offset " +
                                std::to_string(pos) + " claims " + std::to_string(length) + " bytes, " +
                                std::to_string(src_.size() - content) + " remain in the file");
      }
      const std::string what = "record " + std::to_string(record_no) + " at offset " + std::to_string(pos);
      switch (op) {
        case kHeader: {
          const std::string bytes = src_.read_string(content, length, "header record");
          Cursor c(bytes, name, what + " (header)");
          profile_ = std::string(c.string32("profile"));
          break;
        }
        case kFooter: footer = true; break;
        case kSchema:
        case kChannel: {
          const std::string bytes = src_.read_string(content, length, "record");
          definition(op, bytes, what);
          break;
        }
        case kMessage: {
          char fixed[22];
          if (length < 22) throw IoError(name, what + " (message): " + std::to_string(length) + " bytes, a message record has at least 22");
          src_.read(content, 22, fixed, "message record");
          message(std::string_view(fixed, 22), -1, content + 22, length - 22);
          break;
        }
        case kChunk: chunk(storage, index, content, length, what); break;
        default: break;  // indexes, attachments, metadata, statistics: not needed
      }
      pos = content + length;
      ++record_no;
    }
    if (src_.size() - pos < 8) throw IoError(name, "truncated: the closing magic after the footer is missing");
    src_.read(pos, 8, magic, "closing magic");
    if (std::memcmp(magic, kMagic, 8) != 0) throw IoError(name, "the closing magic after the footer is wrong");
    finish(index);
  }

 private:
  static std::string hex(std::uint8_t v) {
    static const char* digits = "0123456789abcdef";
    return {digits[v >> 4], digits[v & 15]};
  }

  void definition(std::uint8_t op, std::string_view bytes, const std::string& what) {
    if (op == kSchema) {
      Cursor c(bytes, src_.name(), what + " (schema)");
      const auto id = c.get<std::uint16_t>("schema id");
      schemas_[id] = std::string(c.string32("schema name"));
      c.string32("schema encoding");
      c.string32("schema data");
    } else {
      Cursor c(bytes, src_.name(), what + " (channel)");
      const auto id = c.get<std::uint16_t>("channel id");
      Channel ch;
      ch.schema = c.get<std::uint16_t>("schema id");
      ch.topic = std::string(c.string32("topic"));
      ch.encoding = std::string(c.string32("message encoding"));
      c.bytes(c.get<std::uint32_t>("metadata length"), "metadata");
      channels_[id] = std::move(ch);
    }
  }

  void message(std::string_view fixed, std::int64_t chunk, std::uint64_t offset, std::uint64_t length) {
    PendingMessage m;
    std::memcpy(&m.channel, fixed.data(), 2);
    std::uint64_t log_time;
    std::memcpy(&log_time, fixed.data() + 6, 8);
    m.ref.time_ns = static_cast<std::int64_t>(log_time);
    m.ref.file = file_no_;
    m.ref.chunk = chunk;
    m.ref.offset = offset;
    m.ref.length = length;
    m.order = pending_.size();
    pending_.push_back(m);
  }

  void chunk(ChunkedStorage& storage, Index& index, std::uint64_t content, std::uint64_t length, const std::string& what) {
    const std::string& name = src_.name();
    // message_start_time, message_end_time, uncompressed_size (u64), uncompressed_crc
    // (u32), compression (string), records length (u64), records.
    constexpr std::uint64_t kFixed = 8 + 8 + 8 + 4 + 4;
    if (length < kFixed) throw IoError(name, what + " (chunk): " + std::to_string(length) + " bytes, shorter than a chunk's fields");
    char fixed[kFixed];
    src_.read(content, kFixed, fixed, "chunk record");
    std::uint64_t uncompressed;
    std::uint32_t compression_length;
    std::memcpy(&uncompressed, fixed + 16, 8);
    std::memcpy(&compression_length, fixed + 28, 4);
    if (compression_length > length - kFixed || length - kFixed - compression_length < 8) {
      throw IoError(name, what + " (chunk): compression name of " + std::to_string(compression_length) +
                              " bytes runs past the record");
    }
    const std::string compression = src_.read_string(content + kFixed, compression_length, "chunk compression");
    std::uint64_t records_length;
    src_.read(content + kFixed + compression_length, 8, reinterpret_cast<char*>(&records_length), "chunk record");
    const std::uint64_t records = content + kFixed + compression_length + 8;
    const std::uint64_t room = length - kFixed - compression_length - 8;
    if (records_length > room) {
      throw IoError(name, what + " (chunk): records claim " + std::to_string(records_length) + " bytes, the record holds " +
                              std::to_string(room));
    }
    const bool stored = compression.empty();
    if (stored && uncompressed != records_length) {
      throw IoError(name, what + " (chunk): uncompressed chunk of " + std::to_string(records_length) +
                              " bytes declares " + std::to_string(uncompressed));
    }
    if (!stored && compression != "zstd" && compression != "lz4") {
      throw IoError(name, what + " (chunk): unknown compression '" + compression + "' (MCAP chunks are zstd, lz4 or none)");
    }
    if (uncompressed > limits_.max_chunk_bytes) {
      throw IoError(name, what + " (chunk): declares " + std::to_string(uncompressed) +
                              " bytes uncompressed, over the limit of " + std::to_string(limits_.max_chunk_bytes));
    }
    const std::size_t k = storage.chunks.size();
    storage.chunks.push_back({records, records_length, uncompressed, compression});
    index.note_compression(stored ? "" : compression);
    ++index.chunks;
    const auto bytes = storage.chunk(k, what + " (chunk)");
    Cursor c(*bytes, name, what + " (chunk) inner records");
    while (!c.at_end()) {
      const auto op = c.get<std::uint8_t>("opcode");
      const auto len = c.get<std::uint64_t>("record length");
      const std::size_t start = c.position();
      const std::string_view body = c.bytes(len, "inner record");
      if (op == kSchema || op == kChannel) {
        definition(op, body, what + " (chunk, inner record at " + std::to_string(start - 9) + ")");
      } else if (op == kMessage) {
        if (len < 22) c.fail("message record of " + std::to_string(len) + " bytes, at least 22 expected");
        message(body.substr(0, 22), static_cast<std::int64_t>(k), start + 22, len - 22);
      } else if (op == kChunk) {
        c.fail("a chunk inside a chunk");
      }
    }
  }

  void finish(Index& index) {
    std::stable_sort(pending_.begin(), pending_.end(),
                     [](const PendingMessage& a, const PendingMessage& b) { return a.ref.time_ns < b.ref.time_ns; });
    for (const auto& m : pending_) {
      auto ch = channels_.find(m.channel);
      if (ch == channels_.end()) {
        throw IoError(src_.name(), "a message refers to channel " + std::to_string(m.channel) +
                                       ", which the file never defines");
      }
      TopicIndex& t = index.topics[ch->second.topic];
      if (t.info.name.empty()) {
        t.info.name = ch->second.topic;
        auto s = schemas_.find(ch->second.schema);
        t.info.type = s == schemas_.end() ? std::string() : s->second;
        t.info.encoding = ch->second.encoding;
      }
      t.messages.push_back(m.ref);
    }
    // Channels without messages are topics too.
    for (const auto& [id, ch] : channels_) {
      TopicIndex& t = index.topics[ch.topic];
      if (t.info.name.empty()) {
        t.info.name = ch.topic;
        auto s = schemas_.find(ch.schema);
        t.info.type = s == schemas_.end() ? std::string() : s->second;
        t.info.encoding = ch.encoding;
      }
    }
  }

  const ByteSource& src_;
  std::uint32_t file_no_;
  BagReadLimits limits_;
  std::string profile_;
  std::unordered_map<std::uint16_t, std::string> schemas_;
  std::unordered_map<std::uint16_t, Channel> channels_;
  std::vector<PendingMessage> pending_;
};

}  // namespace

std::unique_ptr<Storage> index_mcap(std::unique_ptr<ByteSource> source, std::uint32_t file_no, Index& index,
                                    const BagReadLimits& limits) {
  auto storage = std::make_unique<ChunkedStorage>(std::move(source), limits);
  McapIndexer indexer(storage->source(), file_no, limits);
  indexer.run(*storage, index);
  return storage;
}

}  // namespace ndtcu::rosbag::detail
