#pragma once
// The voxel map's hash table, which the CPU evaluator and the CUDA upload read: an
// internal layout (kernels/ndt_neighbours.hpp, attach_hash), not part of the public
// VoxelMap, which answers lookups through find().
#include <ndtcu/voxel_map.hpp>

#include <cstdint>
#include <vector>

namespace ndtcu::detail {

/// The slots of a VoxelMap's open-addressing table: a packed lattice key
/// (math::pack_key) or all ones, and the voxel index of each (-1 when empty).
struct VoxelHashTable {
  const std::vector<std::uint64_t>& keys;
  const std::vector<std::int32_t>& values;
};

VoxelHashTable voxel_hash_table(const VoxelMap& map) noexcept;

}  // namespace ndtcu::detail
