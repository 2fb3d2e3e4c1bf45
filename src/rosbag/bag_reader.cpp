#include "bag_internal.hpp"
#include "message_cursor.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ndtcu::rosbag {

namespace fs = std::filesystem;

namespace {

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

// What metadata.yaml says about a ROS 2 bag folder.
struct Ros2Metadata {
  std::string storage;  // "sqlite3" or "mcap"
  std::vector<std::string> files;
  std::string compression_format, compression_mode;
};

Ros2Metadata read_metadata(const fs::path& folder) {
  const std::string file = (folder / "metadata.yaml").string();
  Ros2Metadata m;
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::Exception& e) {
    throw IoError(file, std::string("not readable as YAML: ") + e.what());
  }
  try {
    const YAML::Node info = root["rosbag2_bagfile_information"];
    if (!info || !info.IsMap()) throw IoError(file, "no 'rosbag2_bagfile_information' map: not a rosbag2 metadata file");
    m.storage = info["storage_identifier"] ? info["storage_identifier"].as<std::string>() : std::string();
    if (const YAML::Node paths = info["relative_file_paths"]; paths && paths.IsSequence()) {
      for (const auto& p : paths) m.files.push_back((folder / fs::path(p.as<std::string>()).filename()).string());
    }
    if (info["compression_format"]) m.compression_format = info["compression_format"].as<std::string>();
    if (info["compression_mode"]) m.compression_mode = info["compression_mode"].as<std::string>();
  } catch (const YAML::Exception& e) {
    throw IoError(file, std::string("unexpected rosbag2 metadata: ") + e.what());
  }
  std::transform(m.compression_mode.begin(), m.compression_mode.end(), m.compression_mode.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (m.files.empty()) throw IoError(file, "relative_file_paths lists no storage file");
  // Each storage file once: one listed twice was read twice, every message of it doubled
  // (the same .db3 three times gave three copies of each scan). Entries are compared as
  // they are opened, by their file name in the bag's folder.
  std::map<std::string, std::vector<std::size_t>> entries_of;  // file -> its entries, from 1
  for (std::size_t k = 0; k < m.files.size(); ++k) entries_of[m.files[k]].push_back(k + 1);
  for (const std::string& f : m.files) {
    const std::vector<std::size_t>& same = entries_of[f];
    if (same.size() > 1) {
      std::string entries;
      const std::size_t shown = std::min<std::size_t>(same.size(), 5);
      for (std::size_t i = 0; i < shown; ++i) {
        entries += (i == 0 ? "" : i + 1 == same.size() ? " and " : ", ") + std::to_string(same[i]);
      }
      if (shown < same.size()) entries += ", ...";
      throw IoError(file, "relative_file_paths lists the storage file " + fs::path(f).filename().string() +
                              " " + std::to_string(same.size()) + " times (entries " + entries +
                              "): its messages would be read as many times; list each file once");
    }
  }
  if (m.storage != "sqlite3" && m.storage != "mcap") {
    throw IoError(file, "storage_identifier '" + m.storage + "' is not supported (sqlite3, mcap)");
  }
  if (m.compression_mode == "file") {
    throw IoError(file, "the bag's files are compressed whole (compression_mode: file, " + m.compression_format +
                            "); decompress them first (e.g. `zstd -d`) and edit metadata.yaml, or record with "
                            "message or storage compression");
  }
  if (m.compression_mode == "message" && m.compression_format != "zstd") {
    throw IoError(file, "unknown compression '" + m.compression_format + "' for compression_mode message (zstd is read)");
  }
  return m;
}

}  // namespace

const char* to_string(BagFormat format) {
  switch (format) {
    case BagFormat::Ros1: return "ros1";
    case BagFormat::Ros2Sqlite3: return "ros2_sqlite3";
    case BagFormat::Ros2Mcap: return "ros2_mcap";
  }
  return "unknown";
}

bool is_bag_path(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) return fs::exists(p / "metadata.yaml", ec);
  const std::string ext = lower_extension(p);
  return ext == ".bag" || ext == ".mcap" || ext == ".db3";
}

struct BagReader::Impl {
  BagInfo info;
  BagReadLimits limits;
  detail::Index index;
  std::vector<std::unique_ptr<detail::Storage>> storages;

  void finish() {
    for (auto& [name, t] : index.topics) {
      std::stable_sort(t.messages.begin(), t.messages.end(),
                       [](const MessageRef& a, const MessageRef& b) { return a.time_ns < b.time_ns; });
      for (std::size_t k = 0; k < t.messages.size(); ++k) t.messages[k].index = k;
      t.info.messages = t.messages.size();
      if (t.info.encoding.empty()) t.info.encoding = info.format == BagFormat::Ros1 ? "ros1" : "cdr";
      info.topics.push_back(t.info);
      info.messages += t.messages.size();
      if (!t.messages.empty()) {
        const std::int64_t first = t.messages.front().time_ns, last = t.messages.back().time_ns;
        if (info.messages == t.messages.size() || first < info.start_ns) info.start_ns = first;
        if (info.messages == t.messages.size() || last > info.end_ns) info.end_ns = last;
      }
    }
    info.chunks = index.chunks;
    if (!index.compressions.empty()) {
      info.compression.clear();
      for (const auto& c : index.compressions) info.compression += (info.compression.empty() ? "" : "+") + c;
    }
  }

  const detail::TopicIndex& topic(const std::string& name) const {
    auto it = index.topics.find(name);
    if (it == index.topics.end()) {
      std::string names;
      for (const auto& [n, t] : index.topics) names += (names.empty() ? "" : ", ") + n + " (" + t.info.type + ")";
      throw IoError(info.path, "no topic '" + name + "' in the bag; its topics: " + (names.empty() ? "none" : names));
    }
    return it->second;
  }
};

BagReader::BagReader() : impl_(std::make_unique<Impl>()) {}
BagReader::~BagReader() = default;
BagReader::BagReader(BagReader&&) noexcept = default;
BagReader& BagReader::operator=(BagReader&&) noexcept = default;

BagReader::BagReader(const std::string& path, const BagReadLimits& limits) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.info.path = path;
  m.limits = limits;
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) throw IoError(path, "no such file or folder");
  if (fs::is_directory(p, ec)) {
    if (!fs::exists(p / "metadata.yaml", ec)) {
      throw IoError(path, "folder holds no metadata.yaml: not a ROS 2 bag (a ROS 1 bag is a .bag file)");
    }
    const Ros2Metadata meta = read_metadata(p);
    m.info.format = meta.storage == "mcap" ? BagFormat::Ros2Mcap : BagFormat::Ros2Sqlite3;
    m.info.files = meta.files;
  } else {
    const std::string ext = lower_extension(p);
    if (ext == ".bag") m.info.format = BagFormat::Ros1;
    else if (ext == ".mcap") m.info.format = BagFormat::Ros2Mcap;
    else if (ext == ".db3") m.info.format = BagFormat::Ros2Sqlite3;
    else throw IoError(path, "not a bag: expected a .bag, .mcap or .db3 file, or a folder with metadata.yaml");
    m.info.files = {path};
  }
  bool message_zstd = false;
  if (m.info.format == BagFormat::Ros2Sqlite3 && fs::is_directory(p, ec)) {
    message_zstd = read_metadata(p).compression_mode == "message";
  }
  for (std::uint32_t k = 0; k < m.info.files.size(); ++k) {
    const std::string& file = m.info.files[k];
    if (m.info.format == BagFormat::Ros2Sqlite3) {
      m.storages.push_back(detail::index_sqlite3(file, k, m.index, message_zstd, limits));
    } else {
      auto source = detail::ByteSource::open_file(file);
      m.info.bytes += source->size();
      m.storages.push_back(m.info.format == BagFormat::Ros1 ? detail::index_ros1(std::move(source), k, m.index, limits)
                                                            : detail::index_mcap(std::move(source), k, m.index, limits));
    }
    if (m.info.format == BagFormat::Ros2Sqlite3) m.info.bytes += fs::file_size(file, ec);
  }
  m.finish();
}

BagReader BagReader::from_memory(std::string_view bytes, const std::string& name, BagFormat format,
                                 const BagReadLimits& limits) {
  if (format == BagFormat::Ros2Sqlite3) throw IoError(name, "sqlite3 storage is read from files only");
  BagReader r;
  Impl& m = *r.impl_;
  m.info.path = name;
  m.info.format = format;
  m.info.files = {name};
  m.info.bytes = bytes.size();
  m.limits = limits;
  auto source = detail::ByteSource::wrap(bytes, name);
  m.storages.push_back(format == BagFormat::Ros1 ? detail::index_ros1(std::move(source), 0, m.index, limits)
                                                 : detail::index_mcap(std::move(source), 0, m.index, limits));
  m.finish();
  return r;
}

const BagInfo& BagReader::info() const { return impl_->info; }

const TopicInfo& BagReader::topic(const std::string& name) const { return impl_->topic(name).info; }

const TopicInfo& BagReader::point_cloud_topic(const std::string& requested) const {
  const Impl& m = *impl_;
  if (!requested.empty()) {
    const TopicInfo& t = topic(requested);
    if (!is_point_cloud2_type(t.type)) {
      throw IoError(m.info.path, "topic " + requested + " holds " + (t.type.empty() ? "messages of no declared type" : t.type) +
                                     ", not sensor_msgs/PointCloud2");
    }
    return t;
  }
  std::vector<const TopicInfo*> clouds;
  for (const auto& [name, t] : m.index.topics) {
    if (is_point_cloud2_type(t.info.type)) clouds.push_back(&t.info);
  }
  if (clouds.size() == 1) return *clouds.front();
  if (clouds.empty()) {
    std::string names;
    for (const auto& [n, t] : m.index.topics) names += (names.empty() ? "" : ", ") + n + " (" + t.info.type + ")";
    throw IoError(m.info.path, "no sensor_msgs/PointCloud2 topic in the bag; its topics: " + (names.empty() ? "none" : names));
  }
  std::string names;
  for (const TopicInfo* t : clouds) names += (names.empty() ? "" : ", ") + t->name + " (" + std::to_string(t->messages) + " messages)";
  throw IoError(m.info.path, std::to_string(clouds.size()) + " PointCloud2 topics, choose one with --topic: " + names);
}

const std::vector<MessageRef>& BagReader::messages(const std::string& topic) const {
  return impl_->topic(topic).messages;
}

std::string BagReader::message_context(const std::string& topic, std::size_t index) const {
  return impl_->info.path + ": topic " + topic + ": message " + std::to_string(index);
}

std::string BagReader::read_raw(const std::string& topic, std::size_t index) const {
  const detail::TopicIndex& t = impl_->topic(topic);
  if (index >= t.messages.size()) {
    throw IoError(impl_->info.path, "topic " + topic + ": message " + std::to_string(index) + " does not exist (" +
                                        std::to_string(t.messages.size()) + " messages)");
  }
  const MessageRef& ref = t.messages[index];
  return impl_->storages.at(ref.file)->read(ref, "topic " + topic + ": message " + std::to_string(index));
}

PointCloud BagReader::read_point_cloud(const std::string& topic, std::size_t index, const ReadOptions& options,
                                       PointCloud2Info* info) const {
  const TopicInfo& t = point_cloud_topic(topic);
  const MessageEncoding encoding = detail::topic_encoding(t, impl_->info.path);
  const std::string bytes = read_raw(topic, index);
  return decode_point_cloud2(bytes, encoding, message_context(topic, index), options, info);
}

OdometryMessage BagReader::read_odometry(const std::string& topic, std::size_t index) const {
  const TopicInfo& t = this->topic(topic);
  if (!is_odometry_type(t.type)) {
    throw IoError(impl_->info.path, "topic " + topic + " holds " +
                                        (t.type.empty() ? "messages of no declared type" : t.type) +
                                        ", not nav_msgs/Odometry");
  }
  const MessageEncoding encoding = detail::topic_encoding(t, impl_->info.path);
  const std::string bytes = read_raw(topic, index);
  return decode_odometry(bytes, encoding, message_context(topic, index));
}

ImuMessage BagReader::read_imu(const std::string& topic, std::size_t index) const {
  const TopicInfo& t = this->topic(topic);
  if (!is_imu_type(t.type)) {
    throw IoError(impl_->info.path, "topic " + topic + " holds " +
                                        (t.type.empty() ? "messages of no declared type" : t.type) +
                                        ", not sensor_msgs/Imu");
  }
  const MessageEncoding encoding = detail::topic_encoding(t, impl_->info.path);
  const std::string bytes = read_raw(topic, index);
  return decode_imu(bytes, encoding, message_context(topic, index));
}

}  // namespace ndtcu::rosbag
