#pragma once
// A voxel map on the device, for one CUDA backend (host-compiler header; the buffers hide
// behind a pimpl in device_voxel_map.cu). It owns the map in use and a second set of
// buffers a worker thread stages the next map into (stage), swapped in by set() without an
// upload; or it reads a tiled map's device twin (use_tiled), as that map's one consumer.
// Whichever it holds, grid() is the trivially copyable view the kernels read.
#include <ndtcu/voxel_map.hpp>

#include "ndt_neighbours.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace ndtcu::detail {

struct DeviceVoxelCells;  // cuda_voxel_build.hpp
class DeviceTiledMap;     // device_tiled_map.hpp

/// How a voxel's lattice cell is found on the device. The radius search makes 27 lookups
/// per point, each a dependent load chain, so lookup latency sets the kernel's time:
/// measured on an H100 the dense index (one load) takes 27-30 us per evaluation against
/// 46-48 us for the hash (probe, key compare, value load) at 1.5k-20k points, and 91 vs
/// 117 us at 125k. Auto therefore takes the dense index whenever the occupied lattice box
/// fits the budget (a 1 km x 1 km x 50 m map at 2 m is 6 million cells, 25 MB) and falls
/// back to the hash for wide or sparse maps. Sorted keys with a binary search were not
/// built: they need more dependent loads per lookup than the hash.
enum class VoxelLookup {
  Auto,   ///< dense when the occupied box fits the budget, hash otherwise
  Hash,   ///< the map's open-addressing hash (linear probing)
  Dense,  ///< a dense index over the occupied lattice box
};

/// What a change of map cost: bytes sent up, and whether a staged or tiled map was swapped
/// in (no upload).
struct MapChange {
  std::uint64_t bytes_up = 0;
  bool swapped = false;
};

/// The voxel map a CUDA backend aligns on, on the device, used on `stream` (the caller's).
class DeviceVoxelMap {
 public:
  explicit DeviceVoxelMap(CUstream_st* stream);
  ~DeviceVoxelMap();
  DeviceVoxelMap(const DeviceVoxelMap&) = delete;
  DeviceVoxelMap& operator=(const DeviceVoxelMap&) = delete;

  /// Uses `map`: swapped in when stage() staged this VoxelMap object with the same lookup
  /// arguments (the stream waits on the device for the staging), uploaded otherwise.
  /// Leaves a bound tiled map. Throws CudaError when the device memory is too small.
  MapChange set(const VoxelMap& map, VoxelLookup lookup, std::size_t dense_budget_bytes);
  /// Uses `map`, its voxels copied on the device from `cells` (a GPU build's), the hash
  /// table and dense index built there. Returns once `cells` is no longer read.
  MapChange set_from_device(const VoxelMap& map, const DeviceVoxelCells& cells, VoxelLookup lookup,
                            std::size_t dense_budget_bytes);
  /// Uploads `map` into the second buffers on a stream of its own; the one member that may
  /// run on another thread than the others.
  void stage(std::shared_ptr<const VoxelMap> map, VoxelLookup lookup, std::size_t dense_budget_bytes);
  /// Reads `map`, a tiled map's device twin, identified to it as its consumer by this
  /// object (see device_tiled_map.hpp); `take_newer` takes a version published since.
  /// `swapped`: the view changed.
  MapChange use_tiled(DeviceTiledMap& map, bool take_newer);
  /// The voxels of the tiled map's version in use.
  std::size_t tiled_voxels() const noexcept;

  /// True when a map or a tiled map is in use.
  bool ready() const noexcept;
  /// The kernels' view of the map in use.
  const math::VoxelGridView& grid() const noexcept;
  /// The resolution of the map in use.
  double resolution() const noexcept;
  /// The lookup of the map in use.
  VoxelLookup lookup() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndtcu::detail
