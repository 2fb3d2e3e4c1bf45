#pragma once
// The CPU voxel build's steps, shared by VoxelMap::build and the tiled map (host only):
// points sorted into lattice cells, a cell's statistics appended to a build's output, and
// the assembly of a VoxelMap from its cells.
#include <ndtcu/error.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/voxel_map.hpp>

#include "cuda/cuda_voxel_build.hpp"
#include "thread_pool.hpp"
#include "voxel_statistics.hpp"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ndtcu::detail {

/// Throws Error for options VoxelMap::build refuses (resolution, min_points,
/// eigenvalue_ratio, threads), naming the value.
void check_voxel_map_options(const VoxelMapOptions& options);

/// True when a build by `options` runs on the GPU: resolve_backend(options.backend,
/// options.device) is Backend::Cuda (CudaError for Backend::Cuda without a usable device).
bool build_on_gpu(const VoxelMapOptions& options);

/// The lattice's inverse resolution: 1 / float(resolution) in float, as PCL's leaf size.
float inverse_resolution(double resolution);

/// The points of a cloud sorted into lattice cells.
struct SortedCells {
  /// (packed lattice key, point index), sorted: cells by (z, y, x), PCL's order, and within
  /// a cell the points in input order (PCL sums them in that order).
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keyed;
  /// Each occupied cell as [begin, end) into keyed, in cell order.
  std::vector<std::pair<std::size_t, std::size_t>> runs;
};

/// The error for point `i` of `cloud`, which has no cell on the lattice of `resolution`
/// (2^21 cells a side about the cloud's origin): a point that is not finite, a resolution
/// too fine for the cloud's extent, or points far from the cloud's origin.
Error lattice_error(PointCloudView cloud, std::size_t i, double resolution);

/// The cells of `cloud` at `inverse_resolution` (PCL's floor(p * inverse) in float). Throws
/// lattice_error() for the first point more than 2^20 cells from the cloud's origin.
SortedCells sort_into_cells(PointCloudView cloud, float inverse_resolution, double resolution, ThreadPool& pool);

/// The sums of cell `run` of `cells`, its points added in input order.
math::VoxelSums cell_sums(PointCloudView cloud, const SortedCells& cells, std::size_t run, bool autoware);

/// Appends a usable voxel (cell `key`, `count` points, statistics `s`) to `out`.
void append_voxel(VoxelCells& out, std::uint64_t key, std::uint32_t count, const math::VoxelStatistics& s);
/// Writes usable voxel `v` (cell `key`, `count` points, statistics `s`) of a sized `out`.
void set_voxel(VoxelCells& out, std::size_t v, std::uint64_t key, std::uint32_t count, const math::VoxelStatistics& s);

/// The map of `cells` (usable voxels in cell order): its lattice cells and hash table.
/// `points` is the number of points binned, `origin` the world position of its zero.
VoxelMap assemble_voxel_map(VoxelCells&& cells, const VoxelMapOptions& options, const Eigen::Vector3d& origin,
                            std::size_t points, bool built_on_gpu);
/// Records a build's wall time in the map's stats.
void set_build_ms(VoxelMap& map, double ms);

/// VoxelMap::build: on the CPU or the GPU by `options.backend`, or on `voxelizer` when
/// given (the GPU), which with `on_device` also says where the voxels lie on the device
/// (a CUDA backend's map is then taken from there, not sent back up).
VoxelMap build_voxel_map(PointCloudView cloud, const VoxelMapOptions& options, CudaVoxelizer* voxelizer,
                         DeviceVoxelCells* on_device);

}  // namespace ndtcu::detail
