#pragma once
/// \file
/// Inertial measurements for de-skewing a sweep (LocalizerSettings::deskew = Deskew::Imu):
/// one gyroscope and accelerometer sample, and the CSV form `ndtcu simulate` writes and
/// `ndtcu localize --imu` reads (docs/formats.md, "IMU samples").

#include <Eigen/Core>

#include <string>
#include <vector>

namespace ndtcu {

/// One IMU sample, in the IMU's own frame (LocalizerSettings::imu_roll_deg ... turn it into
/// the LiDAR's).
struct ImuSample {
  double time = 0.0;  ///< seconds, in the scans' clock (the `time` given to Localizer::localize)
  /// Angular velocity (rad/s) about the IMU's x, y, z axes: the gyroscope.
  Eigen::Vector3d angular_velocity = Eigen::Vector3d::Zero();
  /// Linear acceleration (m/s^2, the specific force: +9.81 up at rest, as sensor_msgs/Imu
  /// has it): the accelerometer. Read, written and checked; the de-skew does not use it.
  Eigen::Vector3d linear_acceleration = Eigen::Vector3d::Zero();
};

/// Throws Error unless every number of `sample` is finite, naming `context` (e.g. "IMU
/// sample 12"), the field ("angular_velocity.y") and its value.
void check_imu_sample(const ImuSample& sample, const std::string& context);

/// Reads IMU samples from a CSV file: a header line `time,wx,wy,wz` or
/// `time,wx,wy,wz,ax,ay,az` (those names, in that order; blanks around them allowed), then
/// one sample a line (time in s, angular velocity in rad/s, linear acceleration in m/s^2;
/// without the acceleration columns it reads as zero). Blank lines and lines starting with
/// `#` are skipped. The samples are returned as the file orders them (the Localizer counts
/// and drops any out of time order). Throws IoError naming the file, the line and the
/// column for a wrong header, a line with another number of columns, a value that is not
/// a number or not finite.
std::vector<ImuSample> read_imu_csv(const std::string& path);

/// Writes `samples` as read_imu_csv() reads them (all seven columns; times to 1 ns, values
/// to 17 significant digits, so that they read back bit for bit). Throws IoError.
void write_imu_csv(const std::string& path, const std::vector<ImuSample>& samples);

}  // namespace ndtcu
