// A small ROS 2 bag writer: one MCAP file, unchunked and without a summary section (the
// spec allows both; readers then scan the file), and the rosbag2 metadata.yaml beside it.
// Its CDR encoder also serializes the messages the ROS 2 node publishes as they are
// (encode_point_cloud2, encode_pose_stamped, encode_pose_with_covariance_stamped).
#include "bag_internal.hpp"

#include "log.hpp"

#include <ndtcu/output_file.hpp>

#include <Eigen/Geometry>

#include <cmath>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>

namespace ndtcu::rosbag {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'\x89', 'M', 'C', 'A', 'P', '0', '\r', '\n'};

// std_msgs/Header and its builtin_interfaces/Time, as every stamped message's definition
// lists them (string literals, joined into each definition below).
#define NDTCU_ROS2_HEADER_DEFINITION \
  "================================================================================\n" \
  "MSG: std_msgs/Header\n" \
  "builtin_interfaces/Time stamp\n" \
  "string frame_id\n" \
  "================================================================================\n" \
  "MSG: builtin_interfaces/Time\n" \
  "int32 sec\n" \
  "uint32 nanosec\n"

// sensor_msgs/msg/PointCloud2 with its dependencies, in the ros2msg layout rosbag2 stores.
constexpr const char* kPointCloud2Definition =
    "std_msgs/Header header\n"
    "uint32 height\n"
    "uint32 width\n"
    "sensor_msgs/PointField[] fields\n"
    "bool is_bigendian\n"
    "uint32 point_step\n"
    "uint32 row_step\n"
    "uint8[] data\n"
    "bool is_dense\n"
    NDTCU_ROS2_HEADER_DEFINITION
    "================================================================================\n"
    "MSG: sensor_msgs/PointField\n"
    "uint8 INT8    = 1\n"
    "uint8 UINT8   = 2\n"
    "uint8 INT16   = 3\n"
    "uint8 UINT16  = 4\n"
    "uint8 INT32   = 5\n"
    "uint8 UINT32  = 6\n"
    "uint8 FLOAT32 = 7\n"
    "uint8 FLOAT64 = 8\n"
    "string name\n"
    "uint32 offset\n"
    "uint8 datatype\n"
    "uint32 count\n";

// sensor_msgs/msg/Imu with its dependencies, in the ros2msg layout rosbag2 stores.
constexpr const char* kImuDefinition =
    "std_msgs/Header header\n"
    "geometry_msgs/Quaternion orientation\n"
    "float64[9] orientation_covariance\n"
    "geometry_msgs/Vector3 angular_velocity\n"
    "float64[9] angular_velocity_covariance\n"
    "geometry_msgs/Vector3 linear_acceleration\n"
    "float64[9] linear_acceleration_covariance\n"
    NDTCU_ROS2_HEADER_DEFINITION
    "================================================================================\n"
    "MSG: geometry_msgs/Quaternion\n"
    "float64 x 0\n"
    "float64 y 0\n"
    "float64 z 0\n"
    "float64 w 1\n"
    "================================================================================\n"
    "MSG: geometry_msgs/Vector3\n"
    "float64 x\n"
    "float64 y\n"
    "float64 z\n";

class Buffer {
 public:
  template <typename T>
  void put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes.append(b, sizeof(T));
  }
  void str32(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size()));
    bytes.append(s);
  }
  std::string bytes;
};

// A std_msgs/Header, then a geometry_msgs/Pose (position, then the rotation's unit quaternion).
void put_header_and_pose(detail::CdrBuffer& b, std::int64_t stamp_ns, const std::string& frame_id, const Eigen::Matrix4d& pose) {
  b.put(static_cast<std::int32_t>(stamp_ns / 1000000000));
  b.put(static_cast<std::uint32_t>(stamp_ns % 1000000000));
  b.str(frame_id);
  for (int i = 0; i < 3; ++i) b.put(pose(i, 3));
  const Eigen::Quaterniond q = Eigen::Quaterniond(Eigen::Matrix3d(pose.topLeftCorner<3, 3>())).normalized();
  for (const double v : {q.x(), q.y(), q.z(), q.w()}) b.put(v);
}

}  // namespace

