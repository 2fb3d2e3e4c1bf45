#pragma once
/// \file
/// Reading `sensor_msgs/PointCloud2` (and `nav_msgs/Odometry`, `sensor_msgs/Imu`) messages from rosbags without ROS: ROS 2 bags (a
/// folder with `metadata.yaml` and `sqlite3` `.db3` or `mcap` storage files, or one such
/// file), and ROS 1 `.bag` files (format 2.0). Compressed MCAP chunks (zstd, lz4), ROS 1
/// chunks (bz2, lz4) and rosbag2's per-message zstd compression are read. The library
/// `ndtcu::rosbag` holds this (and links libsqlite3, libzstd, liblz4, libbz2); the core
/// library `ndtcu::ndtcu` does not depend on it.
///
/// Time stamps. A message's time is the time the bag recorded it (ROS 1 record time,
/// rosbag2 `timestamp`, MCAP `log_time`), in every format, never the message's header
/// stamp: it is known without decoding the message, and it is what ROS tools order and
/// play a bag by. The header stamp is reported in PointCloud2Info::stamp_ns.
///
/// Errors. Every failure throws ndtcu::IoError naming the bag file and, for a message, its
/// topic and index. Every length in a bag is checked against the bytes that remain before
/// it is used, and decompressed sizes against the size the bag declares and
/// BagReadLimits::max_chunk_bytes, so a lying bag is an error, never an allocation beyond
/// what the file (and the cap) can justify: a chunk is decompressed into memory grown with
/// what its data expands to, never sized by the size it declares. A rosbag2 metadata.yaml
/// that lists one storage file more than once is an error naming the file and the entries.

#include <ndtcu/imu.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/point_cloud.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ndtcu::rosbag {

/// Bag container formats.
enum class BagFormat { Ros1, Ros2Sqlite3, Ros2Mcap };

/// "ros1", "ros2_sqlite3", "ros2_mcap".
const char* to_string(BagFormat format);

/// How a message is serialized.
enum class MessageEncoding {
  Cdr,   ///< ROS 2: CDR with its 4-byte encapsulation header (little or big endian)
  Ros1,  ///< ROS 1 serialization (little endian, no alignment)
};

/// One topic of a bag.
struct TopicInfo {
  std::string name;           ///< e.g. "/points"
  std::string type;           ///< e.g. "sensor_msgs/msg/PointCloud2" (ROS 1: "sensor_msgs/PointCloud2")
  std::string encoding;       ///< "cdr" or "ros1"
  std::uint64_t messages = 0;  ///< messages on the topic
};

/// What a bag holds.
struct BagInfo {
  std::string path;                 ///< the bag as given (file or folder)
  BagFormat format = BagFormat::Ros1;  ///< container
  std::vector<std::string> files;   ///< storage files read (one unless a ROS 2 bag is split)
  /// Compression found: "none", or the methods used ("zstd", "lz4", "bz2", joined by
  /// "+"); rosbag2's per-message compression reads "zstd (per message)".
  std::string compression = "none";
  std::uint64_t chunks = 0;         ///< chunks (MCAP, ROS 1); 0 for sqlite3
  std::vector<TopicInfo> topics;    ///< by name
  std::uint64_t messages = 0;       ///< messages on all topics
  std::int64_t start_ns = 0;        ///< earliest message time (ns), 0 when empty
  std::int64_t end_ns = 0;          ///< latest message time (ns), 0 when empty
  std::uint64_t bytes = 0;          ///< size of the storage files
};

/// One message of a topic, in time order. `index` is its position in the topic.
struct MessageRef {
  std::size_t index = 0;      ///< position in the topic's time order
  std::int64_t time_ns = 0;   ///< the bag's record time (see the file comment)
  /// Time in seconds: the double nearest time_ns / 1e9 (divided in long double, whose
  /// 64-bit mantissa holds any time_ns exactly), so a bag's time equals the number a text
  /// file would give for the same decimal time (ns * 1e-9 in double is off by up to
  /// 2 ulp at today's epoch times, which changes a localizer's velocity prediction).
  double time() const { return static_cast<double>(static_cast<long double>(time_ns) / 1e9L); }
  // Where the bytes are (internal to the reader).
  std::uint32_t file = 0;     ///< storage file
  std::int64_t chunk = -1;    ///< chunk holding it, -1 when not in a chunk
  std::uint64_t offset = 0;   ///< offset of the data (in the file or the decompressed chunk); sqlite3: row id
  std::uint64_t length = 0;   ///< bytes of the serialized message
};

