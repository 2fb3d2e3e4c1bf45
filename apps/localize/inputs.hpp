#pragma once
// `ndtcu localize`: what a run reads before its first frame: the scans, the reference poses
// matched to them, the odometry, the first pose, and the map.
#include "localize/options.hpp"

#include <ndtcu/localizer.hpp>
#include <ndtcu/rosbag.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/trajectory.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ndtcu::cli::localize {

/// Milliseconds since `t0`.
double ms_since(std::chrono::steady_clock::time_point t0);

// A prediction from wheel, inertial or LiDAR-inertial odometry (--odometry): the motion
// the odometry measured between the previous frame and this one, applied to the previous
// frame's pose; its covariance is the previous frame's plus the odometry's drift over that
// motion (--odometry-noise: standard deviations of a per metre and b per second in each
// axis of the position, c per radian turned and d per second in each angle).
class OdometryPredictor {
 public:
  OdometryPredictor(Trajectory odometry, const std::vector<double>& noise)
      : odometry_(std::move(odometry)), noise_(noise) {}

  // The prediction at `time` from the previous frame (`pose` at `last_time`, `covariance`),
  // or nullopt where the odometry does not cover both times.
  std::optional<std::pair<Eigen::Matrix4d, Eigen::Matrix<double, 6, 6>>> predict(const Eigen::Matrix4d& pose,
                                                                               double last_time,
                                                                               const Eigen::Matrix<double, 6, 6>& cov,
                                                                               double time) const;

  // The sensor's motion over the sweep of a scan at `time` from `begin` to `end` (its first
  // and last point times, begin < end): the odometry's own motion between them, in parts
  // at the odometry's poses inside the sweep when it has any (a motion that changes within
  // the sweep), or nullopt where it does not cover both.
  std::optional<SweepMotionParts> sweep_motion(double time, double begin, double end) const;

  std::size_t size() const { return odometry_.size(); }

 private:
  Trajectory odometry_;
  std::vector<double> noise_;
};

/// The scans of a run, the reference poses matched to them, the odometry and the first pose.
struct LocalizeInputs {
  // A rosbag (a .bag, .mcap or .db3 file, or a folder with metadata.yaml): scan k is
  // message k of the PointCloud2 topic, at the bag's record time, read by the readers.
  std::shared_ptr<const rosbag::BagReader> bag;
  std::string bag_topic;
  std::vector<ScanEntry> scans;
  Trajectory reference;
  std::vector<std::optional<std::size_t>> matches;  // per scan, with a reference only
  std::string matching = "none";
  ReferenceCheck reference_check;
  std::size_t unmatched_frames = 0;  // frames with no reference pose (a counted warning)
  std::optional<OdometryPredictor> odometry;
  std::string odometry_source;  // names the odometry in messages
  // IMU samples (--imu, --imu-topic) in the order read, fed to the localizer ahead of
  // each scan's sweep; the localizer counts and drops any out of time order.
  std::vector<ImuSample> imu;
  std::string imu_source;  // names them in messages
  Eigen::Matrix4d initial = Eigen::Matrix4d::Identity();
  std::string initial_source = "identity";
  bool global = false;  // --init global: no initial pose, the whole map searched
};

/// Reads the scan list, the reference, the odometry and the first pose of `o`; throws
/// Error (IoError for a file) naming the option.
LocalizeInputs read_inputs(const LocalizeOptions& o, double init_time_difference);

/// The map a run localizes in: one point cloud voxelized once, or a tiled map whose tiles
/// around the pose a streamer loads on a background thread. Stays where it is made: the
/// streamer's updates reach the localizer through it.
struct LocalizeMap {
  LocalizeMap() = default;
  LocalizeMap(const LocalizeMap&) = delete;
  LocalizeMap& operator=(const LocalizeMap&) = delete;

  // The localizer, once made: updates stage their maps on it (set before the first update).
  Localizer* localizer_slot = nullptr;
  std::unique_ptr<TiledMapStreamer> streamer;
  std::shared_ptr<const VoxelMap> voxels;
  PointCloud map;
  std::size_t points_read = 0, points = 0, voxel_count = 0;
  double load_ms = 0.0, build_ms = 0.0;
};

/// Reads the map of `o` into `m` (with a tiled map, the tiles around `initial`).
/// The map is built with voxel_map_options(s, execution), as the localizer's aligner builds
/// its own.
void load_map(LocalizeMap& m, const LocalizeOptions& o, const AlignSettings& s, const ExecutionOptions& execution,
              const Eigen::Matrix4d& initial);

/// Gives the map of `m` to `localizer` (which the streamer's updates reach from now on) and
/// counts its voxels; throws Error for a map without one.
void attach_map(LocalizeMap& m, Localizer& localizer, const LocalizeOptions& o, const AlignSettings& s);

}  // namespace ndtcu::cli::localize
