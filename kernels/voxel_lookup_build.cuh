#pragma once
// The device lookups of a voxel map built on the device: the hash table (find_voxel's
// open addressing) and the dense index over the occupied box, each filled by one thread
// per voxel. Shared by the CUDA backend's maps taken from a GPU build
// (src/cuda/device_voxel_map.cu) and the tiled map's device twin
// (src/cuda/device_tiled_map.cu), whose voxel arrays have free slots (key kEmptyKey),
// skipped here.
#include "ndt_neighbours.hpp"

#include <cstddef>
#include <cstdint>

namespace ndtcu::detail {
// Internal to each translation unit that launches them (no separable compilation).
namespace {

// Voxel v's key into the hash table (slots preset to kEmptyKey): the probe sequence of
// find_voxel, each slot claimed by an atomic compare-and-swap, so the threads of a launch
// insert concurrently. The keys are distinct; which of two colliding keys takes the
// earlier slot can differ from the host's sequential insertion, never what a lookup finds.
__global__ void insert_keys_kernel(const std::uint64_t* keys, std::size_t n, std::uint64_t* table_keys,
                                          std::int32_t* table_values, std::uint64_t mask) {
  const std::size_t v = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= n) return;
  static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t), "64-bit compare-and-swap");
  const std::uint64_t key = keys[v];
  if (key == math::kEmptyKey) return;  // a free slot
  std::uint64_t slot = math::hash_key(key) & mask;
  for (;;) {
    auto* at = reinterpret_cast<unsigned long long*>(table_keys + slot);
    if (atomicCAS(at, static_cast<unsigned long long>(math::kEmptyKey), static_cast<unsigned long long>(key)) ==
        static_cast<unsigned long long>(math::kEmptyKey)) {
      table_values[slot] = static_cast<std::int32_t>(v);
      return;
    }
    slot = (slot + 1) & mask;
  }
}

// Voxel v's index into the dense index over `box` (cells preset to -1), which holds every key.
__global__ void scatter_dense_kernel(const std::uint64_t* keys, std::size_t n, std::int32_t* dense,
                                            math::VoxelGridView box) {
  const std::size_t v = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= n) return;
  const std::uint64_t key = keys[v];
  if (key == math::kEmptyKey) return;  // a free slot
  const std::int64_t a = math::unpack_key(key, 0) - box.dense_min[0], b = math::unpack_key(key, 1) - box.dense_min[1],
                     c = math::unpack_key(key, 2) - box.dense_min[2];
  dense[math::dense_offset(a, b, c, box.dense_dims)] = static_cast<std::int32_t>(v);
}

}  // namespace
}  // namespace ndtcu::detail
