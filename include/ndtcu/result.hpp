#pragma once
/// \file
/// What an alignment returns. Not converging, or not being able to start, is a result
/// with a reason, never an exception.

#include <ndtcu/localizability.hpp>
#include <ndtcu/settings.hpp>

#include <Eigen/Core>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ndtcu {

/// 6-vector pose [x y z roll pitch yaw] (m, rad), T = Translation * Rx(roll) * Ry(pitch) * Rz(yaw).
using Pose6 = Eigen::Matrix<double, 6, 1>;

/// The names of a pose's six entries, in Pose6's order.
inline constexpr std::array<const char*, 6> kPoseEntryNames = {"x", "y", "z", "roll", "pitch", "yaw"};

/// Why the iterations stopped.
enum class StopReason {
  Converged,         ///< the convergence rule was met
  MaxIterations,     ///< max_iterations reached without meeting it
  EmptySource,       ///< the source cloud has no points: nothing was done
  NoVoxels,          ///< the target has no voxel with a usable covariance
  NoCorrespondence,  ///< no source point has a voxel around it at the current pose
  SingularHessian,   ///< the Newton system has no unique solution (rank < 6) or no finite step
};

/// "converged", "max_iterations", "empty_source", "no_voxels", "no_correspondence",
/// "singular_hessian".
const char* to_string(StopReason r);

/// One Newton iteration as the optimizer saw it.
struct IterationTrace {
  Pose6 pose = Pose6::Zero();  ///< pose after the iteration (world frame)
  double score = 0.0;          ///< score at that pose
  double step_length = 0.0;    ///< length of the step taken (|dp|)
};

/// Where the time went (milliseconds, wall clock).
struct AlignTimings {
  double total_ms = 0.0;        ///< the whole align() call
  double optimize_ms = 0.0;     ///< the Newton loop (derivative evaluations and solves)
  int evaluations = 0;          ///< derivative evaluations (Newton steps plus line-search trials)
  double per_iteration_ms = 0.0;  ///< optimize_ms / iterations (0 without iterations)
  double upload_ms = 0.0;       ///< CUDA: source upload (and map upload when it changed)
  double gpu_ms = 0.0;          ///< CUDA: device time of the derivative kernels (events)
  std::uint64_t bytes_up = 0;   ///< CUDA: bytes sent per evaluation, summed over the align
  std::uint64_t bytes_down = 0; ///< CUDA: bytes read back per evaluation, summed
  std::uint64_t setup_bytes_up = 0;  ///< CUDA: source (and map) upload bytes of this align
  /// The pose covariance estimate (AlignSettings::pose_covariance), included in total_ms.
  double covariance_ms = 0.0;
};

/// The result of one alignment.
struct AlignResult {
  /// Source-to-target transform in the target's world frame (x_target = T x_source).
  Eigen::Matrix4d transform = Eigen::Matrix4d::Identity();
  Pose6 pose = Pose6::Zero();        ///< the same as [x y z roll pitch yaw]
  bool converged = false;            ///< true only when the convergence rule stopped it
  StopReason reason = StopReason::MaxIterations;  ///< why it stopped
  int iterations = 0;                ///< Newton iterations taken
  double score = 0.0;                ///< NDT score at the final pose (eq. 6.10, maximised)
  double tp = 0.0;                   ///< transform probability: score / source points
  /// Nearest-voxel transformation likelihood: mean over source points with a neighbour of
  /// the best per-pair score term (Autoware's NVTL).
  double nvtl = 0.0;
  Eigen::Matrix<double, 6, 6> hessian = Eigen::Matrix<double, 6, 6>::Zero();  ///< at the final pose
  std::size_t correspondences = 0;   ///< point-voxel pairs at the final pose
  std::size_t matched_points = 0;    ///< source points with at least one voxel at the final pose
  std::size_t source_points = 0;     ///< points in the source cloud
  std::size_t target_voxels = 0;     ///< usable voxels in the target map
  /// Autoware's oscillation count: the longest run of consecutive steps whose translation
  /// reverses direction (cosine < -0.9) over the pose sequence guess, iteration 1, ...
  int oscillation_count = 0;
  /// Which estimate filled `covariance` and `covariance_xy` (AlignSettings::pose_covariance;
  /// see ndtcu/pose_covariance.hpp); None: both are zero.
  PoseCovariance covariance_mode = PoseCovariance::None;
  /// True when the estimate could be made: false for None, and for Laplace when -H is not
  /// positive definite (both matrices are then zero: never pass a zero covariance to a filter).
  bool covariance_valid = false;
  /// Pose covariance in [x y z roll pitch yaw] order (m, rad; world frame): Laplace (-H)^-1;
  /// MultiNdt the spread of its seven end poses in all six entries; MultiNdtScore only the
  /// x-y block (it varies x and y alone), zero elsewhere.
  Eigen::Matrix<double, 6, 6> covariance = Eigen::Matrix<double, 6, 6>::Zero();
  /// The x-y covariance (m^2, world frame) as Autoware's estimator computes it before its
  /// scale factor and diagonal floor: -(H_xy)^-1 for Laplace (which is not the x-y block of
  /// (-H)^-1), the x-y block of `covariance` for the two multi-NDT modes.
  Eigen::Matrix2d covariance_xy = Eigen::Matrix2d::Zero();
  /// How well the scan constrains each direction of `pose`: the eigen-structure of
  /// `hessian`, rotations scaled by the scan's RMS range (see ndtcu/localizability.hpp).
  /// Filled by every alignment and by evaluate(); left invalid by evaluate_batch() (a
  /// screen of 10^5 poses) and by batches run with BatchOptions::localizability false.
  Localizability localizability;
  std::vector<IterationTrace> trace;  ///< one entry per iteration
  AlignTimings timings;               ///< where the time went
  Backend backend = Backend::Cpu;     ///< which backend ran: Cpu or Cuda (JSON and Python: "cpu", "cuda")
};

/// How well a scan fits at one fixed pose, and nothing else (Aligner::score_batch): the
/// AlignResult fields of the same names, with the bits evaluate() gives them there. A
/// screen of 10^4-10^5 poses ranks by these; a whole AlignResult per pose (1.4 KB, with
/// its transform and Hessian) cost such a screen more than the GPU's evaluation did.
struct PoseScore {
  double score = 0.0;               ///< NDT score (eq. 6.10)
  double nvtl = 0.0;                ///< NVTL (0 when no point has a voxel)
  std::size_t correspondences = 0;  ///< point-voxel pairs
  std::size_t matched_points = 0;   ///< source points with at least one voxel
};

}  // namespace ndtcu
