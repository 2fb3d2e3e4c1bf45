#pragma once
// The voxels of a GPU build (VoxelResult records, as the build computes them) into a
// device map's structure of arrays (src/cuda/device_voxel_map.cu launches it).
#include "voxel_statistics.hpp"

#include <cuda_runtime.h>

#include <cstddef>

namespace ndtcu::detail {
// Internal to the translation unit that launches it (no separable compilation).
namespace {

// Where a device map's voxel arrays are written: VoxelGridView's pointers, writable.
struct VoxelArrays {
  double* mean[3];
  double* icov[6];
  float* centroid[3];
};

// The statistics of voxels built on the device (AoS, as the build computes them) into the
// map's structure of arrays.
__global__ void unpack_voxels_kernel(const VoxelResult* results, std::size_t n, VoxelArrays out) {
  const std::size_t v = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= n) return;
  const VoxelResult& r = results[v];
  for (int a = 0; a < 3; ++a) {
    out.mean[a][v] = r.mean[a];
    out.centroid[a][v] = r.centroid[a];
  }
  for (int e = 0; e < 6; ++e) out.icov[e][v] = r.icov[e];
}

}  // namespace
}  // namespace ndtcu::detail
