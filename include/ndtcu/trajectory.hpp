#pragma once
/// \file
/// Pose sequences: reading and writing TUM and KITTI trajectory files, and evaluating an
/// estimate against a reference (absolute and relative pose error).

#include <ndtcu/error.hpp>
#include <ndtcu/sweep_motion.hpp>

#include <Eigen/Geometry>

#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace ndtcu {

/// One pose of a trajectory: T_world_sensor at a time stamp.
struct StampedPose {
  double time = 0.0;                                      ///< seconds
  Eigen::Isometry3d pose = Eigen::Isometry3d::Identity();  ///< T_world_sensor
};

/// A trajectory: poses in time order.
using Trajectory = std::vector<StampedPose>;

/// Trajectory file formats.
enum class TrajectoryFormat {
  Tum,    ///< one line per pose: `t x y z qx qy qz qw`
  Kitti,  ///< one line per pose: row-major 3x4 [R | t]; pose i gets time i * kitti_period
  Auto,   ///< decided by the first data line: 8 numbers TUM, 12 numbers KITTI
};

/// Reads a TUM or KITTI file ('#' comment lines and blank lines skipped). KITTI poses
/// get time stamps i * `kitti_period` (seconds). Throws IoError naming the file and line
/// for anything malformed: wrong column count, non-numbers, a non-unit quaternion (off by
/// more than 1e-3), a rotation that is not orthonormal (off by more than 1e-3).
Trajectory read_trajectory(const std::string& path, TrajectoryFormat format = TrajectoryFormat::Auto,
                           double kitti_period = 0.1);

/// Writes `t x y z qx qy qz qw` lines (translations with micrometre digits even at 1e6 m).
void write_trajectory_tum(const std::string& path, const Trajectory& trajectory);

/// Writes row-major 3x4 KITTI lines (time stamps are not stored).
void write_trajectory_kitti(const std::string& path, const Trajectory& trajectory);

/// One line of a TUM file for `pose`, as write_trajectory_tum() writes it (with its '\n'):
/// for writing a trajectory pose by pose while it is being made.
std::string tum_line(const StampedPose& pose);

/// One line of a KITTI file for `pose`, as write_trajectory_kitti() writes it (with its '\n').
std::string kitti_line(const StampedPose& pose);

/// Parses "tum", "kitti" or "auto"; throws Error otherwise.
TrajectoryFormat trajectory_format_from_string(const std::string& name);

/// Times within this of a trajectory's first or last stamp (seconds; a microsecond, above
/// the rounding of a Unix time, 2.4e-7 s) are that stamp for
/// interpolate_pose: a scan's time computed as 19 x 0.1 s lies a rounding past a last
/// stamp written "1.900000".
inline constexpr double kStampTolerance = 1e-6;

/// The pose of `trajectory` (time-ordered) at `time`: the two poses around it, the
/// translation interpolated linearly and the rotation by slerp; the pose itself at an exact
/// stamp, and the end pose within kStampTolerance of either end. Nullopt for an empty
/// trajectory, a time outside its span or not finite, or two neighbours further apart than
/// `max_gap` seconds (a gap the interpolation cannot bridge).
std::optional<Eigen::Isometry3d> interpolate_pose(const Trajectory& trajectory, double time,
                                                  double max_gap = std::numeric_limits<double>::infinity());

/// The motion `odometry` (time-ordered T_world_sensor poses, the scans' clock) measured over
/// the sweep of a scan at `scan_time` from `begin` to `end` (its first and last point times,
/// begin < end), for Localizer::localize: its poses at the two ends (interpolate_pose) and
/// those between them (more than kStampTolerance from either end) as the parts'
/// boundaries (sweep_motion_parts; one part when it has no pose inside the sweep). Nullopt
/// where `end` is not after `begin` or the odometry does not cover both ends.
std::optional<SweepMotionParts> odometry_sweep_motion(const Trajectory& odometry, double scan_time, double begin,
                                                      double end);

