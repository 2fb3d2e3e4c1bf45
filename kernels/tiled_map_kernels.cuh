#pragma once
// The kernels of the tiled map's device twin (src/cuda/device_tiled_map.cu launches them):
// slot keys set, voxels written into their slots (sent up, or staged straight from a
// voxelize), and the occupied box of the used slots. The lookup is rebuilt by
// voxel_lookup_build.cuh's kernels.
#include "ndt_neighbours.hpp"
#include "voxel_statistics.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ndtcu::detail {
// Internal to the translation unit that launches them (no separable compilation).
namespace {

// A voxel sent up: where it goes and what it holds.
struct SlotWrite {
  std::uint64_t key;
  std::uint32_t slot;
  std::uint32_t pad;
  VoxelResult stats;
};

// Writable pointers into SlotArrays.
struct SlotPointers {
  double* mean[3];
  double* icov[6];
  float* centroid[3];
  std::uint64_t* keys;
};

// A slot's key set: a freed slot's becomes kEmptyKey (no later lookup build finds it), an
// adopted staged slot's its cell.
struct SlotKey {
  std::uint64_t key;
  std::uint32_t slot;
  std::uint32_t pad;
};

__global__ void set_keys_kernel(const SlotKey* keys, std::size_t n, std::uint64_t* out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[keys[i].slot] = keys[i].key;
}

// Slot s's statistics, in the structure of arrays the kernels read.
__device__ void write_slot(const VoxelResult& r, std::uint32_t s, const SlotPointers& out) {
  for (int a = 0; a < 3; ++a) {
    out.mean[a][s] = r.mean[a];
    out.centroid[a][s] = r.centroid[a];
  }
  for (int e = 0; e < 6; ++e) out.icov[e][s] = r.icov[e];
}

// The written voxels into their slots, with their keys.
__global__ void write_slots_kernel(const SlotWrite* writes, std::size_t n, SlotPointers out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  write_slot(writes[i].stats, writes[i].slot, out);
  out.keys[writes[i].slot] = writes[i].key;
}

// A staged cell: which of a voxelize's cells goes to which slot.
struct StagePair {
  std::uint32_t cell;
  std::uint32_t slot;
};

// Staged cells' statistics into their slots, straight from the voxelizer's memory; their
// keys stay kEmptyKey until a publish adopts them.
__global__ void stage_slots_kernel(const math::VoxelStatistics* stats, const StagePair* pairs, std::size_t n,
                                   SlotPointers out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  VoxelResult r;
  to_voxel_result(stats[pairs[i].cell], r);
  write_slot(r, pairs[i].slot, out);
}

// The occupied lattice box of the used slots: per axis the lowest and highest cell
// (box[0..2] min, box[3..5] max; preset to INT_MAX and INT_MIN).
__global__ void box_kernel(const std::uint64_t* keys, std::size_t n, int* box) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint64_t key = keys[i];
  if (key == math::kEmptyKey) return;
  for (int a = 0; a < 3; ++a) {
    const int c = math::unpack_key(key, a);
    atomicMin(box + a, c);
    atomicMax(box + 3 + a, c);
  }
}

}  // namespace
}  // namespace ndtcu::detail
