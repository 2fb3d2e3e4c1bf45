// `ndtcu map tile MAP --tile-size 20 --out DIR`: a map split into Autoware's tiled layout.
#include "cli_common.hpp"
#include "commands.hpp"
#include "output_folder.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/text.hpp>
#include <ndtcu/tiled_map.hpp>

#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <memory>

namespace ndtcu::cli {

namespace {
struct MapOptions {
  std::string in, out, encoding = "binary", origin = "auto";
  double tile_size = 20.0;
};
}  // namespace

Command add_map(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<MapOptions>();
  auto* cmd = app.add_subcommand("map", "Map tools: split a map into tiles (Autoware's pointcloud_map_metadata.yaml)");
  cmd->require_subcommand(1);
  auto* tile = cmd->add_subcommand("tile", "Split MAP into square x-y tiles, one PCD each, with the metadata file");
  tile->add_option("MAP", o->in, "map point cloud (.pcd, .ply, .bin), world frame")->required();
  tile->add_option("--tile-size", o->tile_size, "tile side (m); a multiple of the NDT resolution keeps voxels whole")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 100000.0));
  tile->add_option("--out", o->out, "output folder (created)")->required();
  tile->add_option("--encoding", o->encoding, "PCD encoding of the tiles")
      ->capture_default_str()
      ->check(CLI::IsMember({"ascii", "binary", "binary_compressed"}));
  add_origin_option(tile, o->origin, "MAP");
  return [o, &global]() {
    const auto t0 = std::chrono::steady_clock::now();
    const PointCloud map = read_point_cloud(o->in, read_options_for_origin(o->origin));
    // One run at a time in a folder: a second is refused, naming the first.
    const OutputFolder folder(o->out, "ndtcu map tile");
    WriteOptions w;
    w.pcd_encoding = pcd_encoding_from_string(o->encoding);
    const TiledMapMetadata meta = write_tiled_map(map, o->tile_size, o->out, w);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (global.json) {
      nlohmann::json tiles = nlohmann::json::array();
      for (const MapTile& t : meta.tiles) tiles.push_back({{"file", json_text(t.file)}, {"x_min", t.x_min}, {"y_min", t.y_min}});
      std::cout << dump_json({{"input", json_text(o->in)},
                              {"output", json_text(o->out)},
                              {"points", map.size()},
                              {"tile_size", o->tile_size},
                              {"tiles", tiles},
                              {"seconds", s}})
                << "\n";
    } else {
      std::cout << fmt::format("{} -> {}: {} points in {} tiles of {} m ({} written), {:.2f} s\n", printable(o->in),
                               printable(o->out),
                               map.size(), meta.tiles.size(), o->tile_size, kTiledMapMetadataFile, s);
    }
    return 0;
  };
}

}  // namespace ndtcu::cli
