#pragma once
// The voxel map's cells built on the GPU (cuda_voxel_build.cu): the same cells, in the
// same order, with the same bits as the CPU build (src/map/voxel_map.cpp), which both hand to
// detail::VoxelCells for the map's assembly.
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/voxel_map.hpp>

#include "voxel_statistics.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ndtcu::detail {

/// A build's usable voxels in cell order (packed lattice keys ascending) and its counts.
struct VoxelCells {
  std::vector<std::uint64_t> keys;
  std::vector<std::uint32_t> counts;
  std::array<std::vector<double>, 3> mean;
  std::array<std::vector<double>, 6> icov;  ///< xx xy xz yy yz zz
  std::array<std::vector<double>, 6> cov;
  std::array<std::vector<float>, 3> centroid;
  std::size_t occupied_cells = 0, sparse_cells = 0, singular_cells = 0;
};

/// Sets every voxel array of `out` (keys to covariances) to `voxels` entries; the cell
/// counts stay (src/map/voxel_map.cpp).
void resize_voxels(VoxelCells& out, std::size_t voxels);

/// The usable voxels of a GPU build where they lie, in the voxelizer's device memory:
/// what a CUDA backend takes its map from without sending it back up (valid until the
/// voxelizer's next call or its destruction; the work that wrote them has finished).
struct DeviceVoxelCells {
  const std::uint64_t* keys = nullptr;  ///< packed lattice keys, ascending (cell order)
  const VoxelResult* results = nullptr;  ///< the voxels' statistics, in the same order
  std::size_t voxels = 0;
};

/// Every occupied cell of a cloud in cell order (sparse and singular ones too): its sums
/// (the points in input order) and, where it has min_points points, its statistics
/// (`usable` false otherwise; every other field of a cell below min_points is zero). What
/// a tiled map keeps of each tile, so that the cells two tiles share can be joined.
struct OccupiedCells {
  std::vector<std::uint64_t> keys;
  std::vector<math::VoxelSums> sums;
  std::vector<math::VoxelStatistics> stats;
};

/// Every occupied cell of a GPU voxelize where it lies in the voxelizer's device memory
/// (OccupiedCells' keys and statistics, the same order): what a tiled map's device twin
/// copies a tile's voxels from (valid until the voxelizer's next call or its destruction;
/// the work that wrote them has finished).
struct DeviceOccupiedCells {
  const std::uint64_t* keys = nullptr;
  const math::VoxelStatistics* stats = nullptr;
  std::size_t cells = 0;
};

/// The GPU voxelizer: cell keys, a stable radix sort of (key, point index), the runs of
/// equal keys, each run's points summed in input order and its statistics
/// (kernels/voxel_statistics.hpp), on the current CUDA device and a non-blocking stream of
/// its own, so that it never waits for (or holds up) alignments on other streams. With
/// `pinned_upload` the points go up from a page-locked copy (one short DMA instead of a
/// pageable copy, which holds the copy engine longer while alignments run; allocating it
/// costs more than it saves for a single build). Its device and page-locked buffers grow
/// only: voxelizing tile after tile allocates (and frees, which synchronizes the device)
/// only when a tile is larger than every one before it. Throws
/// CudaError when CUDA is not compiled in or no device is usable. One caller at a time.
class CudaVoxelizer {
 public:
  explicit CudaVoxelizer(bool pinned_upload);
  ~CudaVoxelizer();
  CudaVoxelizer(const CudaVoxelizer&) = delete;
  CudaVoxelizer& operator=(const CudaVoxelizer&) = delete;

  /// The usable voxels of `cloud` at `inverse_resolution` by `options`, compacted in cell
  /// order (VoxelMap::build's cells). Throws Error for a point more than 2^20 cells from
  /// the origin (naming it), CudaError for a device failure; the voxelizer stays usable.
  /// With `on_device`, also where the voxels lie on the device (DeviceVoxelCells).
  VoxelCells usable_cells(PointCloudView cloud, float inverse_resolution, const VoxelMapOptions& options,
                          DeviceVoxelCells* on_device = nullptr);
  /// Every occupied cell of `cloud` (OccupiedCells), with the same bits as the CPU's
  /// cell_sums and voxel_statistics. Throws as usable_cells does.
  /// With `on_device`, also where the cells lie on the device (DeviceOccupiedCells).
  OccupiedCells occupied_cells(PointCloudView cloud, float inverse_resolution, const VoxelMapOptions& options,
                               DeviceOccupiedCells* on_device = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The usable cells of `cloud` by a voxelizer made for this one build.
VoxelCells cuda_voxel_cells(PointCloudView cloud, float inverse_resolution, const VoxelMapOptions& options);

}  // namespace ndtcu::detail