std::string encode_pose_stamped(std::int64_t stamp_ns, const std::string& frame_id, const Eigen::Matrix4d& pose) {
  detail::CdrBuffer b;
  put_header_and_pose(b, stamp_ns, frame_id, pose);
  return b.bytes;
}

std::string encode_pose_with_covariance_stamped(std::int64_t stamp_ns, const std::string& frame_id,
                                                const Eigen::Matrix4d& pose,
                                                const Eigen::Matrix<double, 6, 6>& covariance) {
  detail::CdrBuffer b;
  put_header_and_pose(b, stamp_ns, frame_id, pose);
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 6; ++c) b.put(covariance(r, c));
  }
  return b.bytes;
}

std::string encode_point_cloud2(std::int64_t time_ns, const std::string& frame_id, const PointCloud& cloud) {
  const bool with_intensity = cloud.has_intensity();
  const bool with_time = cloud.has_time();
  // Fields in order: x y z, then intensity and t when the cloud has them (float32 each).
  std::vector<const char*> names = {"x", "y", "z"};
  if (with_intensity) names.push_back("intensity");
  if (with_time) names.push_back("t");
  const auto count = static_cast<std::uint32_t>(names.size());
  const std::uint32_t step = 4 * count;
  detail::CdrBuffer b;
  b.put(static_cast<std::int32_t>(time_ns / 1000000000));
  b.put(static_cast<std::uint32_t>(time_ns % 1000000000));
  b.str(frame_id);
  b.put(std::uint32_t{1});                                 // height
  b.put(static_cast<std::uint32_t>(cloud.size()));         // width
  b.put(count);
  for (std::uint32_t f = 0; f < count; ++f) {
    b.str(names[f]);
    b.put(4 * f);                // offset
    b.put(std::uint8_t{7});      // FLOAT32
    b.put(std::uint32_t{1});     // count
  }
  b.put(std::uint8_t{0});  // is_bigendian
  b.put(step);
  b.put(static_cast<std::uint32_t>(step * cloud.size()));  // row_step
  b.put(static_cast<std::uint32_t>(step * cloud.size()));  // data length
  b.bytes.reserve(b.bytes.size() + step * cloud.size() + 1);
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    const Eigen::Vector3d w = cloud.world(i);
    float v[5] = {static_cast<float>(w.x()), static_cast<float>(w.y()), static_cast<float>(w.z()), 0.0f, 0.0f};
    std::uint32_t k = 3;
    if (with_intensity) v[k++] = cloud.intensity[i];
    if (with_time) v[k++] = cloud.time[i];
    b.bytes.append(reinterpret_cast<const char*>(v), step);
  }
  b.put(std::uint8_t{1});  // is_dense: only finite points are stored in a PointCloud
  return b.bytes;
}

struct McapBagWriter::Impl {
  std::string folder, topic, frame_id;
  // The IMU topic (channel and schema 2), when add_imu_topic() made one.
  std::string imu_topic, imu_frame_id;
  double gyro_variance = 0.0, accel_variance = 0.0;
  std::uint64_t imu_messages = 0;
  // The MCAP file, renamed into place by close() (written whole: a bag whose writer
  // stopped half-way has no MCAP file and no metadata.yaml).
  std::optional<OutputFile> out;
  std::uint64_t messages = 0;
  std::int64_t first_ns = 0, last_ns = 0;
  bool closed = false;
  // Exceptions in flight when the writer was made: more at its destruction means one
  // is unwinding through it, and the unfinished bag is dropped rather than finished.
  int uncaught_at_start = std::uncaught_exceptions();

  void record(std::uint8_t op, const std::string& content) {
    out->write(&op, 1);
    const std::uint64_t n = content.size();
    out->write(&n, 8);
    out->write(content);
  }

  // A schema (ros2msg `definition` of `type`) and the CDR channel of `topic` on it, both
  // numbered `id`.
  void add_channel(std::uint16_t id, const char* type, const char* definition, const std::string& channel_topic) {
    Buffer schema;
    schema.put(id);
    schema.str32(type);
    schema.str32("ros2msg");
    schema.str32(definition);
    record(0x03, schema.bytes);
    Buffer channel;
    channel.put(id);  // id
    channel.put(id);  // schema
    channel.str32(channel_topic);
    channel.str32("cdr");
    Buffer metadata;
    metadata.str32("offered_qos_profiles");
    metadata.str32("");
    channel.str32(metadata.bytes);
    record(0x04, channel.bytes);
  }
};

McapBagWriter::McapBagWriter(const std::string& path, std::string topic, std::string frame_id)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.folder = path;
  m.topic = std::move(topic);
  m.frame_id = std::move(frame_id);
  std::error_code ec;
  const fs::path folder(path);
  if (fs::exists(folder, ec) && !(fs::is_directory(folder, ec) && fs::is_empty(folder, ec))) {
    throw IoError(path, "exists and is not an empty folder; a ROS 2 bag is written as a new folder");
  }
  fs::create_directories(folder, ec);
  if (ec) throw IoError(path, "cannot create the bag folder: " + ec.message());
  std::string stem = folder.filename().string();
  if (stem.empty()) stem = folder.parent_path().filename().string();
  mcap_path_ = (folder / (stem + "_0.mcap")).string();
  m.out.emplace(mcap_path_);
  m.out->write(kMagic, 8);
  Buffer header;
  header.str32("ros2");
  header.str32("ndtcu");
  m.record(0x01, header.bytes);
  m.add_channel(1, "sensor_msgs/msg/PointCloud2", kPointCloud2Definition, m.topic);
}

McapBagWriter::~McapBagWriter() {
  if (impl_ && !impl_->closed && std::uncaught_exceptions() > impl_->uncaught_at_start) return;  // dropped
  if (impl_ && !impl_->closed) {
    try {
      close();
    } catch (const std::exception& e) {
      ndtcu::detail::log().error("{}", e.what());
    }
  }
}

namespace {

// Refuses a message time the bag cannot take after `messages` earlier ones ending at `last_ns`.
void check_message_time(const std::string& path, bool closed, std::uint64_t messages, std::int64_t last_ns,
                        std::int64_t time_ns) {
  if (closed) throw Error(path + ": write after close");
  if (time_ns < 0) throw Error(path + ": message time " + std::to_string(time_ns) + " ns is negative");
  if (messages > 0 && time_ns < last_ns) {
    throw Error(path + ": message times must not decrease (" + std::to_string(time_ns) + " ns after " +
                std::to_string(last_ns) + " ns)");
  }
}

}  // namespace

void McapBagWriter::write(std::int64_t time_ns, const PointCloud& cloud) {
  Impl& m = *impl_;
  check_message_time(mcap_path_, m.closed, m.messages + m.imu_messages, m.last_ns, time_ns);
  if (cloud.size() * 16 > std::numeric_limits<std::uint32_t>::max() - 1024) {
    throw Error(mcap_path_ + ": a cloud of " + std::to_string(cloud.size()) + " points does not fit one PointCloud2");
  }
  Buffer rec;
  rec.put(std::uint16_t{1});                               // channel
  rec.put(static_cast<std::uint32_t>(m.messages));         // sequence
  rec.put(static_cast<std::uint64_t>(time_ns));            // log_time
  rec.put(static_cast<std::uint64_t>(time_ns));            // publish_time
  rec.bytes += encode_point_cloud2(time_ns, m.frame_id, cloud);
  m.record(0x05, rec.bytes);
  if (m.messages + m.imu_messages == 0) m.first_ns = time_ns;
  m.last_ns = time_ns;
  ++m.messages;
}

