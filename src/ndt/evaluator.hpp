#pragma once
// What the optimizer needs from a backend: score, gradient and (optionally) Hessian of the
// NDT score at a pose, in map-relative coordinates. The CPU backend implements it here;
// the CUDA backend will implement the same interface.
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/voxel_map.hpp>

#include "../map/dense_voxel_index.hpp"
#include "ndt_point.hpp"

#include <Eigen/Core>

#include <cstddef>
#include <vector>

namespace ndtcu::detail {

class ThreadPool;

/// One evaluation of the score function at a pose.
struct Evaluation {
  double score = 0.0;
  Eigen::Matrix<double, 6, 1> gradient = Eigen::Matrix<double, 6, 1>::Zero();
  Eigen::Matrix<double, 6, 6> hessian = Eigen::Matrix<double, 6, 6>::Zero();  // zero unless asked for
  double nvtl_sum = 0.0;
  std::size_t correspondences = 0;
  std::size_t matched_points = 0;
};

/// Converts a reduced DerivativeSums into an Evaluation (Hessian mirrored from its upper triangle).
Evaluation to_evaluation(const math::DerivativeSums& sums);

/// The per-evaluation constants of pose `pose` (internal, map-relative): math::pose_frame
/// (PCL's float transform, the sin/cos) and the angular terms, as every backend takes them.
math::PoseTerms<double> pose_terms(const Pose6& pose, const math::GaussConstants& gauss);

/// The math header's view of `map` in host memory, for the CPU evaluator: lookups through
/// `dense` when given (an index of `map`), through the map's hash otherwise.
math::VoxelGridView host_view(const VoxelMap& map, const DenseVoxelIndex* dense = nullptr);

/// Search enum of the math header for a SearchMethod.
math::Search to_math(SearchMethod m);

/// Score function evaluations of one backend.
class DerivativeEvaluator {
 public:
  virtual ~DerivativeEvaluator() = default;
  /// The reduced derivative sums at `pose` (map-relative), the Hessian when `with_hessian`.
  virtual math::DerivativeSums evaluate_sums(const Pose6& pose, bool with_hessian) = 0;
  /// Score and gradient at `pose` (map-relative), and the Hessian when `with_hessian`.
  Evaluation evaluate(const Pose6& pose, bool with_hessian) { return to_evaluation(evaluate_sums(pose, with_hessian)); }
};

/// The CPU backend: points in fixed chunks of kChunkPoints, each chunk summed in point
/// order into its own DerivativeSums, chunks reduced in chunk order, so the bits do not
/// depend on the thread count.
class CpuEvaluator final : public DerivativeEvaluator {
 public:
  /// Points per chunk: fixed, never derived from the thread count.
  static constexpr std::size_t kChunkPoints = 256;

  /// `points` are source points (relative to the source origin; the view's origin is not
  /// used), read where they lie at every evaluation; they, `map`, `pool` and `dense` (a
  /// dense index of `map`, or null for the hash) must outlive the evaluator. Either lookup
  /// finds the same voxels, so the bits do not depend on it. A null `pool` evaluates on the
  /// calling thread (a batch's worker), with the same bits.
  CpuEvaluator(const VoxelMap& map, PointCloudView points, SearchMethod search, double outlier_ratio,
               ThreadPool* pool, const DenseVoxelIndex* dense = nullptr);
  math::DerivativeSums evaluate_sums(const Pose6& pose, bool with_hessian) override;
  /// The points' Hessian (their sum, no prior) and the scatter of their gradients, sum_i
  /// g_i g_i' (g_i a point's gradient: its pairs' terms summed), at `pose`, on the calling
  /// thread: the two halves of the sandwich covariance (PoseCovariance::Sandwich).
  void gradient_scatter(const Pose6& pose, Eigen::Matrix<double, 6, 6>& hessian, Eigen::Matrix<double, 6, 6>& scatter);

 private:
  PointCloudView points_;
  math::VoxelGridView view_{};
  math::Search search_;
  math::GaussConstants gauss_{};
  ThreadPool* pool_;
  std::vector<math::DerivativeSums> chunk_sums_;
};

}  // namespace ndtcu::detail
