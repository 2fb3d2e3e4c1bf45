#pragma once
/// \file
/// The NDT target: one normal distribution (mean, inverse covariance) per occupied voxel,
/// built from a point cloud by pcl::VoxelGridCovariance's rules, stored as structure of
/// arrays (ready for a device upload) with a hash from lattice cell to voxel.
///
/// Coordinates are relative to the map origin (PointCloud::origin, double): a UTM map keeps
/// millimetres because voxel means and the transformed source points are computed near
/// zero. The aligner expresses the source pose in the map's world frame and moves the
/// origin into it (t_relative = t_world - origin), see aligner.hpp.

#include <ndtcu/point_cloud.hpp>
#include <ndtcu/settings.hpp>

#include <Eigen/Core>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ndtcu {

namespace detail {
struct VoxelMapAccess;
}  // namespace detail

/// How a VoxelMap is built.
struct VoxelMapOptions {
  double resolution = 2.0;  ///< voxel edge (m); used as float, as PCL's leaf size
  CovarianceMode covariance = CovarianceMode::Autoware;  ///< covariance convention
  int min_points = 6;        ///< fewer points: voxel not used (PCL and Autoware: 6; at least 3)
  double eigenvalue_ratio = 0.01;  ///< eigenvalues below ratio * largest are raised to it (eq. 6.11)
  int threads = 0;           ///< build threads, at most kMaxThreads; 0 = hardware concurrency
  /// Where the cells are built: Cpu (the reference), Cuda (keys, a radix sort, per-voxel
  /// sums and statistics on the GPU; CudaError without a CUDA build or device) or Auto
  /// (CUDA when present). Both give the same voxels, in the same order, with the same bits:
  /// a cell's points are summed in input order on both, by the same unfused arithmetic
  /// (kernels/voxel_statistics.hpp).
  Backend backend = Backend::Cpu;
  /// The CUDA device of a GPU build (ExecutionOptions::device); -1 = the current one.
  int device = -1;
};

/// Counts from a build, for logs and tests.
struct VoxelMapStats {
  std::size_t points = 0;           ///< points binned
  std::size_t occupied_cells = 0;   ///< cells with at least one point
  std::size_t sparse_cells = 0;     ///< cells with fewer than min_points points
  std::size_t singular_cells = 0;   ///< cells dropped for a degenerate or non-invertible covariance
  double build_ms = 0.0;            ///< wall time of the build
};

/// The voxelized target. Voxel i is ordered by lattice cell (z, then y, then x ascending),
/// which is the order of PCL's centroid cloud (its linear index runs x fastest).
class VoxelMap {
 public:
  /// An empty map (no voxels).
  VoxelMap() = default;

  /// Builds the map of `cloud` (coordinates relative to cloud.origin; a PointCloud, or a
  /// view of points elsewhere, read where they lie). Cells are
  /// floor(p * (1/r)) with the inverse in float; each cell with at least min_points points
  /// gets mean mu = sum x / n (double), covariance by `options.covariance`, eigenvalues
  /// below eigenvalue_ratio * lambda_max raised to it, and is dropped when its covariance
  /// has a negative or zero eigenvalue or its inverse is not finite. Throws Error for bad
  /// options or a cloud wider than 2^20 cells from its origin along an axis or a build
  /// thread that cannot be started, std::bad_alloc when memory runs out (in any of its
  /// threads); a build that throws leaves nothing allocated.
  static VoxelMap build(PointCloudView cloud, const VoxelMapOptions& options);

  /// Number of usable voxels.
  std::size_t size() const noexcept { return mean_[0].size(); }
  /// True when no voxel is usable.
  bool empty() const noexcept { return size() == 0; }
  /// The options the map was built with.
  const VoxelMapOptions& options() const noexcept { return options_; }
  /// Voxel edge as used (float(resolution) widened back to double).
  double resolution() const noexcept { return resolution_; }
  /// 1 / resolution in float (PCL's inverse leaf size).
  float inverse_resolution() const noexcept { return inverse_resolution_; }
  /// Squared radius-search radius in float: float(r * r), as PCL hands it to FLANN.
  float radius_squared() const noexcept { return radius_squared_; }
  /// World position of map-relative coordinate zero.
  const Eigen::Vector3d& origin() const noexcept { return origin_; }
  /// Counts from the build.
  const VoxelMapStats& stats() const noexcept { return stats_; }
  /// True when the cells were built on the GPU (VoxelMapOptions::backend).
  bool built_on_gpu() const noexcept { return built_on_gpu_; }

  /// Voxel means along `axis` (0 x, 1 y, 2 z), map-relative metres.
  const std::vector<double>& mean(int axis) const { return mean_[static_cast<std::size_t>(axis)]; }
  /// Inverse covariance entry `e` of every voxel: 0 xx, 1 xy, 2 xz, 3 yy, 4 yz, 5 zz.
  const std::vector<double>& inverse_covariance(int e) const { return icov_[static_cast<std::size_t>(e)]; }
  /// Covariance entry `e` (same order), after eigenvalue inflation.
  const std::vector<double>& covariance(int e) const { return cov_[static_cast<std::size_t>(e)]; }
  /// Float centroids along `axis`: float sum / float n, the points the radius search
  /// measures to (PCL's kd-tree holds these, not the double means).
  const std::vector<float>& centroid(int axis) const { return centroid_[static_cast<std::size_t>(axis)]; }
  /// Lattice cell of every voxel.
  const std::vector<std::array<std::int32_t, 3>>& cells() const noexcept { return cells_; }
  /// Points in every voxel.
  const std::vector<std::uint32_t>& point_counts() const noexcept { return counts_; }

  /// Index of the voxel at lattice cell (i, j, k), or -1.
  std::int32_t find(std::int64_t i, std::int64_t j, std::int64_t k) const;
  /// Mean of voxel `v` in world coordinates.
  Eigen::Vector3d mean_world(std::size_t v) const;
  /// Inverse covariance of voxel `v` as a matrix.
  Eigen::Matrix3d inverse_covariance_matrix(std::size_t v) const;
  /// Covariance of voxel `v` as a matrix.
  Eigen::Matrix3d covariance_matrix(std::size_t v) const;

  /// Bytes of host memory the map's arrays hold.
  std::size_t memory_bytes() const noexcept;

 private:
  friend struct detail::VoxelMapAccess;
  VoxelMapOptions options_;
  double resolution_ = 0.0;
  float inverse_resolution_ = 0.f;
  float radius_squared_ = 0.f;
  Eigen::Vector3d origin_ = Eigen::Vector3d::Zero();
  VoxelMapStats stats_;
  bool built_on_gpu_ = false;
  std::array<std::vector<double>, 3> mean_;
  std::array<std::vector<double>, 6> icov_;
  std::array<std::vector<double>, 6> cov_;
  std::array<std::vector<float>, 3> centroid_;
  std::vector<std::array<std::int32_t, 3>> cells_;
  std::vector<std::uint32_t> counts_;
  std::vector<std::uint64_t> table_keys_;
  std::vector<std::int32_t> table_values_;
};

}  // namespace ndtcu