void McapBagWriter::add_imu_topic(const std::string& topic, const std::string& frame_id, double gyro_variance,
                                  double accel_variance) {
  Impl& m = *impl_;
  if (m.closed) throw Error(mcap_path_ + ": add_imu_topic after close");
  if (!m.imu_topic.empty()) throw Error(mcap_path_ + ": the bag has an IMU topic already (" + m.imu_topic + ")");
  if (topic.empty() || topic == m.topic) throw Error(mcap_path_ + ": IMU topic '" + topic + "' is empty or the points' topic");
  m.imu_topic = topic;
  m.imu_frame_id = frame_id;
  m.gyro_variance = gyro_variance;
  m.accel_variance = accel_variance;
  m.add_channel(2, "sensor_msgs/msg/Imu", kImuDefinition, m.imu_topic);
}

void McapBagWriter::write_imu(std::int64_t time_ns, const ImuSample& sample) {
  Impl& m = *impl_;
  if (m.imu_topic.empty()) throw Error(mcap_path_ + ": write_imu before add_imu_topic");
  check_message_time(mcap_path_, m.closed, m.messages + m.imu_messages, m.last_ns, time_ns);
  check_imu_sample(sample, mcap_path_ + ": IMU sample " + std::to_string(m.imu_messages));
  Buffer rec;
  rec.put(std::uint16_t{2});                               // channel
  rec.put(static_cast<std::uint32_t>(m.imu_messages));     // sequence
  rec.put(static_cast<std::uint64_t>(time_ns));            // log_time
  rec.put(static_cast<std::uint64_t>(time_ns));            // publish_time
  rec.bytes += encode_imu(time_ns, m.imu_frame_id, sample, m.gyro_variance, m.accel_variance);
  m.record(0x05, rec.bytes);
  if (m.messages + m.imu_messages == 0) m.first_ns = time_ns;
  m.last_ns = time_ns;
  ++m.imu_messages;
}

void McapBagWriter::close() {
  Impl& m = *impl_;
  if (m.closed) return;
  m.closed = true;
  Buffer data_end;
  data_end.put(std::uint32_t{0});  // data section CRC: 0, not computed
  m.record(0x0F, data_end.bytes);
  Buffer footer;
  footer.put(std::uint64_t{0});  // summary_start: no summary
  footer.put(std::uint64_t{0});  // summary_offset_start
  footer.put(std::uint32_t{0});  // summary CRC
  m.record(0x02, footer.bytes);
  m.out->write(kMagic, 8);
  m.out->commit();
  const std::string yaml_path = (fs::path(m.folder) / "metadata.yaml").string();
  std::ostringstream y;
  const std::uint64_t all = m.messages + m.imu_messages;
  const std::int64_t duration = all ? m.last_ns - m.first_ns : 0;
  const std::string file = fs::path(mcap_path_).filename().string();
  y << "rosbag2_bagfile_information:\n"
    << "  version: 8\n"
    << "  storage_identifier: mcap\n"
    << "  relative_file_paths:\n    - " << file << "\n"
    << "  duration:\n    nanoseconds: " << duration << "\n"
    << "  starting_time:\n    nanoseconds_since_epoch: " << m.first_ns << "\n"
    << "  message_count: " << all << "\n"
    << "  topics_with_message_count:\n"
    << "    - topic_metadata:\n"
    << "        name: " << m.topic << "\n"
    << "        type: sensor_msgs/msg/PointCloud2\n"
    << "        serialization_format: cdr\n"
    << "        offered_qos_profiles: \"\"\n"
    << "      message_count: " << m.messages << "\n";
  if (!m.imu_topic.empty()) {
    y << "    - topic_metadata:\n"
      << "        name: " << m.imu_topic << "\n"
      << "        type: sensor_msgs/msg/Imu\n"
      << "        serialization_format: cdr\n"
      << "        offered_qos_profiles: \"\"\n"
      << "      message_count: " << m.imu_messages << "\n";
  }
  y << "  compression_format: \"\"\n"
    << "  compression_mode: \"\"\n"
    << "  files:\n"
    << "    - path: " << file << "\n"
    << "      starting_time:\n        nanoseconds_since_epoch: " << m.first_ns << "\n"
    << "      duration:\n        nanoseconds: " << duration << "\n"
    << "      message_count: " << all << "\n";
  write_file_whole(yaml_path, y.str());
}

}  // namespace ndtcu::rosbag
