#pragma once
/// \file
/// The per-point arithmetic of the range crop and the voxel filter, written once for the
/// CPU filters (src/filters/filters.cpp) and the CUDA scan filter (src/cuda/cuda_filter.cu).
///
/// Both sides take the same text, with nvcc's contraction into FMA ruled out by the
/// explicit _rn intrinsics (the host compiler builds ndtcu with -ffp-contract=off), so a
/// point lands in the same cell and passes the same crop test on the CPU and the GPU, bit
/// for bit. The lattice itself (which cells exist, which index width) is computed on the
/// host only, by detail::voxel_lattice (src/filters/voxel_lattice.hpp).

#include "ndt_hd.hpp"  // NDTCU_HD and the unfused *_rn arithmetic

#include <math.h>

#include <cstdint>

namespace ndtcu::math {

/// crop_range's rule for one point: its squared distance from the frame origin, in world
/// coordinates (origin + point, double), lies in [min2, max2]. The sum runs
/// (x^2 + y^2) + z^2, the order of Eigen's squaredNorm. A NaN coordinate fails both
/// comparisons and is dropped; an infinite one passes only an infinite max_range.
NDTCU_HD inline bool within_range(double ox, double oy, double oz, float x, float y, float z, double min2,
                                  double max2) {
  const double wx = add_rn(ox, static_cast<double>(x));
  const double wy = add_rn(oy, static_cast<double>(y));
  const double wz = add_rn(oz, static_cast<double>(z));
  const double r2 = add_rn(add_rn(mul_rn(wx, wx), mul_rn(wy, wy)), mul_rn(wz, wz));
  return r2 >= min2 && r2 <= max2;
}

/// pcl::VoxelGrid's (PCL 1.13) 32-bit cell index: ijk = (int) (floor(p * inv) -
/// (float) min_cell) in float, index = i + j * mul1 + k * mul2 (x fastest).
struct PclCellIndex {
  float inverse_leaf;     ///< 1 / leaf, rounded to float as PCL does
  float min_cell[3];      ///< the lattice's first cell per axis, as float (exact)
  std::uint32_t mul1;     ///< cells along x
  std::uint32_t mul2;     ///< cells in an xy layer
};

/// The cell index of (x, y, z) on PCL's 32-bit lattice, for a point within the bounds
/// the lattice was built from. Each coordinate difference is in [0, 2^31] (the float
/// rounding of a difference below 2^31), so it converts to unsigned without overflow: the
/// value PCL's int conversion gives on x86, including its one out-of-range case (2^31,
/// INT_MIN there, which the device would saturate instead). The sum is taken modulo 2^32,
/// as PCL's int arithmetic wraps.
NDTCU_HD inline std::uint32_t cell_index(const PclCellIndex& g, float x, float y, float z) {
  const auto i0 = static_cast<std::uint32_t>(sub_rn(floorf(mul_rn(x, g.inverse_leaf)), g.min_cell[0]));
  const auto i1 = static_cast<std::uint32_t>(sub_rn(floorf(mul_rn(y, g.inverse_leaf)), g.min_cell[1]));
  const auto i2 = static_cast<std::uint32_t>(sub_rn(floorf(mul_rn(z, g.inverse_leaf)), g.min_cell[2]));
  return i0 + i1 * g.mul1 + i2 * g.mul2;
}

/// The 64-bit lattice voxel_downsample uses where PCL's index would overflow: cell =
/// (int64) floor(p * inv) - min_cell, exactly, index = c0 + c1 * dims0 + c2 * dims01.
struct WideCellIndex {
  float inverse_leaf;        ///< 1 / leaf, rounded to float
  std::int64_t min_cell[3];  ///< the lattice's first cell per axis
  std::uint64_t dims0;       ///< cells along x
  std::uint64_t dims01;      ///< cells in an xy layer
};

/// The cell index of (x, y, z) on the 64-bit lattice (below the lattice's cell count for
/// a point inside the bounds it was built from).
NDTCU_HD inline std::uint64_t cell_index(const WideCellIndex& g, float x, float y, float z) {
  const std::int64_t c0 = static_cast<std::int64_t>(floorf(mul_rn(x, g.inverse_leaf))) - g.min_cell[0];
  const std::int64_t c1 = static_cast<std::int64_t>(floorf(mul_rn(y, g.inverse_leaf))) - g.min_cell[1];
  const std::int64_t c2 = static_cast<std::int64_t>(floorf(mul_rn(z, g.inverse_leaf))) - g.min_cell[2];
  return static_cast<std::uint64_t>(c0) + static_cast<std::uint64_t>(c1) * g.dims0 +
         static_cast<std::uint64_t>(c2) * g.dims01;
}

}  // namespace ndtcu::math
