#pragma once
/// \file
/// The entry point: align a source scan to a voxelized target.
///
/// Frames. The target map keeps its points relative to its origin o_m (double). A source
/// cloud's points are x_s = o_s + x (o_s its origin, zero for a sensor scan). The pose T
/// maps source world coordinates into the target's world frame. Internally the optimizer
/// works near zero: it moves the source origin into the translation and subtracts the map
/// origin, t_internal = R o_s + t - o_m, so a UTM map (1e6 m) keeps millimetres; the result
/// is converted back (t = t_internal - R o_s + o_m). With both origins zero (the usual
/// scan-to-scan case) the internal pose is the pose.

#include <ndtcu/execution.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/tiled_voxel_map.hpp>
#include <ndtcu/voxel_map.hpp>

#include <Eigen/Core>

#include <memory>
#include <vector>

namespace ndtcu {

/// 4x4 transform of pose [x y z roll pitch yaw]: Translation * Rx(roll) * Ry(pitch) * Rz(yaw).
Eigen::Matrix4d pose_to_matrix(const Pose6& pose);

/// Pose of a rigid 4x4 transform, roll in (-pi, pi], pitch in [-pi/2, pi/2] (yaw 0 and
/// roll absorbing it at pitch +-pi/2). Throws Error for a non-finite or non-rigid matrix
/// (rotation not orthonormal within 1e-4, bottom row not 0 0 0 1).
Pose6 matrix_to_pose(const Eigen::Matrix4d& transform);

/// The VoxelMapOptions an AlignSettings implies (resolution, covariance, thresholds), run
/// as `execution` says (threads, backend and device: a CUDA aligner's maps, and its tiles,
/// are built on the GPU, with the CPU build's bits). An aligner's own maps are built with
/// voxel_map_options(aligner.settings(), aligner.execution()).
VoxelMapOptions voxel_map_options(const AlignSettings& settings, const ExecutionOptions& execution = {});

/// Options of a batched alignment (Aligner::align_batch).
struct BatchOptions {
  /// Keep each hypothesis's per-iteration trace (AlignResult::trace). Off by default: a
  /// batch of thousands of hypotheses would otherwise read back and store every iteration.
  bool trace = false;
  /// Apply the settings' pose prior (AlignSettings::prior); false aligns
  /// every hypothesis without it, e.g. a search whose hypotheses are far from the prior.
  bool prior = true;
  /// Newton iterations per hypothesis at most: 0 takes the aligner's max_iterations; a
  /// smaller number runs a coarse pass (hypotheses moved a little, to be ranked) on the same
  /// map and backend. Must be 0 or in [1, kMaxIterations] (Error otherwise).
  int max_iterations = 0;
  /// Largest step |dp| per Newton iteration: 0 takes the aligner's step_size (a value > 0
  /// overrides it for this call, e.g. a search's refinement of hypotheses far from their
  /// optimum). Must be 0, or finite and at least half the aligner's epsilon (Error
  /// otherwise: steps are kept in [epsilon / 2, step_size]).
  double step_size = 0.0;
  /// Fill each result's localizability (AlignResult::localizability, a 6x6 eigen
  /// decomposition per hypothesis); false skips it (a coarse pass whose results are only
  /// ranked).
  bool localizability = true;
};

/// Aligns source scans to one target. Holds the voxel map and the worker threads, so
/// repeated align() calls (a localization loop) reuse both. Not thread-safe: one align at
/// a time per Aligner.
///
/// Out of memory: any call may throw std::bad_alloc, whichever thread's allocation failed
/// (or Error, when a worker thread cannot be started). The aligner then keeps its settings,
/// its target and its workers, its next call gives the bits it would have given had
/// nothing failed, and nothing the failed call allocated is left behind.
class Aligner {
 public:
  /// Validates `settings` and `execution` (throws Error for an out-of-range value), picks
  /// the backend `execution` asks for and starts the workers. With the CUDA backend every
  /// device operation runs on `execution.cuda_stream` (a cudaStream_t; null: the default
  /// stream), which the aligner uses but never owns. Backend::Cuda without a CUDA build or
  /// device throws CudaError here.
  explicit Aligner(const AlignSettings& settings = AlignSettings{},
                   const ExecutionOptions& execution = ExecutionOptions{});
  ~Aligner();
  /// Moves the map and the workers.
  Aligner(Aligner&&) noexcept;
  /// Moves the map and the workers.
  Aligner& operator=(Aligner&&) noexcept;

  /// The settings in use.
  const AlignSettings& settings() const noexcept;
  /// How the aligner runs, as it was made (its backend() is the one `execution().backend`
  /// resolved to).
  const ExecutionOptions& execution() const noexcept;
  /// Replaces the settings' pose prior (AlignSettings::prior) for the calls that follow:
  /// a localization loop moves it to each frame's prediction. Throws Error, keeping the
  /// prior in use, when `prior` is invalid (validate(PosePrior)). PosePrior{} removes it.
  void set_prior(const PosePrior& prior);
  /// The backend align() runs on: Backend::Cpu or Backend::Cuda, never Auto (resolved by
  /// resolve_backend when the aligner is made; to_string gives "cpu" or "cuda").
  Backend backend() const noexcept;
  /// Builds the target voxel map from `target` with voxel_map_options(settings(),
  /// execution()), on the
  /// backend the aligner runs on (VoxelMapOptions::backend: a CUDA aligner builds it on the
  /// GPU; the voxels are the CPU build's, bit for bit).
  void set_target(PointCloudView target);
  /// Uses a map built elsewhere; throws Error when its resolution or covariance mode
  /// differs from the settings.
  void set_target(std::shared_ptr<const VoxelMap> map);
  /// Prepares `map` for a later set_target(map) while align() goes on with the current
  /// target: the CUDA backend uploads it into a second set of device buffers on a stream of
  /// its own, so that set_target of the same map swaps them in without an upload (the CPU
  /// backend has nothing to prepare). The one member that may run on another thread while
  /// this aligner aligns (not while it is moved or destroyed). Throws as set_target does,
  /// and CudaError when the device memory is too small (the current target stays usable).
  void stage_target(std::shared_ptr<const VoxelMap> map);
  /// Follows a tiled map whose tiles change while this aligner aligns (a vehicle's map tiles
  /// loaded and dropped on another thread): each call (align, align_batch, evaluate, ...)
  /// first takes the version `tiles` last published (TiledVoxelMap::publish), so a new
  /// version is swapped in between two calls, never during one; a VersionHold keeps one
  /// version across several calls (attach_pose_covariance holds the version of the alignment
  /// it follows). A CUDA aligner with a tiled map that publishes on the GPU reads its device
  /// twin: the swap waits for nothing, on the host or the device, and no map is uploaded; one
  /// CUDA aligner follows a given tiled map at a time. Otherwise the published host map is
  /// used as set_target(map) would. Throws Error for a null map, one that has published
  /// nothing yet, another resolution or covariance mode than the settings', a CPU aligner
  /// given a map that publishes on the GPU, or a map another CUDA aligner follows. `tiles` is
  /// kept alive by the aligner; its owner may change and publish it on another thread while
  /// this aligner aligns.
  void set_target(std::shared_ptr<TiledVoxelMap> tiles);
  /// The target map (null before set_target). For a tiled target: the host map of the
  /// version in use, or null when it lives on the device only (see tiled_target()).
  const std::shared_ptr<const VoxelMap>& target() const noexcept;
  /// The tiled map followed (null unless set_target(tiles) was the last set_target).
  const std::shared_ptr<TiledVoxelMap>& tiled_target() const noexcept;
  /// True once a target is set (a map, a cloud's map or a tiled map).
  bool has_target() const noexcept;

  /// While it lives, the calls of the aligner that made it (Aligner::hold_target_version)
  /// take no newer version of a tiled target (set_target(tiles)): they keep the version the
  /// aligner used last (or the one the first call takes, when none was used yet), so an
  /// alignment and the pose covariance estimated after it (estimate_pose_covariance) see
  /// one map. Holds nest: the newest publish is taken again once the last one ends. No
  /// effect on a plain map. Move-only; must not outlive the aligner.
  class VersionHold {
   public:
    VersionHold(VersionHold&& other) noexcept;
    VersionHold(const VersionHold&) = delete;
    VersionHold& operator=(const VersionHold&) = delete;
    VersionHold& operator=(VersionHold&&) = delete;
    ~VersionHold();

   private:
    friend class Aligner;
    explicit VersionHold(int* holds) noexcept;
    int* holds_;  // the aligner's count of live holds; null once moved from
  };
  /// Holds the tiled map version in use until the returned VersionHold ends:
  ///   const Aligner::VersionHold hold = aligner.hold_target_version();
  ///   AlignResult r = aligner.align(scan, guess);  // both on one version
  ///   PoseCovarianceResult c = estimate_pose_covariance(aligner, scan, r, mode);
  /// (attach_pose_covariance takes one itself, after the alignment it follows.)
  [[nodiscard]] VersionHold hold_target_version() noexcept;

  /// Aligns `source` starting at `guess` (source-to-target, world frames). Throws Error
  /// when no target is set, the guess is not finite or not rigid, or a source point is not
  /// finite. An empty source, a map without voxels, no correspondence or a singular
  /// Hessian are results with that reason.
  ///
  /// Sources, here and in every member below, are PointCloudViews: a PointCloud, or points
  /// in the caller's own buffer, read where they lie (the CPU backend reads them at every
  /// evaluation, the CUDA backend uploads them once per call) and never copied into a
  /// cloud. They must stay valid, and unchanged, until the call returns; nothing keeps
  /// them after it.
  ///
  /// align() and align_batch() estimate no pose covariance, whatever
  /// AlignSettings::pose_covariance says: a caller that wants one calls
  /// attach_pose_covariance (ndtcu/pose_covariance.hpp) on the result, with this aligner.
  AlignResult align(PointCloudView source, const Eigen::Matrix4d& guess = Eigen::Matrix4d::Identity());
  /// The same with the guess as a pose [x y z roll pitch yaw], used as given (no
  /// round trip through a matrix). Throws Error for a non-finite entry.
  AlignResult align_from_pose(PointCloudView source, const Pose6& guess);

  /// Scores `source` at the fixed pose `transform` without iterating: score, TP, NVTL,
  /// correspondences and Hessian (iterations 0, reason Converged unless degenerate).
  AlignResult evaluate(PointCloudView source, const Eigen::Matrix4d& transform);
  /// evaluate() at every pose of `poses` (world frame), as one batch: one result per pose,
  /// each with the bits of evaluate() there. Throws Error for an empty list or a
  /// non-finite entry (naming the pose and the entry).
  std::vector<AlignResult> evaluate_batch(PointCloudView source, const std::vector<Pose6>& poses);
  /// The score, NVTL and counts evaluate_batch() gives at every pose of `poses` (world
  /// frame), with the same bits, and nothing else: no derivatives are taken and no
  /// AlignResult is made. For screening many poses (an initial pose search within 20 m and
  /// any yaw scores about 30,000). All zero for an empty source or a map without voxels.
  /// Throws Error as evaluate_batch() does.
  std::vector<PoseScore> score_batch(PointCloudView source, const std::vector<Pose6>& poses);

  /// The scan's own share of the score at the fixed pose `transform`, computed on the host
  /// whatever the backend: `hessian`, the sum of the points' Hessians (no prior), and
  /// `scatter`, sum_i g_i g_i' over the points' gradients g_i (each point's pairs summed).
  /// The two halves of PoseCovariance::Sandwich (ndtcu/pose_covariance.hpp). Returns false,
  /// both zero, when the map is held only on the device (a tiled map streamed to the GPU).
  bool score_scatter(PointCloudView source, const Eigen::Matrix4d& transform, Eigen::Matrix<double, 6, 6>& hessian,
                     Eigen::Matrix<double, 6, 6>& scatter);

  /// Aligns K pose hypotheses of one scan against the target, as one batch: one result per
  /// guess, in the guesses' order. Each hypothesis runs the Newton loop of align() under
  /// its own stopping rule, and its result has the bits of align_from_pose(source, guess)
  /// on the same backend, whatever K and whatever the other hypotheses are. Throws Error
  /// for an empty guess list or a non-finite guess (naming the hypothesis and the entry),
  /// and for what align() rejects. Traces are kept only when `options.trace`.
  std::vector<AlignResult> align_batch(PointCloudView source, const std::vector<Pose6>& guesses,
                                       const BatchOptions& options = BatchOptions{});
  /// The same with each guess as a rigid 4x4 transform; a non-rigid one is an Error naming it.
  std::vector<AlignResult> align_batch(PointCloudView source, const std::vector<Eigen::Matrix4d>& guesses,
                                       const BatchOptions& options = BatchOptions{});
  /// B scans, each with its own guesses (guesses[b] for sources[b]), as one batch: result
  /// [b][k] is that of align_batch(sources[b], guesses[b]) bit for bit. Throws Error when the
  /// two lists differ in length or any list is empty.
  std::vector<std::vector<AlignResult>> align_batch(const std::vector<PointCloudView>& sources,
                                                    const std::vector<std::vector<Pose6>>& guesses,
                                                    const BatchOptions& options = BatchOptions{});
  /// The same with the scans as PointClouds.
  std::vector<std::vector<AlignResult>> align_batch(const std::vector<PointCloud>& sources,
                                                    const std::vector<std::vector<Pose6>>& guesses,
                                                    const BatchOptions& options = BatchOptions{});

 private:
  std::vector<AlignResult> evaluate_poses(PointCloudView source, const std::vector<Pose6>& poses);
  std::vector<std::vector<AlignResult>> run_batch(const std::vector<PointCloudView>& sources,
                                                  const std::vector<const std::vector<Pose6>*>& guesses,
                                                  const BatchOptions& options);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One-shot: builds the map of `target`, aligns `source` from `guess` and attaches the
/// pose covariance settings.pose_covariance asks for (attach_pose_covariance), all run as
/// `execution` says.
AlignResult align(const PointCloud& target, PointCloudView source, const Eigen::Matrix4d& guess,
                  const AlignSettings& settings, const ExecutionOptions& execution = ExecutionOptions{});

}  // namespace ndtcu
