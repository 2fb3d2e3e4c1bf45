#include "cli_common.hpp"
#include "commands.hpp"

#include <ndtcu/filters.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <iostream>
#include <memory>

namespace ndtcu::cli {

namespace {
struct ConvertOptions {
  std::string in, out, encoding = "binary", origin = "auto";
  double voxel = 0.0;
  std::vector<double> crop;
  bool allow_precision_loss = false;
};
}  // namespace

Command add_convert(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<ConvertOptions>();
  auto* cmd = app.add_subcommand("convert", "Convert a point cloud between formats, optionally cropped and downsampled");
  cmd->add_option("IN", o->in, "input .pcd, .ply or .bin")->required();
  cmd->add_option("OUT", o->out,
                  "output .pcd or .bin (KITTI: float32 world coordinates; a cloud far from zero whose points "
                  "they would move by more than 1 mm is refused, see --allow-precision-loss)")
      ->required();
  cmd->add_option("--voxel", o->voxel, "voxel-grid leaf size in metres (centroid per cell); 0 keeps every point")
      ->check(non_negative_number());
  // The type stays CLI11's FLOAT (shown as "FLOAT x 2"): require_finite_numbers() finds the
  // floating-point options by it.
  cmd->add_option("--crop-range", o->crop, "MIN MAX: keep points whose range from the frame origin is in [MIN, MAX] metres")
      ->expected(2);
  cmd->add_option("--encoding", o->encoding, "PCD encoding of OUT")
      ->check(CLI::IsMember({"ascii", "binary", "binary_compressed"}));
  add_origin_option(cmd, o->origin, "IN");
  cmd->add_flag("--allow-precision-loss", o->allow_precision_loss,
                "write a .bin even where float32 world coordinates move points by more than 1 mm (a UTM cloud: "
                "up to 0.25 m); the largest change is logged");
  return [o, &global]() {
    CloudInfo info;
    PointCloud cloud = read_point_cloud(o->in, read_options_for_origin(o->origin), &info);
    const std::size_t loaded = cloud.size();
    if (!o->crop.empty()) cloud = crop_range(cloud, o->crop[0], o->crop[1]);
    const std::size_t cropped = cloud.size();
    if (o->voxel > 0.0) cloud = voxel_downsample(cloud, o->voxel);
    WriteOptions w;
    w.pcd_encoding = pcd_encoding_from_string(o->encoding);
    w.allow_precision_loss = o->allow_precision_loss;
    write_point_cloud(o->out, cloud, w);
    if (global.json) {
      nlohmann::json j{{"input", json_text(o->in)}, {"output", json_text(o->out)},          {"points_in", loaded},
                       {"non_finite", info.non_finite}, {"out_of_range", info.out_of_range}, {"after_crop", cropped}, {"points_out", cloud.size()}};
      std::cout << dump_json(j) << "\n";
    } else {
      std::cout << fmt::format("{} -> {}: {} points read ({} non-finite dropped{}), {} after crop, {} written\n",
                               printable(o->in), printable(o->out), loaded, info.non_finite, out_of_range_text(info.out_of_range), cropped,
                               cloud.size());
    }
    return 0;
  };
}

}  // namespace ndtcu::cli
