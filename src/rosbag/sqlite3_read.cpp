// rosbag2's sqlite3 storage: tables `topics(id, name, type, serialization_format, ...)` and
// `messages(id, topic_id, timestamp, data)` (the schema every rosbag2 version shares; newer
// ones add tables this reader does not need). Opened read-only; sqlite bounds every blob
// by the file itself.
#include "bag_internal.hpp"

#include <sqlite3.h>

#include <unordered_map>

namespace ndtcu::rosbag::detail {

namespace {

class Sqlite3Storage : public Storage {
 public:
  Sqlite3Storage(const std::string& path, bool message_zstd, const BagReadLimits& limits)
      : path_(path), message_zstd_(message_zstd), limits_(limits) {
    // Not SQLITE_OPEN_NOMUTEX: the connection serializes its own use across threads; the
    // mutex below additionally keeps each prepared statement to one thread.
    const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      const std::string why = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
      sqlite3_close(db_);
      db_ = nullptr;
      throw IoError(path, "cannot open as sqlite3: " + why);
    }
  }
  ~Sqlite3Storage() override {
    sqlite3_finalize(read_);
    sqlite3_close(db_);
  }

  void index(std::uint32_t file_no, Index& index) {
    std::unordered_map<std::int64_t, std::string> topic_names;
    {
      Statement s(*this, "SELECT id, name, type, serialization_format FROM topics");
      while (s.step()) {
        const std::int64_t id = sqlite3_column_int64(s.stmt, 0);
        TopicInfo info;
        info.name = s.text(1);
        info.type = s.text(2);
        info.encoding = s.text(3);
        topic_names[id] = info.name;
        TopicIndex& t = index.topics[info.name];
        if (t.info.name.empty()) t.info = std::move(info);
      }
    }
    Statement s(*this, "SELECT id, topic_id, timestamp, length(data) FROM messages ORDER BY timestamp, id");
    while (s.step()) {
      const std::int64_t id = sqlite3_column_int64(s.stmt, 0);
      const std::int64_t topic = sqlite3_column_int64(s.stmt, 1);
      auto name = topic_names.find(topic);
      if (name == topic_names.end()) {
        throw IoError(path_, "message row " + std::to_string(id) + " refers to topic id " + std::to_string(topic) +
                                 ", which the topics table does not hold");
      }
      MessageRef m;
      m.time_ns = sqlite3_column_int64(s.stmt, 2);
      m.file = file_no;
      m.offset = static_cast<std::uint64_t>(id);
      m.length = static_cast<std::uint64_t>(std::max<sqlite3_int64>(0, sqlite3_column_int64(s.stmt, 3)));
      index.topics[name->second].messages.push_back(m);
    }
    if (message_zstd_) index.note_compression("zstd (per message)");
  }

  std::string read(const MessageRef& m, const std::string& context) const override {
    std::string data;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!read_) prepare("SELECT data FROM messages WHERE id = ?", &read_);
      sqlite3_reset(read_);
      sqlite3_bind_int64(read_, 1, static_cast<sqlite3_int64>(m.offset));
      const int rc = sqlite3_step(read_);
      if (rc != SQLITE_ROW) {
        throw IoError(path_, context + ": message row " + std::to_string(m.offset) + " cannot be read: " +
                                 sqlite3_errmsg(db_));
      }
      const void* blob = sqlite3_column_blob(read_, 0);
      const int n = sqlite3_column_bytes(read_, 0);
      if (blob && n > 0) data.assign(static_cast<const char*>(blob), static_cast<std::size_t>(n));
      sqlite3_reset(read_);
    }
    if (message_zstd_) return decompress_zstd_capped(data, limits_.max_chunk_bytes, path_, context);
    return data;
  }

 private:
  struct Statement {
    Statement(const Sqlite3Storage& owner, const char* sql) : db(owner) { owner.prepare(sql, &stmt); }
    ~Statement() { sqlite3_finalize(stmt); }
    bool step() {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_ROW) return true;
      if (rc == SQLITE_DONE) return false;
      throw IoError(db.path_, std::string("sqlite3 query failed: ") + sqlite3_errmsg(db.db_));
    }
    std::string text(int column) const {
      const unsigned char* t = sqlite3_column_text(stmt, column);
      return t ? std::string(reinterpret_cast<const char*>(t), static_cast<std::size_t>(sqlite3_column_bytes(stmt, column)))
               : std::string();
    }
    const Sqlite3Storage& db;
    sqlite3_stmt* stmt = nullptr;
  };

  void prepare(const char* sql, sqlite3_stmt** out) const {
    if (sqlite3_prepare_v2(db_, sql, -1, out, nullptr) != SQLITE_OK) {
      throw IoError(path_, std::string("not a rosbag2 sqlite3 file (") + sqlite3_errmsg(db_) + ")");
    }
  }

  std::string path_;
  bool message_zstd_;
  BagReadLimits limits_;
  sqlite3* db_ = nullptr;
  mutable std::mutex mutex_;
  mutable sqlite3_stmt* read_ = nullptr;
};

}  // namespace

std::unique_ptr<Storage> index_sqlite3(const std::string& path, std::uint32_t file_no, Index& index, bool message_zstd,
                                       const BagReadLimits& limits) {
  // A missing file or a folder: the same message as for the other formats (sqlite's
  // "unable to open database file" does not say which).
  ByteSource::open_file(path);
  auto storage = std::make_unique<Sqlite3Storage>(path, message_zstd, limits);
  storage->index(file_no, index);
  return storage;
}

}  // namespace ndtcu::rosbag::detail
