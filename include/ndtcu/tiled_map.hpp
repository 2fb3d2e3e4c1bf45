#pragma once
/// \file
/// Tiled maps in Autoware's layout: a folder of PCD tiles, each a square of the x-y plane
/// named by its lower corner, and `pointcloud_map_metadata.yaml`:
///
///     x_resolution: 20.0
///     y_resolution: 20.0
///     0_0.pcd: [0, 0]
///     20_0.pcd: [20, 0]
///
/// (each tile's file and its [x_min, y_min]; the tile spans [x_min, x_min + x_resolution)
/// x [y_min, y_min + y_resolution)). Autoware's own map tools write it so; ndtcu reads
/// theirs as it is and writes its own the same way.

#include <ndtcu/io.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/tiled_voxel_map.hpp>
#include <ndtcu/voxel_map.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ndtcu {

/// One tile of a tiled map.
struct MapTile {
  std::string file;   ///< the PCD file, relative to the map folder (as the metadata names it)
  double x_min = 0.0; ///< lower corner of its square (world m)
  double y_min = 0.0;
  int line = 0;       ///< line of the metadata file that names it (0 when not read from one)
};

/// The contents of `pointcloud_map_metadata.yaml`.
struct TiledMapMetadata {
  double x_resolution = 0.0;  ///< tile size along x (m)
  double y_resolution = 0.0;  ///< tile size along y (m)
  std::vector<MapTile> tiles; ///< in the file's order
};

/// The metadata file's name in a map folder.
inline constexpr const char* kTiledMapMetadataFile = "pointcloud_map_metadata.yaml";

/// True when `path` is a folder holding pointcloud_map_metadata.yaml.
bool is_tiled_map(const std::string& path);

/// Reads pointcloud_map_metadata.yaml (a path to the file or to its folder). Throws
/// IoError naming the file for a missing or unreadable one, and Error naming the file and
/// the line for a line that is neither `x_resolution: R`, `y_resolution: R`, a tile
/// `NAME.pcd: [X, Y]`, blank nor a comment; for a resolution that is missing, not positive
/// or not finite, or given twice; for a tile named twice; for a tile path that is absolute
/// or leaves the map folder through ".." (the tile, and where its path leads); for two
/// tiles whose squares overlap (both tiles with their corners and lines: Autoware's layout
/// is a grid of equal squares keyed by their lower corners, each place in one tile; a
/// millionth of the tile size is allowed for corners written with rounding); and, when
/// `check_files`, for a tile whose file does not exist.
TiledMapMetadata read_tiled_map_metadata(const std::string& path, bool check_files = true);

/// Splits `map` into squares of `tile_size` metres (x-y, world coordinates, corners at
/// multiples of the size) and writes each non-empty one to `dir` as `X_Y.pcd` (X, Y its
/// lower corner), with the metadata file. Points keep their precision: a cloud with a
/// non-zero origin (UTM) is written in float64 world coordinates (WriteOptions). Creates
/// `dir`. Throws Error for a tile size that is not positive and finite, or more than
/// 1,000,000 tiles. (One TiledMapWriter::add of `map`, then finish().)
TiledMapMetadata write_tiled_map(const PointCloud& map, double tile_size, const std::string& dir,
                                 const WriteOptions& options = {});

/// How a TiledMapWriter buffers and filters.
struct TiledMapWriterOptions {
  WriteOptions write;  ///< how each tile's PCD is written
  /// Points held in memory across all tiles before they are appended to spill files in
  /// the output folder (16 bytes a point with intensity, 12 without, and the vectors'
  /// growth); at finish() the largest tile is held besides.
  std::size_t buffer_points = std::size_t(4) << 20;
  /// Voxel-grid leaf applied to each tile on its own at finish() (m; 0 keeps every point).
  /// Cells along tile borders then differ from a filter of the whole map unless the tile
  /// size is a multiple of the leaf and the lattices line up.
  double voxel = 0.0;
};

/// What a TiledMapWriter wrote.
struct TiledMapWriteStats {
  std::size_t points_in = 0;       ///< points given to add()
  std::size_t points_written = 0;  ///< points in the tiles (fewer with a voxel filter)
  std::size_t tiles = 0;           ///< tile files written
  std::size_t spills = 0;          ///< times the buffers were appended to spill files
  std::size_t peak_buffered = 0;   ///< most points held in the buffers at once
};

/// Writes a tiled map (the layout above) from clouds given one after another, holding at
/// most TiledMapWriterOptions::buffer_points of them: beyond that the buffered points go
/// to spill files in `dir` (removed by finish()), so a map of any size is written in
/// bounded memory. Each tile holds its points in the order they were added, so the tiles
/// do not depend on how the clouds were split or on the buffer size. Every cloud must
/// have the first one's origin, and all or none must carry intensity.
class TiledMapWriter {
 public:
  /// Creates `dir`. Throws Error for a tile size that is not positive and finite, IoError
  /// when the folder cannot be made.
  TiledMapWriter(std::string dir, double tile_size, TiledMapWriterOptions options = {});
  ~TiledMapWriter();
  TiledMapWriter(const TiledMapWriter&) = delete;
  TiledMapWriter& operator=(const TiledMapWriter&) = delete;

