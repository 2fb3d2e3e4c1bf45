#pragma once
/// \file
/// Scan-to-map localization: one scan in, one pose and a validity verdict out.
///
/// Per scan the Localizer (1) crops by range and voxel-downsamples the scan (unless it was
/// preprocessed already; on the GPU when the aligner runs on CUDA, see
/// LocalizerSettings::gpu_preprocess), (2) predicts the pose from the last two good poses
/// (constant velocity, scaled by the time stamps), (3) aligns the scan to the map with NDT
/// from that prediction, (4) checks the result (NVTL threshold, Autoware's 2.3 by default)
/// and (5) on failure retries a bounded number of times: an attempt that ran out of
/// iterations is continued from where it stopped, otherwise the scan is aligned from the
/// last good pose.
/// If nothing passes, the frame is *lost*: the result says so, carries the prediction (not
/// the failed alignment) as its pose, and the motion model keeps the last good poses. A localization stack feeds scans and reads `valid` before using a pose.

#include <ndtcu/aligner.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <memory>

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace ndtcu {

/// Everything a Localizer needs besides the map and the scans.
struct LocalizerSettings {
  /// NDT settings (Autoware's preset: resolution 2.0, fixed step 0.1, 30 iterations,
  /// Autoware covariance, which the NVTL threshold below was tuned on), with
  /// pose_covariance Laplace: a filter downstream needs a covariance with every pose, and
  /// the Laplace one costs no extra alignment. The localizer estimates it once per valid
  /// frame, for the accepted alignment only (its aligner runs with PoseCovariance::None,
  /// so retries and lost frames cost no estimate); None leaves it zero.
  AlignSettings align = [] {
    AlignSettings s = autoware_preset();
    s.pose_covariance = PoseCovariance::Laplace;
    return s;
  }();
  /// Scan points closer than this to the sensor are dropped (m): returns from the vehicle
  /// itself and the sensor's near-field noise.
  double min_range = 1.0;
  /// Scan points farther than this are dropped (m): sparse far returns add little but cost.
  double max_range = 100.0;
  /// Voxel-filter leaf for the scan (m; 0 keeps every point). 1.0 m brings a 64-ring scan
  /// (~70-120k points) to a few thousand, the size Autoware's NDT input is tuned for.
  double voxel_leaf = 1.0;
  /// Crop and voxel-filter scans on the GPU when the aligner's backend is CUDA (ignored on
  /// the CPU backend). The GPU filter keeps the CPU filter's points, cells and cell order;
  /// a centroid may differ from the CPU's in the last float bits (its points are summed in
  /// input order, the CPU sums them in PCL's order). Each concurrent preprocess() caller
  /// gets a filter of its own with its own CUDA stream; filtering that overlaps an alignment
  /// shares the device with it (on BALM and an H100 it moved the alignment's p95 from
  /// 1.30-1.44 ms to 1.35-1.45 ms).
  bool gpu_preprocess = true;
  /// A pose is valid when its NVTL reaches this (Autoware's ndt_scan_matcher default, tuned
  /// with the Autoware covariance at resolution 2.0; NVTL depends on both: at resolution 1.0
  /// a correct BALM pose scores about 2.0, so a finer map needs a lower threshold).
  double nvtl_threshold = 2.3;
  /// ... and when at least this share of the scan's points found a map voxel. NVTL averages
  /// over the points that found one, so a scan that mostly misses the map (taken elsewhere,
  /// or a cloud of a handful of points) can score high on the few it hits; with many
  /// hypotheses per frame (the searches below) one of them will. Correct BALM and simulator
  /// poses match 78-100% of their points.
  double min_matched_ratio = 0.5;
  /// Reject an alignment that used every iteration without meeting the convergence rule,
  /// even when its NVTL passes (Autoware's check). On BALM OS0 the frames that ran out of
  /// iterations were the ones 0.2-0.7 m off with NVTL still above 2.3; the retry fixes them.
  bool reject_max_iterations = true;
  /// Retries after a failed first attempt (0: none). Each retry continues the best attempt
  /// from its end pose when that attempt ran out of iterations (a long correction still under
  /// way), and otherwise (only without the rotation search) starts from the last good pose.
  /// Bounds the time a bad frame takes.
  int recovery_attempts = 2;
  /// When the attempts above fail: one batch of hypotheses at the prediction's and the last
  /// good pose's positions, each turned by the rotations of rotation_offsets(
  /// rotation_search_range_deg, rotation_search_step_deg) about the sensor, searched as
  /// search_hypotheses() does (a coarse pass, the best distinct places refined, the winner
  /// by NVTL); the winner is taken when it passes the check and no distinct pose scores
  /// within the ambiguity margin of it. A sensor that turns fast between scans (a hand-held
  /// or a vehicle at 1 Hz: up to 41 deg between BALM's odd scans, the constant-velocity
  /// prediction up to 59 deg off in roll, pitch and yaw together) leaves the Newton basin
  /// of the prediction; this brings it back. It replaces the retry from the last good pose,
  /// which it contains (the rotation offset zero), and which alone accepted confident wrong
  /// poses there (2.3 m off with NVTL above the threshold).
  bool rotation_search = true;
  /// An alignment (the first attempt, a retry or a search's winner) is taken only when its
  /// NVTL also reaches this share of the NVTL the accepted frames have been scoring (a
  /// running mean, known from the first accepted frame and forgotten after ten frames
  /// lost in a row, when the fixed threshold alone judges until one is accepted; 0: no
  /// such check). An attempt that fails only this goes on to the retries and searches. A scene's right poses score
  /// alike (BALM 3.2-3.4, the simulator's 3.3-3.4), while a search over hundreds of
  /// hypotheses, or a retry from a bad start, can end at a wrong place that passes the fixed
  /// threshold: on simulated 1 Hz turns, poses 2-20 m off at NVTL 2.5-2.7 passed Autoware's
  /// 2.3.
  double search_nvtl_ratio = 0.85;
  /// The largest rotation (deg) the rotation search tries about each of its two centres.
  double rotation_search_range_deg = 45.0;
  /// Its grid step (deg): 45 at 15 is 123 rotations per centre, every rotation of the ball
  /// within 13 deg of one.
  double rotation_search_step_deg = 15.0;
  /// When the attempts above fail, search for the scan around the prediction as
  /// find_initial_pose() does (positions within recovery_search_radius, every 15 deg of
  /// yaw, two batches) and take the winner when it passes the check and no distinct pose
  /// scores within the search's ambiguity margin of it. Off by default.
  bool recovery_search = false;
  /// Radius (m) of the recovery search's positions around the prediction, for a frame
  /// right after a good one.
  double recovery_search_radius = 2.0;
  /// How much the radius grows per second since the last good pose (m/s): once lost, the
  /// prediction no longer follows the vehicle, so the search widens with the time it could
  /// have moved. Capped at recovery_search_max_radius.
  double recovery_search_speed = 1.5;
  /// Largest recovery-search radius (m): 30 m at a 1 m grid and 15 deg of yaw is about
  /// 68,000 hypotheses.
  double recovery_search_max_radius = 30.0;
  /// Largest prediction step, in multiples of the last inter-frame motion (a long gap after
  /// lost frames would otherwise extrapolate the velocity without limit).
  double max_prediction_scale = 5.0;
};

/// Throws Error naming the first setting out of range (ranges, leaf, NVTL threshold,
/// recovery attempts, prediction scale) after checking the NDT settings.
void validate(const LocalizerSettings& settings);

/// What happened to one frame.
enum class FrameStatus {
  Tracked,    ///< the first attempt (from the prediction) passed the check
  Recovered,  ///< the first attempt failed, a retry passed
  Lost,       ///< no attempt passed: the pose is the prediction and must not be trusted
};

/// "tracked", "recovered", "lost".
const char* to_string(FrameStatus status);

/// The outcome of one Localizer::localize call.
struct LocalizationResult {
  /// T_map_sensor. For a valid frame, the accepted alignment; for a lost one, the prediction.
  Eigen::Matrix4d pose = Eigen::Matrix4d::Identity();
  bool valid = false;                         ///< the pose passed the check (Tracked or Recovered)
  FrameStatus status = FrameStatus::Lost;     ///< tracked, recovered or lost
  Eigen::Matrix4d prediction = Eigen::Matrix4d::Identity();  ///< the constant-velocity guess
  /// The accepted alignment (valid frames) or the attempt with the highest NVTL (lost ones).
  AlignResult alignment;
  int attempts = 0;                 ///< alignments run for this frame (1 + retries + recovery-search hypotheses)
  int iterations_total = 0;         ///< Newton iterations over all attempts
  int evaluations = 0;              ///< derivative evaluations over all attempts
  std::size_t points_in = 0;        ///< scan points given
  std::size_t points_used = 0;      ///< points after the range crop and voxel filter
  double preprocess_ms = 0.0;       ///< crop and filter time inside localize() (0 if done before)
  double align_ms = 0.0;            ///< wall time of all attempts
  /// Pose covariance of the accepted alignment, in [x y z roll pitch yaw] order, by
  /// settings.align.pose_covariance (Laplace by default: (-H)^-1 of the NDT score's Hessian);
  /// the same as alignment.covariance, whose covariance_xy, covariance_mode and
  /// covariance_valid say more. Zero for lost frames, for None, and for Laplace when H is
  /// not negative definite. Its time is alignment.timings.covariance_ms (not in align_ms).
  Eigen::Matrix<double, 6, 6> covariance = Eigen::Matrix<double, 6, 6>::Zero();
};

/// Tracks a sensor in a fixed map, one scan at a time. Not thread-safe (one call at a
/// time), but preprocess() is const and may run on other threads meanwhile.
class Localizer {
 public:
  /// Validates `settings` (throws Error) and creates the aligner (see Aligner's constructor
  /// for the backend and `cuda_stream`).
  explicit Localizer(const LocalizerSettings& settings = LocalizerSettings{}, CUstream_st* cuda_stream = nullptr);
  /// Releases the map, the aligner and its workers.
  ~Localizer();
  /// Moves the map, the aligner and the motion state.
  Localizer(Localizer&&) noexcept;
  /// Moves the map, the aligner and the motion state.
  Localizer& operator=(Localizer&&) noexcept;

  /// The settings in use.
  const LocalizerSettings& settings() const noexcept;
  /// The backend the alignments run on: "cpu" or "cuda".
  const char* backend() const noexcept;
  /// Where preprocess() runs: "cuda" (gpu_preprocess with the CUDA backend) or "cpu".
  const char* preprocess_backend() const noexcept;
  /// The aligner (its target map, settings and backend).
  const Aligner& aligner() const noexcept;

  /// Builds the voxel map from `map` (world frame). Keeps the motion state.
  void set_map(const PointCloud& map);
  /// Uses a voxel map built elsewhere (see Aligner::set_target).
  void set_map(std::shared_ptr<const VoxelMap> map);

  /// Starts (or restarts) tracking: the next scan is aligned from `pose` (T_map_sensor).
  /// Forgets the velocity. Throws Error for a non-finite or non-rigid matrix.
  void set_initial_pose(const Eigen::Matrix4d& pose);
  /// True once an initial pose was given.
  bool initialized() const noexcept;

  /// The range crop and voxel filter of the settings (on the device of preprocess_backend());
  /// thread-safe: concurrent callers run concurrently, each on a GPU filter of its own.
  PointCloud preprocess(const PointCloud& scan) const;

  /// Preprocesses `scan` (sensor frame) and localizes it. `time` (seconds) scales the
  /// constant-velocity prediction; equal or non-increasing times predict one frame's motion.
  /// Throws Error before set_map / set_initial_pose, or for a non-finite point.
  LocalizationResult localize(const PointCloud& scan, double time);
  /// The same for a scan already passed through preprocess().
  LocalizationResult localize_preprocessed(const PointCloud& filtered, double time);

  /// The constant-velocity prediction for a scan at `time` (the last good pose when fewer
  /// than two are known). Throws Error before set_initial_pose.
  Eigen::Matrix4d predict(double time) const;

  /// Frames lost in a row since the last valid one.
  int consecutive_lost() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndtcu
