#pragma once
/// \file
/// The sensor's motion over one sweep, as a caller gives it to Localizer::localize with the
/// scan (odometry over the sweep's own time), whole or in parts.

#include <Eigen/Core>

#include <cstddef>
#include <vector>

namespace ndtcu {

/// The sensor's motion over one sweep as a caller knows it (wheel or inertial odometry over
/// the sweep's own time span): linear velocity (m/s) and angular velocity (rad/s), both in
/// the sensor frame, constant over the sweep. Given to Localizer::localize with the scan, it
/// is the motion Deskew::Odometry de-skews with (and Deskew::Imu's translation, and
/// Deskew::Auto's motion when no IMU sample was given), instead of the motion from the last
/// good pose to the prediction, which is the sweep's only half a frame late and is not known
/// for a first frame at all.
struct SweepMotion {
  Eigen::Vector3d linear = Eigen::Vector3d::Zero();   ///< m/s, sensor frame
  Eigen::Vector3d angular = Eigen::Vector3d::Zero();  ///< rad/s, sensor frame
};

/// The constant motion that takes the sensor from pose `from` to pose `to` (T_world_sensor,
/// rigid) in `dt` seconds (positive): the twist log(from^-1 to) / dt. For a SweepMotion from
/// two odometry poses at a sweep's first and last point times. Throws Error for a
/// non-positive or non-finite `dt`, or a pose that is not a finite rigid transform.
SweepMotion sweep_motion_between(const Eigen::Matrix4d& from, const Eigen::Matrix4d& to, double dt);

/// The sensor's motion over one sweep in parts, for odometry denser than the sweeps: a
/// motion that changes within the sweep (a turn's onset or end, braking) bends the scan in a
/// way no single SweepMotion follows. Part k holds `motion[k]` from `begin[k]` to
/// `begin[k + 1]` (s from the scan's time; the last to `end`); the first part reaches below
/// its begin and the last above `end` (points outside the span). One part is a SweepMotion.
struct SweepMotionParts {
  static constexpr std::size_t kMaxParts = 16;  ///< the most parts a sweep takes
  std::vector<double> begin;        ///< increasing, one per part
  double end = 0.0;                 ///< the last part's end, after its begin (one part: unused)
  std::vector<SweepMotion> motion;  ///< one per part
  /// The sweep's motion in one part, as the SweepMotion overloads of Localizer::localize take it.
  static SweepMotionParts whole(const SweepMotion& m) { return SweepMotionParts{{0.0}, 0.0, {m}}; }
};

/// The parts of the motion through odometry poses `poses` (T_world_sensor, rigid) at
/// `times` (increasing, the scans' clock), for a scan at `scan_time`: part k from
/// times[k] - scan_time at sweep_motion_between(poses[k], poses[k + 1], its duration), the
/// parts ending at times.back() - scan_time. More than kMaxParts + 1 poses are thinned to
/// kMaxParts + 1 spread evenly over them (the first and last kept). Throws Error for fewer than
/// two poses, lengths that differ, times not finite and increasing, or a pose that is not
/// a finite rigid transform.
SweepMotionParts sweep_motion_parts(const std::vector<double>& times, const std::vector<Eigen::Matrix4d>& poses,
                                    double scan_time);

}  // namespace ndtcu
