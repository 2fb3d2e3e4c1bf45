// sensor_msgs/Imu, serialized by ROS 2 (CDR) or ROS 1 (message_cursor.hpp):
//   std_msgs/Header header
//   geometry_msgs/Quaternion orientation          x y z w (float64), not read
//   float64[9] orientation_covariance             not read
//   geometry_msgs/Vector3 angular_velocity        rad/s
//   float64[9] angular_velocity_covariance        not read
//   geometry_msgs/Vector3 linear_acceleration     m/s^2
//   float64[9] linear_acceleration_covariance     not read
#include "bag_internal.hpp"
#include "message_cursor.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace ndtcu::rosbag {

namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

bool is_imu_type(std::string_view type) { return type == "sensor_msgs/msg/Imu" || type == "sensor_msgs/Imu"; }

ImuMessage decode_imu(std::string_view bytes, MessageEncoding encoding, const std::string& context) {
  const detail::MessageStart start = detail::message_start(bytes, encoding, context);
  detail::MessageCursor c(bytes, start, "Imu", context);
  ImuMessage out;
  out.stamp_ns = c.header(out.frame_id);
  out.sample.time = static_cast<double>(static_cast<long double>(out.stamp_ns) / 1e9L);
  for (int i = 0; i < 4; ++i) (void)c.get<double>("orientation");
  for (int i = 0; i < 9; ++i) (void)c.get<double>("orientation_covariance");
  static const char* const kRate[] = {"angular_velocity.x", "angular_velocity.y", "angular_velocity.z"};
  for (int i = 0; i < 3; ++i) {
    const double v = c.get<double>(kRate[i]);
    if (!std::isfinite(v)) c.fail(std::string(kRate[i]) + " is " + number(v));
    out.sample.angular_velocity(i) = v;
  }
  for (int i = 0; i < 9; ++i) (void)c.get<double>("angular_velocity_covariance");
  static const char* const kAccel[] = {"linear_acceleration.x", "linear_acceleration.y", "linear_acceleration.z"};
  for (int i = 0; i < 3; ++i) {
    const double v = c.get<double>(kAccel[i]);
    if (!std::isfinite(v)) c.fail(std::string(kAccel[i]) + " is " + number(v));
    out.sample.linear_acceleration(i) = v;
  }
  for (int i = 0; i < 9; ++i) (void)c.get<double>("linear_acceleration_covariance");
  return out;
}

std::string encode_imu(std::int64_t stamp_ns, const std::string& frame_id, const ImuSample& sample,
                       double gyro_variance, double accel_variance) {
  detail::CdrBuffer b;
  b.put(static_cast<std::int32_t>(stamp_ns / 1000000000));
  b.put(static_cast<std::uint32_t>(stamp_ns % 1000000000));
  b.str(frame_id);
  for (const double q : {0.0, 0.0, 0.0, 1.0}) b.put(q);
  for (int i = 0; i < 9; ++i) b.put(i == 0 ? -1.0 : 0.0);  // orientation unknown
  const auto vector_and_covariance = [&b](const Eigen::Vector3d& v, double variance) {
    for (int i = 0; i < 3; ++i) b.put(v(i));
    for (int i = 0; i < 9; ++i) b.put(i % 4 == 0 ? variance : 0.0);
  };
  vector_and_covariance(sample.angular_velocity, gyro_variance);
  vector_and_covariance(sample.linear_acceleration, accel_variance);
  return b.bytes;
}

}  // namespace ndtcu::rosbag
