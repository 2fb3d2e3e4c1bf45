// ndtcu_gpu_bench: per-evaluation cost of the CUDA backend's design choices on one
// target and source: voxel lookup (hash, dense) and search (radius, direct7), over source
// sizes. Median GPU time (events around the
// kernels) and median wall time of evaluate() (upload, kernels, read-back, the one sync).
// Not a test: see BENCHMARK.md.
#include "cuda/cuda_backend.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/log.hpp>
#include <ndtcu/version.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>

using namespace ndtcu;
using detail::VoxelLookup;

int main(int argc, char** argv) {
  CLI::App app{"ndtcu_gpu_bench " NDTCU_VERSION_STRING ": cost of the CUDA backend's lookup choices",
               "ndtcu_gpu_bench"};
  std::string target, source;
  double target_leaf = 0.2, resolution = 2.0;
  std::vector<double> source_leaves{2.0, 0.9, 0.3, 0.0};
  int evaluations = 200;
  std::vector<double> pose_values{0, 0, 0, 0, 0, 0};
  app.add_option("--target", target, "target cloud")->required();
  app.add_option("--source", source, "source cloud")->required();
  app.add_option("--target-leaf", target_leaf, "voxel filter of the target (m; 0 = none)");
  app.add_option("--source-leaves", source_leaves, "voxel filters of the source, one row group each (0 = none)")
      ->delimiter(',');
  app.add_option("--resolution", resolution, "NDT resolution (m)");
  app.add_option("--evaluations", evaluations, "timed evaluations per row")->check(CLI::PositiveNumber);
  app.add_option("--pose", pose_values, "pose evaluated, x,y,z,roll,pitch,yaw")->delimiter(',')->expected(6);
  CLI11_PARSE(app, argc, argv);
  set_log_level(LogLevel::Warn);
  if (!cuda_unavailable_reason().empty()) {
    std::cerr << "ndtcu_gpu_bench: " << cuda_unavailable_reason() << "\n";
    return 1;
  }
  const PointCloud raw_target = read_point_cloud(target);
  const PointCloud tgt = target_leaf > 0 ? voxel_downsample(raw_target, target_leaf) : raw_target;
  VoxelMapOptions vo;
  vo.resolution = resolution;
  const VoxelMap map = VoxelMap::build(tgt, vo);
  const PointCloud raw_source = read_point_cloud(source);
  Pose6 pose;
  for (int i = 0; i < 6; ++i) pose(i) = pose_values[static_cast<std::size_t>(i)];

  std::cout << fmt::format("target {} ({} points, {} voxels at {} m), source {}, {} evaluations per row, device {}\n",
                           target, tgt.size(), map.size(), resolution, source, evaluations,
                           cuda_devices().front().name);
  std::cout << fmt::format("{:>8} {:<7} {:<6} {:>12} {:>12} {:>10}\n", "points", "search", "lookup",
                           "gpu us/eval", "wall us/eval", "pairs/pt");
  detail::CudaBackend backend;
  for (double leaf : source_leaves) {
    const PointCloud src = leaf > 0 ? voxel_downsample(raw_source, leaf) : raw_source;
    for (SearchMethod search : {SearchMethod::Radius, SearchMethod::Direct7}) {
      for (VoxelLookup lookup : {VoxelLookup::Hash, VoxelLookup::Dense}) {
        backend.set_map(map, lookup, std::size_t(8) << 30);
        backend.set_source(src);
        {
          backend.configure(search, 0.55);
          math::DerivativeSums sums = backend.evaluate(0, pose, true);  // warm-up
          std::vector<double> gpu_us, wall_us;
          for (int e = 0; e < evaluations; ++e) {
            backend.reset_telemetry();
            const auto t0 = std::chrono::steady_clock::now();
            sums = backend.evaluate(0, pose, true);
            wall_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
            gpu_us.push_back(1e3 * backend.telemetry().gpu_ms);
          }
          std::sort(gpu_us.begin(), gpu_us.end());
          std::sort(wall_us.begin(), wall_us.end());
          std::cout << fmt::format("{:>8} {:<7} {:<6} {:>12.1f} {:>12.1f} {:>10.2f}\n", src.size(),
                                   to_string(search), lookup == VoxelLookup::Hash ? "hash" : "dense",
                                   gpu_us[gpu_us.size() / 2], wall_us[wall_us.size() / 2],
                                   sums.v[math::kCorrespondences] / std::max(1.0, double(src.size())));
        }
      }
    }
  }
  return 0;
}
