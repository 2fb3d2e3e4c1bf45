#pragma once
// The map's side of the global pose search (include/ndtcu/global_search.hpp): a pyramid of
// sliding-window maxima of the map's NDT likelihood (kernels/score_pyramid.hpp says what a
// level holds and why a node's sum bounds its leaves), and a pyramid of where a sensor can
// stand (which heights above a mapped floor a window holds), built once per map.
#include <ndtcu/voxel_map.hpp>

#include "pyramid_bound.hpp"  // kernels/: PyramidView, SearchNode, node_bound

#include <Eigen/Core>

#include <array>
#include <cstdint>
#include <vector>

namespace ndtcu::detail {

class ThreadPool;

/// Heights above a floor the standing pyramid tells apart: 0 .. kFloorHeights - 1 cells.
constexpr int kFloorHeights = 8;

struct ScorePyramid {
  double cell = 1.0;                                 ///< leaf step and level-0 cell (m)
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();  ///< map-relative corner of cell (0, 0, 0)
  int nx = 0, ny = 0, nz = 0;
  int level_count = 0;  ///< levels 0 .. level_count - 1
  /// The likelihood pyramid, level after level (nx * ny * nz bytes each, x fastest).
  std::vector<std::uint8_t> levels;
  /// The standing pyramid: bit h of level k at cell a is set when some cell of the window
  /// a .. a + 2^k - 1 lies h cells above the top of a mapped surface in its column or in
  /// a column beside it (x-y within one cell; any such top within kFloorHeights - 1 cells
  /// below it), h < kFloorHeights.
  std::vector<std::uint8_t> standing;
  /// Level-0 cells per standing value (how many leaves a set of heights admits).
  std::array<std::size_t, 256> standing_histogram{};

  std::size_t level_stride() const { return static_cast<std::size_t>(nx) * static_cast<std::size_t>(ny) * static_cast<std::size_t>(nz); }
  math::PyramidView view() const {
    return math::PyramidView{levels.data(), nx, ny, nz, level_count, level_stride()};
  }
  math::PyramidView standing_view() const {
    return math::PyramidView{standing.data(), nx, ny, nz, level_count, level_stride()};
  }
  std::size_t memory_bytes() const { return levels.size() + standing.size(); }
};

/// Cells of one level of the grid build_score_pyramid() makes for `map` at `cell` metres
/// (its voxels' means' extent with the margin), as a double: a large map's count need not
/// fit the grid's limits.
double score_pyramid_cells(const VoxelMap& map, double cell);

/// Builds the pyramids of `map` with leaf cells of `cell` metres: level 0 holds, per cell,
/// 255 times the largest over the map's voxels of exp(-q' (S + (cell/2)^2 I)^-1 q / 2), q
/// from the voxel's mean to the cell's centre and S its covariance (the voxel's Gaussian
/// widened by the spread of a point within a cell, so a leaf half a cell from the truth
/// still scores its points); `levels` levels in all (0: as many as leave at most 64 windows
/// of the map's x-y extent at the top, at most 9). The grid covers the voxels' means with
/// a margin of 2 cells. The standing pyramid only `with_standing`. Throws Error when the
/// grid would exceed `max_cells` cells per level.
ScorePyramid build_score_pyramid(const VoxelMap& map, double cell, int levels, std::size_t max_cells,
                                 ThreadPool* pool, bool with_standing = true);

}  // namespace ndtcu::detail
