#pragma once
// A voxel map on the device that changes a voxel at a time: the device twin of a tiled map
// (src/map/tiled_voxel_map.cpp), which tells it, at each publish, which cells' voxels changed.
//
// Layout. Every voxel lives in a slot of grow-only device arrays (means, inverse
// covariances, centroids, the cell key; a free slot's key is kEmptyKey). The lookup (the
// dense index over the occupied lattice box when it fits the budget, else the hash table)
// maps a cell to its slot, so the kernels read a version exactly as an uploaded VoxelMap
// (math::VoxelGridView), and a voxel's slot never decides a result: the kernels visit
// cells in the search table's order whatever the voxel indices (ndt_point.hpp).
//
// A publish touches the voxels that changed and the lookup, not the rest of the map: the
// new and changed voxels (sent up, about 150 bytes each) go into free slots, a changed or
// removed voxel's old slot is freed, and the lookup is rebuilt on the device, one thread
// per slot, into the second of two lookup buffers: the version in use keeps its own.
//
// Versions. publish() runs on the owner's thread (the tiled map's) and returns when the
// new version is complete on the device. A consumer (one CUDA backend at a time) calls
// acquire() between two alignments: when a newer version is published it switches to it
// at once (the version's work has finished; nothing waits, on the host or the device) and
// records on its stream where it stopped reading the old one. A slot freed by version N,
// and arrays replaced by a growth at N, are reused or freed only once the consumer has
// taken version N or later and its stream has passed that point, which the next publish
// waits for on the device. So a version is never written while it may be read.
#include <ndtcu/settings.hpp>

#include "device_voxel_map.hpp"
#include "cuda_voxel_build.hpp"
#include "ndt_neighbours.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace ndtcu::detail {

/// A voxel a publish writes: its cell and its statistics.
struct VoxelWrite {
  std::uint64_t key = 0;
  VoxelResult stats{};
};

/// A voxel a publish takes from a slot that stage() wrote: its cell and the slot.
struct VoxelAdopt {
  std::uint64_t key = 0;
  std::uint32_t slot = 0;
};

/// What a publish did, and the version it made.
struct DevicePublishStats {
  std::uint64_t version = 0;     ///< the version made (1 for the first publish)
  std::size_t voxels = 0;        ///< voxels in it
  std::size_t written = 0;       ///< voxels sent up and written (new or changed)
  std::size_t adopted = 0;       ///< voxels taken from staged slots (written on the device)
  std::size_t erased = 0;        ///< voxels removed
  std::size_t slots = 0;         ///< slots the arrays hold (capacity)
  std::uint64_t bytes_up = 0;    ///< bytes sent to the device
  bool grown = false;            ///< the slot arrays grew (copied on the device)
  VoxelLookup lookup = VoxelLookup::Hash;  ///< the lookup built
  double ms = 0.0;               ///< wall time of the publish
};

/// The version a consumer reads.
struct DeviceMapVersion {
  math::VoxelGridView grid{};  ///< the kernels' view (device pointers)
  std::uint64_t version = 0;   ///< 0: nothing published yet (an empty map)
  std::size_t voxels = 0;
  VoxelLookup lookup = VoxelLookup::Hash;
};

/// The device twin of a tiled map (see the file comment). Throws CudaError when CUDA is not
/// compiled in or no device is usable.
class DeviceTiledMap {
 public:
  /// An empty map on the current device, on a non-blocking stream of its own, for a
  /// lattice of `resolution` and `inverse_resolution` (float, as VoxelMap's) with the
  /// radius search's `radius_squared`. The dense index is used while the occupied box needs
  /// at most `dense_budget_bytes`, else the hash table.
  DeviceTiledMap(double resolution, float inverse_resolution, float radius_squared,
                 std::size_t dense_budget_bytes = std::size_t(256) << 20);
  ~DeviceTiledMap();
  DeviceTiledMap(const DeviceTiledMap&) = delete;
  DeviceTiledMap& operator=(const DeviceTiledMap&) = delete;

  /// Writes the statistics of cells `cells` (indices into `from`, each a usable cell) of a
  /// GPU voxelize into free slots, device to device (nothing goes up but the indices), and
  /// returns the slots, in the same order: staged, in no lookup until a publish adopts
  /// them. How a tile's voxels go from the voxelizer into the device map without the host.
  /// Returns when the copy is done (the voxelizer may run again). Throws CudaError as
  /// publish() does.
  std::vector<std::uint32_t> stage(const DeviceOccupiedCells& from, const std::vector<std::uint32_t>& cells);
  /// Frees staged slots that no publish adopted (their tile went first).
  void release_staged(const std::vector<std::uint32_t>& slots);

  /// Makes the next version: the current one with the voxels of `erased` removed (a key not
  /// in the map is ignored), those of `written` added or replaced, and those of `adopted`
  /// added or replaced by the staged slot named (which the map then owns). Each key at
  /// most once over the three lists. Returns when the version is complete on the device; a bound consumer
  /// takes it at its next acquire. Throws CudaError for a device failure: when memory runs
  /// out the map is as it was; after any other device error it refuses every later
  /// publish (the consumer keeps the version it reads).
  DevicePublishStats publish(const std::vector<std::uint64_t>& erased, const std::vector<VoxelWrite>& written,
                             const std::vector<VoxelAdopt>& adopted = {});

  /// Consumer side, on the consumer's thread: binds `consumer` (a second consumer while
  /// one is bound is an Error) and fills `out` with the newest published version,
  /// switching to it (recorded on `stream`) when it is newer than the one the consumer
  /// read. Returns true when `out` changed from what the consumer read (`seen` version).
  bool acquire(const void* consumer, CUstream_st* stream, std::uint64_t seen, DeviceMapVersion& out);
  /// Unbinds `consumer` (its stream's queued work may still read its version: recorded).
  void release(const void* consumer, CUstream_st* stream) noexcept;

  /// The cells of every voxel of the newest version (the owner's thread), in no order.
  std::vector<std::uint64_t> keys() const;
  /// The lattice's resolution (as given).
  double resolution() const noexcept;
  /// Voxels of the newest version.
  std::size_t voxels() const;
  /// Device bytes the map holds (slot arrays, both lookups, staging).
  std::size_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndtcu::detail
