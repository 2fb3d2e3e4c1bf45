#pragma once
/// \file
/// A voxel map made of tiles that come and go: a localization stack hands it tiles as
/// clouds (from files, or from its own map server) under ids of its choosing, removes them
/// by id, and aligns on map(), the VoxelMap of the tiles loaded now.
///
/// Each tile is voxelized once, on its own, when it is added: its cells keep their sums
/// (the points in input order) and their statistics. map() joins the tiles: a cell that
/// lies in one tile only takes that tile's statistics as they are; a cell that two or more
/// tiles share (their squares meet inside it) takes the statistics of the joined sums,
/// the tiles in id order (math::merge_sums), so its voxel counts the points of all of them
/// (and a cell too sparse in each tile can be usable in the union).
///
/// What this gives:
///  - The map depends on the set of tiles only, never on the order of the adds and
///    removes: any sequence that ends with the same tiles gives the same map, bit for bit.
///  - Against VoxelMap::build of all the tiles' points: the same cells, in the same order
///    (lattice cell order). A cell within one tile has the same bits (its points are summed
///    in the same order); a shared cell differs in the last bits only (the tiles' partial
///    sums are added instead of the points one by one).
///  - When the tile size is a multiple of the resolution and the origin lies on the
///    lattice of both (Autoware's 20 m tiles at 2 m with a zero origin or an origin at a
///    tile corner), no cell spans two tiles, except where a point within float rounding of
///    a tile border is binned across it. When it is not a multiple, the cells along the
///    borders are shared, and joined as above: the voxels are still those of the whole
///    map, at the cost of recomputing the shared cells' statistics in map().
///
/// Coordinates: every tile's points are binned relative to the map's origin (a UTM map
/// keeps millimetres); a tile cloud with another origin is moved onto it (in double).
///
/// Aligning while tiles change (Aligner::set_target(std::shared_ptr<TiledVoxelMap>)):
/// publish() makes the tiles loaded now the map that aligners following this one take
/// between two of their alignments. On the GPU (tiles voxelized there) the map has a
/// device twin, and a publish touches only the voxels that changed since the last one and
/// the lookup: those voxels are sent up into free slots of the device map and the lookup
/// (dense index or hash table) is rebuilt on the device into a second buffer, while the
/// aligner goes on with the version it reads; no host VoxelMap is joined. On the CPU a
/// publish joins the tiles (map()). Either way the published map is map()'s, voxel for
/// voxel and bit for bit (the device map's voxels sit in other places, which no result
/// depends on).
///
/// Threads: the members that change or read the tiles (add, remove, clear, publish, map,
/// stats) take one caller at a time; aligners following the map may align on other
/// threads meanwhile. The VoxelMap that map() returns is immutable and may be used on any
/// thread while the tiled map changes.

#include <ndtcu/point_cloud.hpp>
#include <ndtcu/voxel_map.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ndtcu {

namespace detail {
struct TiledVoxelMapAccess;
}  // namespace detail

/// Counts of a tiled map, for logs and budgets.
struct TiledVoxelMapStats {
  std::size_t tiles = 0;         ///< tiles loaded
  std::size_t points = 0;        ///< their points
  std::size_t cells = 0;         ///< their occupied cells, each tile counted on its own
  std::size_t memory_bytes = 0;  ///< host bytes the tiles hold (sums and statistics of every cell)
  std::size_t device_bytes = 0;  ///< device bytes of the device twin (0 before the first GPU publish)
};

/// What a publish did (TiledVoxelMap::publish).
struct TiledVoxelMapPublish {
  std::uint64_t version = 0;   ///< this publish's number (1 for the first)
  std::size_t voxels = 0;      ///< voxels of the published map
  bool on_device = false;      ///< published to the device twin (else joined on the host)
  std::size_t written = 0;     ///< device voxels written (new or changed since the last publish)
  std::size_t staged = 0;      ///< of them, taken from the device, where add_tile staged them
  std::size_t removed = 0;     ///< device voxels removed
  std::uint64_t bytes_up = 0;  ///< bytes sent to the device
  double host_ms = 0.0;        ///< the host's part: the changed cells' voxels (or the join)
  double device_ms = 0.0;      ///< the device's part: writes and the lookup, waited for
};

/// True when a TiledVoxelMap made with `options` voxelizes its tiles on the GPU and
/// publishes to a device twin: resolve_backend(options.backend, options.device) is
/// Backend::Cuda. Throws CudaError for Backend::Cuda without a usable device.
bool tiled_map_on_device(const VoxelMapOptions& options);

/// The voxel map of a changing set of tiles (see the file comment).
class TiledVoxelMap {
 public:
  /// An empty map whose cells are built by `options` (resolution, covariance, thresholds,
  /// threads) relative to `origin` (world). Tiles are voxelized where VoxelMap::build would
  /// build by these options: on the GPU for Backend::Cuda (and Backend::Auto with a device),
  /// on a stream of the map's own that never holds up alignments on other streams, with
  /// the CPU's bits; the joined map() is the same either way. Throws Error for options
  /// VoxelMap::build refuses.
  explicit TiledVoxelMap(const VoxelMapOptions& options, const Eigen::Vector3d& origin = Eigen::Vector3d::Zero());
  ~TiledVoxelMap();
  TiledVoxelMap(TiledVoxelMap&&) noexcept;
  TiledVoxelMap& operator=(TiledVoxelMap&&) noexcept;

  /// Voxelizes `cloud` as tile `id`. Throws Error for an empty id, an id already loaded
  /// (remove it first), a non-finite point or a point more than 2^20 cells from the
  /// origin (naming the tile and the point), CudaError for a device failure of a GPU
  /// voxelize; the map is unchanged then.
  void add_tile(const std::string& id, const PointCloud& cloud);
  /// add_tile for each (id, cloud); all or none: the first failure throws and leaves
  /// the map as it was.
  void add_tiles(const std::vector<std::pair<std::string, const PointCloud*>>& tiles);
  /// Removes the tiles `ids`. Throws Error naming an id that is not loaded (or named
  /// twice); the map is unchanged then.
  void remove_tiles(const std::vector<std::string>& ids);
  /// Removes every tile.
  void clear() noexcept;

  /// True when tile `id` is loaded.
  bool contains(const std::string& id) const;
  /// The ids of the loaded tiles, sorted.
  std::vector<std::string> tile_ids() const;
  /// Host bytes tile `id` holds (0 when not loaded).
  std::size_t tile_memory_bytes(const std::string& id) const;
  /// Counts over the loaded tiles.
  TiledVoxelMapStats stats() const;

  /// The voxel map of the loaded tiles (see the file comment), built on the first call
  /// after a change and shared until the next one. Its stats().build_ms is the join's time.
  std::shared_ptr<const VoxelMap> map();

  /// Makes the tiles loaded now the map that aligners following this one
  /// (Aligner::set_target(std::shared_ptr<TiledVoxelMap>)) align on from their next call
  /// (see the file comment). Returns when the version is complete. Throws CudaError for a
  /// device failure (aligners keep the version they read).
  TiledVoxelMapPublish publish();
  /// Publishes so far (0: none; aligners refuse a map that has published nothing).
  std::uint64_t published_version() const;
  /// True when publishes go to a device twin (tiles voxelized on the GPU).
  bool publishes_on_device() const noexcept;

  /// The options the tiles are built with.
  const VoxelMapOptions& options() const noexcept;
  /// World position of map-relative zero.
  const Eigen::Vector3d& origin() const noexcept;

 private:
  friend struct detail::TiledVoxelMapAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndtcu
