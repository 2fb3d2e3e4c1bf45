#pragma once
// The voxel filter's lattice (host only): which cells the bounds of a cloud span at a
// leaf, and which index they get. voxel_downsample and the CUDA scan filter both take it
// from here, so they agree on the cells, their order and the errors; the per-point index
// arithmetic they share lives in kernels/voxel_grid_math.hpp.
#include "../../kernels/voxel_grid_math.hpp"

#include <ndtcu/point_cloud.hpp>

namespace ndtcu::detail {

/// voxel_downsample and crop_range of points where they lie, with `intensity` and `time`
/// (one per point each) or none (null): the one implementation behind the PointCloud and
/// view overloads and the localizer's CPU preprocessing.
PointCloud downsample_points(PointCloudView cloud, const float* intensity, const float* time, double leaf);
PointCloud crop_points(PointCloudView cloud, const float* intensity, const float* time, double min_range,
                       double max_range);

/// Throws Error unless `leaf` is positive and finite (voxel_downsample's rule).
void check_voxel_leaf(double leaf);
/// Throws Error unless 0 <= min_range <= max_range (crop_range's rule).
void check_crop_range(double min_range, double max_range);

/// pcl::VoxelGrid's lattice over a cloud's float bounds at a leaf.
struct VoxelLattice {
  /// True: PCL's own 32-bit index (`pcl`). False: the lattice has more than 2^31 cells
  /// (PCL returns the cloud unfiltered there) and `wide` indexes it in 64 bits.
  bool pcl_index = true;
  math::PclCellIndex pcl{};    ///< valid when pcl_index
  math::WideCellIndex wide{};  ///< valid when !pcl_index
  /// Every index of a point within the bounds is below 2^key_bits (1 to 64): the bits a
  /// radix sort of the indices has to look at.
  int key_bits = 1;
};

/// The lattice voxel_downsample builds over the bounds [lo, hi] (the cloud's smallest and
/// largest relative coordinates) at `leaf` (checked with check_voxel_leaf). Throws Error
/// when the leaf is too small for the extent: a cell coordinate beyond 1e18, or more
/// cells than a 64-bit index holds.
VoxelLattice voxel_lattice(const float lo[3], const float hi[3], double leaf);

}  // namespace ndtcu::detail
