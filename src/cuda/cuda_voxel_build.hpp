#pragma once
// The voxel map's cells built on the GPU (kernels/voxel_build.cu): the same cells, in the
// same order, with the same bits as the CPU build (src/voxel_map.cpp), which both hand to
// detail::VoxelCells for the map's assembly.
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/voxel_map.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
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

/// The cells of `cloud` at `inverse_resolution` by `options` on the current CUDA device:
/// cell keys, a stable radix sort of (key, point index), the runs of equal keys, each
/// run's points summed in input order and its statistics (kernels/voxel_statistics.hpp),
/// and the usable ones compacted in cell order. Throws Error for a point more than 2^20
/// cells from the origin (naming it), CudaError for a device failure or without CUDA.
VoxelCells cuda_voxel_cells(PointCloudView cloud, float inverse_resolution, const VoxelMapOptions& options);

}  // namespace ndtcu::detail
