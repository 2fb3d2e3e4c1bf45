// Voxel-map build benchmark (not a test): VoxelMap::build of a simulator map of N points
// on the CPU (all threads) and on the GPU, in both covariance conventions, next to PCL's
// pcl::VoxelGridCovariance (as pcl::NormalDistributionsTransform builds its target: leaf
// size, minimum points, filter(true) with its kd-tree of centroids) when built with PCL.
// See BENCHMARK.md, "Voxel-map build".
//
//   ndtcu_map_bench [--points 10000000] [--resolution 2.0] [--repeats 5] [--no-pcl]
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/version.hpp>
#include <ndtcu/voxel_map.hpp>

#include <CLI/CLI.hpp>

#ifdef NDTCU_BENCH_WITH_PCL
#include <pcl/filters/voxel_grid_covariance.h>
#include <pcl/point_types.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace ndtcu;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Median and minimum of `repeats` timed runs of `run` after one untimed run; `run` returns
// the voxels it built (printed, so the rows can be compared).
struct Row {
  double median_ms = 0.0, min_ms = 0.0;
  std::size_t voxels = 0;
};
Row time_runs(int repeats, const std::function<std::size_t()>& run) {
  Row r;
  r.voxels = run();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    r.voxels = run();
    ms.push_back(ms_since(t0));
  }
  std::sort(ms.begin(), ms.end());
  r.median_ms = ms[ms.size() / 2];
  r.min_ms = ms.front();
  return r;
}

void print_row(const char* what, const Row& r) {
  std::printf("| %-46s | %10.1f | %10.1f | %9zu |\n", what, r.median_ms, r.min_ms, r.voxels);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ndtcu_map_bench " NDTCU_VERSION_STRING ": voxel-map build on the CPU, the GPU and PCL",
               "ndtcu_map_bench"};
  std::size_t points = 10000000;
  double resolution = 2.0;
  int repeats = 5;
  bool no_pcl = false;
  std::uint64_t seed = 7;
  app.add_option("--points", points, "points of the simulator map (exactly)")->check(CLI::Range(1000, 400000000));
  app.add_option("--resolution", resolution, "voxel edge (m)")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed builds per row (after one untimed)")->check(CLI::Range(1, 1000));
  app.add_option("--seed", seed, "simulator world seed");
  app.add_flag("--no-pcl", no_pcl, "skip PCL's VoxelGridCovariance");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    sim::WorldSettings w;
    w.seed = seed;
    w.size = 500.0;
    sim::MapSettings m;
    m.target_points = points;
    const PointCloud cloud = sim::sample_map(sim::World(sim::generate_scene(w)), m);
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    std::printf("map: %zu points of a %.0f m simulator world (seed %llu), made in %.1f s; resolution %.2f m; %d "
                "timed builds per row (median, min); %u host threads\n\n",
                cloud.size(), w.size, static_cast<unsigned long long>(seed), ms_since(t0) / 1000.0, resolution,
                repeats, threads);
    std::printf("| %-46s | %10s | %10s | %9s |\n", "build", "median ms", "min ms", "voxels");
    std::printf("|%s|%s|%s|%s|\n", std::string(48, '-').c_str(), std::string(12, '-').c_str(),
                std::string(12, '-').c_str(), std::string(11, '-').c_str());
    const bool gpu = cuda_compiled() && !cuda_devices().empty();
    for (const CovarianceMode mode : {CovarianceMode::Pcl, CovarianceMode::Autoware}) {
      VoxelMapOptions o;
      o.resolution = resolution;
      o.covariance = mode;
      o.threads = 0;
      o.backend = Backend::Cpu;
      const std::string name = to_string(mode);
      print_row(("ndtcu CPU, " + name + ", all threads").c_str(),
                time_runs(repeats, [&] { return VoxelMap::build(cloud, o).size(); }));
      if (gpu) {
        o.backend = Backend::Cuda;
        print_row(("ndtcu GPU, " + name + " (upload to host map)").c_str(),
                  time_runs(repeats, [&] { return VoxelMap::build(cloud, o).size(); }));
      }
    }
    if (!gpu) std::printf("(no GPU rows: %s)\n", cuda_compiled() ? cuda_unavailable_reason().c_str() : "built without CUDA");
#ifdef NDTCU_BENCH_WITH_PCL
    if (!no_pcl) {
      pcl::PointCloud<pcl::PointXYZ>::Ptr pc(new pcl::PointCloud<pcl::PointXYZ>);
      pc->resize(cloud.size());
      for (std::size_t i = 0; i < cloud.size(); ++i) {
        (*pc)[i].x = cloud.points[i].x();
        (*pc)[i].y = cloud.points[i].y();
        (*pc)[i].z = cloud.points[i].z();
      }
      print_row("PCL VoxelGridCovariance, filter(true)", time_runs(repeats, [&] {
                  pcl::VoxelGridCovariance<pcl::PointXYZ> grid;
                  const float leaf = static_cast<float>(resolution);
                  grid.setLeafSize(leaf, leaf, leaf);
                  grid.setMinPointPerVoxel(6);
                  grid.setInputCloud(pc);
                  grid.filter(true);
                  return grid.getCentroids()->size();
                }));
    }
#else
    if (!no_pcl) std::printf("(no PCL row: built without PCL)\n");
#endif
  } catch (const Error& e) {
    std::fprintf(stderr, "ndtcu_map_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
