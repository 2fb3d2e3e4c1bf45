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

#include <Eigen/Core>

#include <limits>
#include <string>
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
/// or not finite; for a tile named twice; and, when `check_files`, for a tile whose file
/// does not exist.
TiledMapMetadata read_tiled_map_metadata(const std::string& path, bool check_files = true);

/// Splits `map` into squares of `tile_size` metres (x-y, world coordinates, corners at
/// multiples of the size) and writes each non-empty one to `dir` as `X_Y.pcd` (X, Y its
/// lower corner), with the metadata file. Points keep their precision: a cloud with a
/// non-zero origin (UTM) is written in float64 world coordinates (WriteOptions). Creates
/// `dir`. Throws Error for a tile size that is not positive and finite, or more than
/// 1,000,000 tiles.
TiledMapMetadata write_tiled_map(const PointCloud& map, double tile_size, const std::string& dir,
                                 const WriteOptions& options = {});

/// What read_tiled_map() read.
struct TiledMapRead {
  PointCloud cloud;                  ///< the tiles' points, in the metadata's order
  std::vector<std::string> loaded;   ///< the tiles read (files, as the metadata names them)
  std::vector<std::string> skipped;  ///< tiles that could not be read (a warning names each and why)
};

/// Reads the tiles of the map folder `dir` whose square comes within `radius` metres of
/// `centre` (world x-y; an infinite radius reads every tile). Every tile is read with one
/// origin, so their points share a lattice: ReadOptions' Fixed origin when given, else (Auto)
/// zero, or the first tile's lower corner (z 0) when a corner lies beyond
/// auto_origin_threshold (UTM). A tile that cannot be read (a malformed PCD) is skipped
/// with a warning naming it; metadata errors throw (see read_tiled_map_metadata()).
TiledMapRead read_tiled_map(const std::string& dir, const Eigen::Vector2d& centre = Eigen::Vector2d::Zero(),
                            double radius = std::numeric_limits<double>::infinity(), const ReadOptions& options = {});

}  // namespace ndtcu
