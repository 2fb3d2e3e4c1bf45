#pragma once
// What an aligner following a tiled map reads of it (src/map/tiled_voxel_map.cpp): the map it
// last published, on the host or as its device twin. Safe to call from the aligner's
// thread while the tiled map's owner changes and publishes it.
#include <ndtcu/tiled_voxel_map.hpp>
#include <ndtcu/voxel_map.hpp>

#include <memory>

namespace ndtcu::detail {

class DeviceTiledMap;

struct TiledVoxelMapAccess {
  /// The host map of the last publish (null before the first, and for a map that
  /// publishes on the device).
  static std::shared_ptr<const VoxelMap> published_host(const TiledVoxelMap& tiles);
  /// The device twin (null when the map publishes on the host).
  static DeviceTiledMap* device(TiledVoxelMap& tiles);
};

}  // namespace ndtcu::detail
