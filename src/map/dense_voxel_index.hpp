#pragma once
// The dense voxel index (kernels/ndt_neighbours.hpp, VoxelGridView::dense): the voxel index of
// every lattice cell in the box the map's voxels occupy, so that a lookup is one load
// instead of a hash probe sequence. The CPU backend keeps one per map when it fits its
// budget; the CUDA backend builds the same index to upload it.
#include <ndtcu/voxel_map.hpp>

#include "ndt_neighbours.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ndtcu::detail {

/// The smallest lattice box that holds every voxel of a map.
struct LatticeBox {
  std::int64_t min[3] = {0, 0, 0};   ///< lowest cell along x, y, z
  std::int64_t dims[3] = {0, 0, 0};  ///< cells along x, y, z (all 0 for an empty map)
  /// Cells in the box, in double: the box of a sparse map spread wide can pass 2^64.
  double cells() const { return double(dims[0]) * double(dims[1]) * double(dims[2]); }
  /// Bytes of a dense index over the box.
  double bytes() const { return cells() * double(sizeof(std::int32_t)); }
};

/// The box of `map`'s voxels.
LatticeBox occupied_box(const VoxelMap& map);

/// A dense index over a map's occupied box.
struct DenseVoxelIndex {
  LatticeBox box;                   ///< the cells indexed
  std::vector<std::int32_t> cells;  ///< voxel index or -1 per cell, x fastest, then y, then z

  /// The index of `map` over `box` = occupied_box(map), whose cells the caller has
  /// checked against its memory budget.
  static DenseVoxelIndex build(const VoxelMap& map, const LatticeBox& box);
  /// True for an index with no cells (an empty map).
  bool empty() const noexcept { return cells.empty(); }
  /// Makes `g` look voxels up through `cells` (which must outlive g's use).
  void attach(math::VoxelGridView& g) const { attach(g, cells.data(), box); }
  /// Makes `g` look voxels up through a dense index `cells` over `box` (host or device memory).
  static void attach(math::VoxelGridView& g, const std::int32_t* cells, const LatticeBox& box);
};

/// Bytes of host memory the CPU backend spends at most on a map's dense index; a map whose
/// occupied box needs more is looked up through its hash. 64 MiB is 16.7 million cells: the
/// box of a 1.6 km x 1.6 km x 50 m map at 2 m. The index is built once per map
/// (set_target), never per alignment.
constexpr std::size_t kCpuDenseIndexBudget = std::size_t(64) << 20;

}  // namespace ndtcu::detail
