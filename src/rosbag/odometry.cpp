// nav_msgs/Odometry, serialized by ROS 2 (CDR) or ROS 1 (message_cursor.hpp):
//   std_msgs/Header header                  stamp, frame_id (the fixed frame)
//   string child_frame_id                   the body
//   geometry_msgs/PoseWithCovariance pose   Point (x y z), Quaternion (x y z w), float64[36]
//   geometry_msgs/TwistWithCovariance twist (not read)
#include "message_cursor.hpp"

#include <Eigen/Geometry>

#include <cmath>
#include <cstdio>

namespace ndtcu::rosbag {

namespace {

// A quaternion further than this from unit length is not a rotation someone meant (the
// TUM reader's tolerance, trajectory.cpp); within it, it is normalized.
constexpr double kQuaternionTolerance = 1e-3;

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

bool is_odometry_type(std::string_view type) {
  return type == "nav_msgs/msg/Odometry" || type == "nav_msgs/Odometry";
}

OdometryMessage decode_odometry(std::string_view bytes, MessageEncoding encoding, const std::string& context) {
  const detail::MessageStart start = detail::message_start(bytes, encoding, context);
  detail::MessageCursor c(bytes, start, "Odometry", context);
  OdometryMessage out;
  out.stamp_ns = c.header(out.frame_id);
  out.child_frame_id = c.string("child_frame_id");
  static const char* const kPosition[] = {"pose.pose.position.x", "pose.pose.position.y", "pose.pose.position.z"};
  Eigen::Vector3d t;
  for (int i = 0; i < 3; ++i) {
    t(i) = c.get<double>(kPosition[i]);
    if (!std::isfinite(t(i))) c.fail(std::string(kPosition[i]) + " is " + number(t(i)));
  }
  static const char* const kOrientation[] = {"pose.pose.orientation.x", "pose.pose.orientation.y",
                                             "pose.pose.orientation.z", "pose.pose.orientation.w"};
  double q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = c.get<double>(kOrientation[i]);
    if (!std::isfinite(q[i])) c.fail(std::string(kOrientation[i]) + " is " + number(q[i]));
  }
  const Eigen::Quaterniond quaternion(q[3], q[0], q[1], q[2]);
  if (!(std::abs(quaternion.norm() - 1.0) <= kQuaternionTolerance)) {
    c.fail("pose.pose.orientation: quaternion norm " + number(quaternion.norm()) + " is not 1");
  }
  out.pose.topLeftCorner<3, 3>() = quaternion.normalized().toRotationMatrix();
  out.pose.topRightCorner<3, 1>() = t;
  for (int i = 0; i < 36; ++i) {
    const double v = c.get<double>("pose.covariance");
    if (!std::isfinite(v)) c.fail("pose.covariance[" + std::to_string(i) + "] is " + number(v));
    out.covariance(i / 6, i % 6) = v;
  }
  return out;
}

}  // namespace ndtcu::rosbag