  /// Sorts the points of `cloud` into their tiles. Throws Error for an origin or
  /// intensity that differs from the first cloud's, a point too far out for the tile
  /// size, more than 1,000,000 tiles, or after finish(); IoError when a spill fails.
  void add(const PointCloud& cloud);
  /// Writes every tile (voxel-filtered when asked) and the metadata file, and removes the
  /// spill files. Throws IoError naming a file that cannot be written.
  TiledMapMetadata finish();
  const TiledMapWriteStats& stats() const noexcept { return stats_; }

 private:
  struct Buffer;
  void spill();
  std::string dir_;
  double tile_size_;
  TiledMapWriterOptions options_;
  std::map<std::pair<std::int64_t, std::int64_t>, Buffer> tiles_;
  std::size_t buffered_ = 0;
  bool started_ = false, with_intensity_ = false, finished_ = false;
  Eigen::Vector3d origin_ = Eigen::Vector3d::Zero();
  TiledMapWriteStats stats_;
};

/// What read_tiled_map() read.
struct TiledMapRead {
  PointCloud cloud;                  ///< the tiles' points, in the metadata's order
  std::vector<std::string> loaded;   ///< the tiles read (files, as the metadata names them)
  std::vector<std::string> skipped;  ///< tiles that could not be read (a warning names each and why)
};

/// Reads the tiles of the map folder `dir` whose square comes within `radius` metres of
/// `centre` (world x-y; an infinite radius reads every tile). Every tile is read with one
/// origin, so their points share a lattice: ReadOptions' Fixed origin when given, else (Auto)
/// zero, or a middle tile's lower corner (the per-axis median of the corners, z 0: the same
/// for any order of the metadata's lines) when that lies beyond auto_origin_threshold (UTM). A tile that cannot be read (a malformed PCD) is skipped
/// with a warning naming it; metadata errors throw (see read_tiled_map_metadata()).
TiledMapRead read_tiled_map(const std::string& dir, const Eigen::Vector2d& centre = Eigen::Vector2d::Zero(),
                            double radius = std::numeric_limits<double>::infinity(), const ReadOptions& options = {});

/// Distance (m) from `centre` (world x-y) to the square of tile `t` (0 inside it).
double tile_distance(const TiledMapMetadata& meta, const MapTile& t, const Eigen::Vector2d& centre);

/// The ReadOptions with which every tile of `meta` is read onto one origin (see
/// read_tiled_map()): `options` as given unless its policy is Auto, which becomes Fixed at
/// zero, or at the per-axis median of the tiles' lower corners when that lies beyond
/// auto_origin_threshold.
ReadOptions tiled_map_read_options(const TiledMapMetadata& meta, const ReadOptions& options = {});

/// How a TiledMapStreamer follows the pose.
struct TiledMapStreamOptions {
  /// Tiles whose square comes within this distance (m) of the pose are loaded (Autoware's
  /// dynamic map loading: 150 m by default; ndtcu 100 m: a 64-ring scan reaches ~100 m).
  double radius = 100.0;
  /// An update starts when the pose is this far (m) from the centre of the last one.
  double update_distance = 20.0;
  /// Voxel-filter each tile (leaf, m; 0 keeps every point). Each tile is filtered on its
  /// own, so cells along tile borders differ from a filter of the whole map.
  double map_voxel = 0.0;
  /// Host bytes the tiles may hold (their cells' sums and statistics) plus the joined map;
  /// 0: no budget, tiles beyond the radius are dropped at each update. With a budget, tiles
  /// beyond the radius stay (a vehicle that comes back finds them) until the budget needs
  /// their room, least recently within the radius first; when the tiles within the radius
  /// alone do not fit, the update throws Error naming the sizes. The device holds a copy of
  /// the joined map's means, inverse covariances, centroids and lookup, less than its host
  /// arrays, so the budget bounds the device map too. In publish mode no map is joined: the
  /// same per-cell allowance covers the device twin (its slots with their headroom and its
  /// two lookups), whose bytes the stats report apart.
  std::size_t memory_budget = 0;
  /// Reading and voxelizing tile files: threads of the tiled map's builds.
  int threads = 0;
  /// Called with each new map on the thread that made it (the worker, for updates), before
  /// take() hands it out: Localizer::stage_map uploads it to the GPU there, so the swap
  /// between two frames costs no upload. An exception it throws is the update's error.
  std::function<void(const std::shared_ptr<const VoxelMap>&)> on_map;
  /// Publish instead of join: each update ends in TiledVoxelMap::publish() of tiled_map(),
  /// which a localizer or aligner follows (Localizer::set_map(tiled_map())), taking it
  /// between two frames. With tiles voxelized on the GPU an update then sends up only the
  /// voxels that changed and joins no host map; load() and take() return null, and
  /// take_published() tells when an update finished. on_map is not called.
  bool publish = false;
};