/// Limits the reader works under.
struct BagReadLimits {
  /// Largest decompressed chunk (or message) accepted, in bytes. Chunks are
  /// decompressed whole; a bag declaring more is an error, not an allocation. 1 GiB is far
  /// beyond any writer's chunk size (MCAP's default is 768 KiB, ROS 1's 768 KiB).
  std::uint64_t max_chunk_bytes = std::uint64_t{1} << 30;
};

/// What a PointCloud2 message declared and what decoding it found.
struct PointCloud2Info {
  std::int64_t stamp_ns = 0;            ///< header stamp (ns)
  std::string frame_id;                 ///< header frame_id
  std::uint32_t width = 0;              ///< points per row
  std::uint32_t height = 0;             ///< rows
  std::uint32_t point_step = 0;         ///< bytes per point
  std::uint32_t row_step = 0;           ///< bytes per row
  bool is_bigendian = false;            ///< point data byte order
  bool is_dense = true;                 ///< the message's claim that no point is invalid
  std::vector<FieldInfo> fields;        ///< fields as declared ('F'/'I'/'U', size, count)
  std::uint64_t points_in_message = 0;  ///< width * height
  std::uint64_t non_finite = 0;         ///< points dropped: x, y or z NaN or infinite
  std::uint64_t out_of_range = 0;       ///< points dropped: beyond float32's range
  std::string intensity_field;          ///< field read as intensity, empty if none
  std::string time_field;               ///< field read as per-point time, empty if none or dropped
  TimeUnit time_unit = TimeUnit::Auto;  ///< unit the time field was read in
  bool time_absolute = false;           ///< the times were absolute stamps (made relative to the earliest)
  std::string time_dropped;             ///< why the times were dropped (implausible), empty otherwise
  bool big_endian_cdr = false;          ///< ROS 2: the CDR encapsulation was big endian
};

/// The sensor_msgs/PointCloud2 type names this reader decodes, in ROS 2 and ROS 1 spelling.
bool is_point_cloud2_type(std::string_view type);

/// One nav_msgs/Odometry message: the pose of `child_frame_id` in `frame_id` and its
/// covariance (the twist is not read).
struct OdometryMessage {
  std::int64_t stamp_ns = 0;   ///< header stamp (ns)
  std::string frame_id;        ///< header frame_id: the fixed frame of the pose
  std::string child_frame_id;  ///< the body whose pose this is
  /// T_frame_child (rotation from the message's quaternion, normalized).
  Eigen::Matrix4d pose = Eigen::Matrix4d::Identity();
  /// pose.covariance: x, y, z, then rotations about x, y, z (row major, as ROS writes it).
  Eigen::Matrix<double, 6, 6> covariance = Eigen::Matrix<double, 6, 6>::Zero();
};

/// The nav_msgs/Odometry type names this reader decodes, in ROS 2 and ROS 1 spelling.
bool is_odometry_type(std::string_view type);

/// Decodes one serialized nav_msgs/Odometry (the header, child frame and pose with its
/// covariance; the twist that follows is not read). A non-finite position or covariance, or
/// a quaternion that is not finite or not within 0.1% of unit length, is an IoError naming
/// `context` and the field.
OdometryMessage decode_odometry(std::string_view bytes, MessageEncoding encoding, const std::string& context);

/// One sensor_msgs/Imu message: its header and the gyroscope and accelerometer readings
/// (the orientation and the covariances are not read).
struct ImuMessage {
  std::int64_t stamp_ns = 0;  ///< header stamp (ns)
  std::string frame_id;       ///< header frame_id: the IMU's frame
  /// angular_velocity (rad/s) and linear_acceleration (m/s^2); `time` is the header stamp
  /// in seconds (ndtcu localize --imu-topic uses the bag's record time instead, as for
  /// every topic).
  ImuSample sample;
};

/// The sensor_msgs/Imu type names this reader decodes, in ROS 2 and ROS 1 spelling.
bool is_imu_type(std::string_view type);

/// Decodes one serialized sensor_msgs/Imu (header, orientation, angular_velocity,
/// linear_acceleration and their covariances; the orientation and covariances are skipped).
/// A non-finite angular_velocity or linear_acceleration is an IoError naming `context`
/// and the field.
ImuMessage decode_imu(std::string_view bytes, MessageEncoding encoding, const std::string& context);

/// Serializes one sensor_msgs/msg/Imu in little-endian CDR, stamped `stamp_ns` in
/// `frame_id`: orientation unknown (the identity with orientation_covariance[0] = -1, as
/// the message's definition says), `sample`'s angular velocity and linear acceleration
/// with the diagonal covariances `gyro_variance` and `accel_variance`.
std::string encode_imu(std::int64_t stamp_ns, const std::string& frame_id, const ImuSample& sample,
                       double gyro_variance = 0.0, double accel_variance = 0.0);

/// True when `path` names a bag: a `.bag`, `.mcap` or `.db3` file, or a folder holding a
/// `metadata.yaml`.
bool is_bag_path(const std::string& path);

/// Decodes one serialized sensor_msgs/PointCloud2. x, y, z of any PointField type (float
/// or integer), an intensity field and a per-point time field (ReadOptions::time_field,
/// docs/formats.md) if present; any point_step, padding, row_step and
/// height; is_bigendian honoured; non-finite points dropped and counted. `context` names
/// the message in errors (e.g. "bag.mcap: topic /points: message 3"). Throws IoError.
PointCloud decode_point_cloud2(std::string_view bytes, MessageEncoding encoding, const std::string& context,
                               const ReadOptions& options = {}, PointCloud2Info* info = nullptr);

/// Serializes `cloud` as one sensor_msgs/msg/PointCloud2 in little-endian CDR, stamped
/// `stamp_ns` in `frame_id`: one row, fields x y z (float32), intensity (float32) and t
/// (float32 seconds, PointCloud::time) when the cloud has them, world coordinates (origin
/// added), is_dense. The bytes McapBagWriter stores
/// and a ROS 2 publisher sends (the node publishes them without a Python message).
std::string encode_point_cloud2(std::int64_t stamp_ns, const std::string& frame_id, const PointCloud& cloud);

/// Serializes one geometry_msgs/msg/PoseStamped in little-endian CDR: the rigid transform
/// `pose` (its rotation as a unit quaternion), stamped `stamp_ns` in `frame_id`.
std::string encode_pose_stamped(std::int64_t stamp_ns, const std::string& frame_id, const Eigen::Matrix4d& pose);

/// Serializes one geometry_msgs/msg/PoseWithCovarianceStamped in little-endian CDR: `pose` as
/// encode_pose_stamped() writes it, and `covariance` (x, y, z, then rotations about x, y, z;
/// row major, as ROS writes it).
std::string encode_pose_with_covariance_stamped(std::int64_t stamp_ns, const std::string& frame_id,
                                                const Eigen::Matrix4d& pose,
                                                const Eigen::Matrix<double, 6, 6>& covariance);

/// Reads a bag: opening it indexes every message (one pass over the file; chunks are
/// decompressed once to be indexed). Reading messages afterwards is thread-safe.
class BagReader {
 public:
  /// Opens and indexes the bag at `path` (see is_bag_path). Throws IoError.
  explicit BagReader(const std::string& path, const BagReadLimits& limits = {});
  /// Indexes a single MCAP or ROS 1 bag held in memory (`name` is used in errors); the
  /// bytes must outlive the reader. sqlite3 storage is read from files only.
  static BagReader from_memory(std::string_view bytes, const std::string& name, BagFormat format,
                               const BagReadLimits& limits = {});
  ~BagReader();
  /// Movable.
  BagReader(BagReader&&) noexcept;
  /// Movable.
  BagReader& operator=(BagReader&&) noexcept;

  /// What the bag holds.
  const BagInfo& info() const;
  /// The topic named `name`; throws IoError listing the bag's topics when there is none.
  const TopicInfo& topic(const std::string& name) const;
  /// The PointCloud2 topic to read: `requested` when given (an error when it is not a
  /// PointCloud2 topic), else the only PointCloud2 topic (an error listing them when there
  /// are several, and when there is none).
  const TopicInfo& point_cloud_topic(const std::string& requested = {}) const;
  /// The messages of `topic` in time order (ties in the order the bag holds them).
  const std::vector<MessageRef>& messages(const std::string& topic) const;
  /// The serialized bytes of message `index` of `topic`.
  std::string read_raw(const std::string& topic, std::size_t index) const;
  /// Decodes message `index` of the PointCloud2 topic `topic`.
  PointCloud read_point_cloud(const std::string& topic, std::size_t index, const ReadOptions& options = {},
                              PointCloud2Info* info = nullptr) const;
  /// Decodes message `index` of `topic`, which must hold nav_msgs/Odometry (an IoError
  /// naming the type it holds otherwise).
  OdometryMessage read_odometry(const std::string& topic, std::size_t index) const;
  /// Decodes message `index` of `topic`, which must hold sensor_msgs/Imu (an IoError
  /// naming the type it holds otherwise).
  ImuMessage read_imu(const std::string& topic, std::size_t index) const;
  /// "FILE: topic T: message K", the prefix of a message's errors.
  std::string message_context(const std::string& topic, std::size_t index) const;

 private:
  struct Impl;
  BagReader();
  std::unique_ptr<Impl> impl_;
};

/// Writes point clouds as a ROS 2 bag with MCAP storage (uncompressed, unchunked, without a
/// summary section: the MCAP spec allows both, and readers then scan the file): a folder `path` holding `metadata.yaml` and `<folder name>_0.mcap`. Messages
/// are sensor_msgs/msg/PointCloud2 in little-endian CDR with fields x y z (float32) and
/// intensity (float32) when the cloud has it, in world coordinates (origin added).
class McapBagWriter {
 public:
  /// Creates the folder (it must not exist, or be empty) and starts the MCAP file.
  McapBagWriter(const std::string& path, std::string topic, std::string frame_id);
  /// Finishes the bag if close() was not called (errors are then logged, not thrown),
  /// unless an exception is unwinding through the writer: the unfinished bag is then
  /// dropped (the folder holds neither the MCAP file nor metadata.yaml).
  ~McapBagWriter();
  McapBagWriter(const McapBagWriter&) = delete;
  McapBagWriter& operator=(const McapBagWriter&) = delete;
  /// Appends one cloud, recorded (and stamped) at `time_ns`. Times must not decrease
  /// (over every topic of the bag).
  void write(std::int64_t time_ns, const PointCloud& cloud);
  /// Adds a sensor_msgs/msg/Imu topic `topic` in frame `frame_id` (at most one, before
  /// the first write_imu()), whose samples carry the diagonal covariances given.
  void add_imu_topic(const std::string& topic, const std::string& frame_id, double gyro_variance = 0.0,
                     double accel_variance = 0.0);
  /// Appends one IMU sample (encode_imu()) on the IMU topic, recorded and stamped at
  /// `time_ns`. Times must not decrease (over every topic of the bag).
  void write_imu(std::int64_t time_ns, const ImuSample& sample);
  /// Writes the footer, puts the MCAP file in place (written whole, ndtcu/output_file.hpp),
  /// then writes metadata.yaml. Throws IoError.
  void close();
  /// Path of the MCAP file.
  const std::string& mcap_path() const { return mcap_path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string mcap_path_;
};

}  // namespace ndtcu::rosbag
