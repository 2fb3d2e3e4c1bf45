#pragma once
// The kernels of the voxel map's cells on the GPU (src/cuda/cuda_voxel_build.cu launches
// them): keys, per-cell statistics by the shared voxel_statistics.hpp, the compaction of
// the usable cells, and every occupied cell's sums and statistics.
#include "ndt_neighbours.hpp"
#include "voxel_statistics.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ndtcu::detail {
// Internal to the translation unit that launches them (no separable compilation).
namespace {

constexpr int kThreads = 256;

// Cell key and point index of every point; the first point out of the key's range is
// recorded in *bad (the smallest index, as the CPU build names it).
__global__ void key_kernel(const float3* points, std::size_t n, float inv_res, std::uint64_t* keys,
                           std::uint32_t* index, unsigned long long* bad) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float3 p = points[i];
  const std::int64_t a = math::lattice_index(p.x, inv_res), b = math::lattice_index(p.y, inv_res),
                     k = math::lattice_index(p.z, inv_res);
  if (!math::key_in_range(a, b, k)) {
    atomicMin(bad, static_cast<unsigned long long>(i));
    keys[i] = 0;
  } else {
    keys[i] = math::pack_key(static_cast<std::int32_t>(a), static_cast<std::int32_t>(b), static_cast<std::int32_t>(k));
  }
  index[i] = static_cast<std::uint32_t>(i);
}

// Status of a run (one byte each, read back): 0 sparse, 1 singular, 2 usable.
// Run r: its points (sorted by key, then index) summed in input order, and its statistics.
__global__ void stats_kernel(const float3* points, const std::uint32_t* index, const std::uint32_t* offsets,
                             const std::uint32_t* counts, const int* runs, int min_points, bool autoware, bool pcl,
                             double eigenvalue_ratio, VoxelResult* results, std::uint32_t* usable, std::uint8_t* status) {
  const int r = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= *runs) return;
  const std::uint32_t count = counts[r];
  if (count < static_cast<std::uint32_t>(min_points)) {
    status[r] = 0;
    usable[r] = 0;
    return;
  }
  math::VoxelSums s;
  math::start_sums(s, autoware);
  const std::uint32_t begin = offsets[r];
  for (std::uint32_t m = 0; m < count; ++m) {
    const float3 p = points[index[begin + m]];
    math::add_point(s, p.x, p.y, p.z);
  }
  math::VoxelStatistics st;
  math::voxel_statistics(s, pcl, eigenvalue_ratio, st);
  status[r] = st.usable ? 2 : 1;
  usable[r] = st.usable ? 1 : 0;
  if (!st.usable) return;
  to_voxel_result(st, results[r]);
}

// The usable runs, in run order, at their exclusive-scan positions.
__global__ void compact_kernel(const int* runs, const std::uint32_t* usable, const std::uint32_t* position,
                               const std::uint64_t* run_keys, const std::uint32_t* counts, const VoxelResult* results,
                               std::uint64_t* keys_out, std::uint32_t* counts_out, VoxelResult* results_out) {
  const int r = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= *runs || !usable[r]) return;
  const std::uint32_t v = position[r];
  keys_out[v] = run_keys[r];
  counts_out[v] = counts[r];
  results_out[v] = results[r];
}

// Every run's sums (its points in input order) and, from min_points on, its statistics;
// `stats` is zeroed before, so a run below min_points reads as the CPU's value-initialized
// statistics with usable false.
__global__ void occupied_kernel(const float3* points, const std::uint32_t* index, const std::uint32_t* offsets,
                                const std::uint32_t* counts, const int* runs, int min_points, bool autoware, bool pcl,
                                double eigenvalue_ratio, math::VoxelSums* sums, math::VoxelStatistics* stats) {
  const int r = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= *runs) return;
  math::VoxelSums s;
  math::start_sums(s, autoware);
  const std::uint32_t begin = offsets[r], count = counts[r];
  for (std::uint32_t m = 0; m < count; ++m) {
    const float3 p = points[index[begin + m]];
    math::add_point(s, p.x, p.y, p.z);
  }
  sums[r] = s;
  if (count < static_cast<std::uint32_t>(min_points)) return;
  math::VoxelStatistics st{};
  math::voxel_statistics(s, pcl, eigenvalue_ratio, st);
  stats[r] = st;
}

}  // namespace
}  // namespace ndtcu::detail