/// Absolute trajectory error: translation differences of associated poses, in the frame
/// both are given in (no alignment is applied).
struct AteStats {
  std::size_t pairs = 0;  ///< associated poses
  double rmse_m = 0.0;    ///< root mean square
  double mean_m = 0.0;    ///< mean
  double median_m = 0.0;  ///< median
  double max_m = 0.0;     ///< largest
  /// Per associated pose: index in the estimate, index in the reference, error (m).
  std::vector<std::tuple<std::size_t, std::size_t, double>> per_pose;
};

/// Relative pose error over segments of one length (KITTI's odometry metric).
struct RpeStats {
  double segment_m = 0.0;            ///< segment length along the reference path
  std::size_t pairs = 0;             ///< segments evaluated (0: path shorter than the length)
  double translation_percent = 0.0;  ///< mean |t_err| / length * 100
  double rotation_deg_per_m = 0.0;   ///< mean angle(R_err) / length
};

/// Pairs estimate and reference poses whose time stamps differ by at most
/// `max_time_difference` (nearest reference for each estimate, in time order).
/// Returns (estimate index, reference index) pairs.
std::vector<std::pair<std::size_t, std::size_t>> associate(const Trajectory& estimate, const Trajectory& reference,
                                                           double max_time_difference = 0.01);

/// associate() one estimate pose at a time, for an estimate that is still being made:
/// feeding it the estimate's time stamps in order gives the pairs associate() gives.
/// Keeps a pointer to `reference`, which must outlive it.
class TimeAssociation {
 public:
  /// Association with `reference` (in time order) within `max_time_difference` seconds.
  explicit TimeAssociation(const Trajectory& reference, double max_time_difference = 0.01)
      : reference_(&reference), max_time_difference_(max_time_difference) {}
  /// The reference index paired with the next estimate pose, at `time` (not before the
  /// previous one's), or nullopt when no reference pose is that close.
  std::optional<std::size_t> next(double time);

 private:
  const Trajectory* reference_;
  double max_time_difference_;
  std::size_t r_ = 0;  // the reference pose nearest the previous time
};

/// The index of the pose of `trajectory` (in time order) nearest `time`, if one lies within
/// `max_time_difference` s of it (the earlier of two equally near).
std::optional<std::size_t> nearest_in_time(const Trajectory& trajectory, double time, double max_time_difference);

/// What sort_reference() found in a reference trajectory's stamps.
struct ReferenceCheck {
  /// Poses whose stamp lies before the stamp of the pose above them in the file. The
  /// trajectory was sorted; a caller counts it as a warning (`ndtcu localize` prints it and
  /// writes it to summary.json as reference.out_of_order).
  std::size_t out_of_order = 0;
};

/// Puts a reference trajectory read from `path` in time order (a stable sort: the matching
/// and the association that follow assume it) and checks its stamps. Throws Error naming
/// `path`, the two poses (their order in the file) and the stamp when two poses share one
/// stamp: a frame at that time could be paired with either, so no error computed against
/// them could be trusted.
ReferenceCheck sort_reference(Trajectory& reference, const std::string& path);

/// ATE over associated poses (see associate()).
AteStats absolute_trajectory_error(const Trajectory& estimate, const Trajectory& reference,
                                   double max_time_difference = 0.01);

/// ATE over given pairs (estimate index, reference index): e.g. the ones a localization
/// run matched frame by frame, so that its ATE covers exactly the frames given an error.
AteStats absolute_trajectory_error(const Trajectory& estimate, const Trajectory& reference,
                                   const std::vector<std::pair<std::size_t, std::size_t>>& pairs);

/// RPE for each segment length: for every associated start pose i, the first associated
/// pose j at least `length` further along the reference path; error
/// E = (ref_i^-1 ref_j)^-1 (est_i^-1 est_j).
std::vector<RpeStats> relative_pose_error(const Trajectory& estimate, const Trajectory& reference,
                                          const std::vector<double>& segment_lengths = {1.0, 5.0, 10.0},
                                          double max_time_difference = 0.01);

/// RPE over given pairs (estimate index, reference index), taken in the reference's order.
std::vector<RpeStats> relative_pose_error(const Trajectory& estimate, const Trajectory& reference,
                                          const std::vector<double>& segment_lengths,
                                          std::vector<std::pair<std::size_t, std::size_t>> pairs);

}  // namespace ndtcu