/// Counts of a TiledMapStreamer since it was made.
struct TiledMapStreamStats {
  std::size_t listed = 0;         ///< tiles in the metadata
  std::size_t loaded = 0;         ///< tiles loaded now
  std::size_t updates = 0;        ///< updates run (the first load included)
  std::size_t tiles_read = 0;     ///< tile files read
  std::size_t tiles_dropped = 0;  ///< tiles removed (beyond the radius, or evicted for the budget)
  std::vector<std::string> skipped;  ///< tile files that could not be read (warned once each)
  std::size_t peak_loaded = 0;    ///< most tiles loaded at once
  std::size_t peak_bytes = 0;     ///< most host bytes held at once (tiles and joined map)
  std::size_t bytes = 0;          ///< host bytes held now
  double read_ms = 0.0;           ///< time reading and voxelizing tiles (on the worker)
  double join_ms = 0.0;           ///< time joining tiles into maps, or publishing them (on the worker)
  std::size_t voxels = 0;         ///< voxels of the last finished update's map
  std::size_t device_bytes = 0;   ///< publish mode on the GPU: the device twin's bytes now
  std::size_t peak_device_bytes = 0;  ///< ...and at most
};

/// A tiled map folder that follows a moving pose: loads the tiles around it into a
/// TiledVoxelMap on a worker thread and hands out each new VoxelMap when it is ready, so
/// the caller keeps aligning on the current map meanwhile. One caller thread.
class TiledMapStreamer {
 public:
  /// Reads the metadata of the map folder `dir` (throws its errors) and prepares tiles by
  /// `voxel_options` (its threads are overridden by the stream's). Tile files are read by
  /// `read` (see tiled_map_read_options()). Throws Error for a radius, update distance or
  /// map_voxel that is negative or not finite.
  TiledMapStreamer(const std::string& dir, const VoxelMapOptions& voxel_options,
                   const TiledMapStreamOptions& options = {}, const ReadOptions& read = {});
  /// Waits for a running update.
  ~TiledMapStreamer();
  TiledMapStreamer(const TiledMapStreamer&) = delete;
  TiledMapStreamer& operator=(const TiledMapStreamer&) = delete;

  /// Loads the tiles around `centre` (world x-y) now, on the calling thread, and returns
  /// their map. Throws Error when no readable tile lies within the radius (naming the
  /// folder, the centre and the radius) or for the budget (see TiledMapStreamOptions).
  std::shared_ptr<const VoxelMap> load(const Eigen::Vector2d& centre);
  /// Tells the streamer where the pose is: when it has moved update_distance from the last
  /// update's centre and no update is running, one starts on the worker. Cheap otherwise.
  void request(const Eigen::Vector2d& centre);
  /// The map of the last finished update, once (null when none finished since the last
  /// call). With `wait`, waits for a running update first (reproducible runs: the map
  /// changes at the frame after the request whatever the timing). Rethrows an update's
  /// error.
  std::shared_ptr<const VoxelMap> take(bool wait = false);
  /// Publish mode: true once for each update finished since the last call (the followers
  /// of tiled_map() take its version at their next call); with `wait`, waits for a running
  /// update first. Rethrows an update's error. False in join mode (see take()).
  bool take_published(bool wait = false);
  /// Whether the map last handed out (by load(), take() or take_published()) holds every
  /// tile of the folder within `reach` metres (x-y) of `position` (world x-y), tiles that
  /// could not be read excepted. False: a scan taken there and cropped at `reach` meets
  /// places whose tiles are not in that map, where it would align on part of its
  /// surroundings (a pose off by tenths of a metre that still scores well). A caller that
  /// runs faster than the updates (a log replayed at full speed) then waits for the running
  /// update (take(true)) before the frame; at the sensor's own rate the update is ready
  /// first. Before the first load, false.
  bool covers(const Eigen::Vector2d& position, double reach) const;
  /// The tiled map the updates change (and, in publish mode, publish): for a localizer or
  /// aligner to follow. Changed by the worker while an update runs: read it then only
  /// through a follower.
  std::shared_ptr<TiledVoxelMap> tiled_map() const noexcept;
  /// True while an update runs on the worker.
  bool busy() const noexcept;
  /// Waits until no update runs (its map or error stays for take()).
  void wait_idle() const noexcept;

  /// The folder's metadata.
  const TiledMapMetadata& metadata() const noexcept;
  /// The world origin every tile is read onto.
  const Eigen::Vector3d& origin() const noexcept;
  /// Counts so far (of finished updates).
  TiledMapStreamStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndtcu
