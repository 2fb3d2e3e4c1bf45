// Voxel-map build benchmark (not a test): VoxelMap::build of a simulator map of N points
// on the CPU (all threads) and on the GPU, in both covariance conventions, next to PCL's
// pcl::VoxelGridCovariance (as pcl::NormalDistributionsTransform builds its target: leaf
// size, minimum points, filter(true) with its kd-tree of centroids) when built with PCL.
// Then live tile updates: a simulator city cut into 20 m tiles, the tiles within --radius
// of its centre loaded into a TiledVoxelMap, and --updates times one tile removed and
// added again (voxelized) while another thread aligns a scan on CUDA without pause. Three
// ways: the tiles voxelized on the CPU (--map-threads) or the GPU, the map joined on the
// host, staged on the aligner (Aligner::stage_target) and swapped in; or voxelized on the
// GPU and published to the tiled map's device twin, which the aligner follows (what
// `ndtcu localize --map DIR` does on CUDA). See BENCHMARK.md, "Voxel-map build" and "Live
// tile updates".
//
//   ndtcu_map_bench [--points 10000000] [--resolution 2.0] [--repeats 5] [--no-pcl]
//                   [--tile-points 200000] [--radius 100] [--updates 20] [--map-threads 4]
//                   [--no-tiles]
#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/tiled_voxel_map.hpp>
#include <ndtcu/version.hpp>
#include <ndtcu/voxel_map.hpp>

#include <CLI/CLI.hpp>

#ifdef NDTCU_BENCH_WITH_PCL
#include <pcl/filters/voxel_grid_covariance.h>
#include <pcl/point_types.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
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

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

// The live tile update benchmark (see the file comment).
struct TileBench {
  std::size_t tile_points = 200000;
  double radius = 100.0;
  int updates = 20;
  double resolution = 2.0;
  std::uint64_t seed = 7;
  unsigned map_threads = 4;
};

void run_tile_bench(const TileBench& b) {
  constexpr double kTile = 20.0;
  // A world whose tiles hold tile_points on average: 12 x 12 tiles.
  const auto t0 = std::chrono::steady_clock::now();
  sim::WorldSettings w;
  w.seed = b.seed;
  w.size = 12 * kTile;
  sim::MapSettings ms;
  ms.target_points = b.tile_points * 144;
  const PointCloud cloud = sim::sample_map(sim::World(sim::generate_scene(w)), ms);
  std::map<std::string, PointCloud> tiles;
  for (const Eigen::Vector3f& p : cloud.points) {
    const auto i = static_cast<long>(std::floor(p.x() / kTile)), j = static_cast<long>(std::floor(p.y() / kTile));
    const double cx = (static_cast<double>(i) + 0.5) * kTile, cy = (static_cast<double>(j) + 0.5) * kTile;
    if (std::hypot(cx, cy) > b.radius) continue;
    tiles[std::to_string(i) + "_" + std::to_string(j)].points.push_back(p);
  }
  // The scan: 20k map points within 40 m of the centre, aligned from where they are.
  PointCloud scan;
  std::mt19937 rng(11);
  std::vector<Eigen::Vector3f> near;
  for (const Eigen::Vector3f& p : cloud.points) {
    if (p.head<2>().norm() < 40.0f) near.push_back(p);
  }
  std::shuffle(near.begin(), near.end(), rng);
  near.resize(std::min<std::size_t>(near.size(), 20000));
  scan.points = near;
  std::size_t loaded_points = 0, largest = 0;
  for (const auto& [id, t] : tiles) {
    loaded_points += t.size();
    largest = std::max(largest, t.size());
  }
  // The updated tiles, in id order (again from the first after the last), each removed and added again.
  std::vector<std::string> order;
  for (const auto& [id, t] : tiles) order.push_back(id);
  std::printf("\nlive tile updates: a %.0f m simulator world of %zu points (made in %.1f s) in %.0f m tiles; the %zu "
              "tiles within %.0f m loaded (%zu points, largest tile %zu, mean %zu); a %zu-point scan aligned on CUDA "
              "without pause on another thread; %d updates, each one tile removed and added again (median, max); the tiled "
              "map on %u threads\n\n",
              w.size, cloud.size(), ms_since(t0) / 1000.0, kTile, tiles.size(), b.radius, loaded_points, largest,
              loaded_points / std::max<std::size_t>(1, tiles.size()), scan.size(), b.updates, b.map_threads);
  std::printf("| %-26s | %7s | %11s | %15s | %19s | %19s | %15s | %23s | %28s |\n", "update", "voxels",
              "tile points", "voxelize ms", "join / publish host", "stage / publish dev", "add in all ms",
              "align ms, quiet (p50/max)", "align ms, updating (p50/p99/max)");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(28, '-').c_str(), std::string(9, '-').c_str(),
              std::string(13, '-').c_str(), std::string(17, '-').c_str(), std::string(21, '-').c_str(),
              std::string(21, '-').c_str(), std::string(17, '-').c_str(), std::string(25, '-').c_str(),
              std::string(30, '-').c_str());
  // Three ways to update: tiles voxelized on the CPU or the GPU, then joined on the host
  // into a new VoxelMap and staged on the aligner (a second set of device buffers, the
  // whole map uploaded) and swapped in by the aligning thread; or voxelized on the GPU and
  // published to the tiled map's device twin (only the changed voxels sent up, the lookup
  // rebuilt on the device), which the aligning thread follows.
  struct Mode {
    const char* name;
    Backend voxelize;
    bool publish;
  };
  for (const Mode mode : {Mode{"CPU voxelize, join, stage", Backend::Cpu, false},
                          Mode{"GPU voxelize, join, stage", Backend::Cuda, false},
                          Mode{"GPU voxelize, device publish", Backend::Cuda, true}}) {
    AlignSettings s = autoware_preset();
    s.resolution = b.resolution;
    ExecutionOptions on_cuda;
    on_cuda.backend = Backend::Cuda;
    VoxelMapOptions o = voxel_map_options(s, on_cuda);
    o.backend = mode.voxelize;
    o.threads = b.map_threads;
    auto map = std::make_shared<TiledVoxelMap>(o);
    for (const auto& [id, t] : tiles) map->add_tile(id, t);
    Aligner aligner(s, on_cuda);
    if (mode.publish) {
      map->publish();
      aligner.set_target(map);
    } else {
      aligner.set_target(map->map());
      aligner.stage_target(map->map());  // the staging buffers, allocated before the clock runs
    }
    for (int i = 0; i < 5; ++i) (void)aligner.align(scan, Eigen::Matrix4d::Identity());
    // The alignment thread: aligns without pause, swapping in a staged map between two
    // alignments when one is handed over (a followed tiled map swaps itself in); its
    // latencies are kept with the phase they fell in.
    std::mutex mutex;
    std::shared_ptr<const VoxelMap> handed;
    std::atomic<bool> stop{false}, updating{false};
    std::atomic<int> swaps{0};
    std::atomic<int> aligned{0};
    std::vector<double> quiet, busy;
    std::thread worker([&] {
      while (!stop.load()) {
        std::shared_ptr<const VoxelMap> next;
        {
          std::lock_guard<std::mutex> lock(mutex);
          next = std::move(handed);
          handed.reset();
        }
        const bool during = updating.load();
        const auto a0 = std::chrono::steady_clock::now();
        if (next) aligner.set_target(next);
        (void)aligner.align(scan, Eigen::Matrix4d::Identity());
        (during ? busy : quiet).push_back(ms_since(a0));
        aligned.fetch_add(1);
        if (next) swaps.fetch_add(1);
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<double> voxelize_ms, join_ms, stage_ms, total_ms;
    std::size_t voxels = 0, tile_points = 0;
    updating.store(true);
    for (int u = 0; u < b.updates; ++u) {
      const std::string& id = order[static_cast<std::size_t>(u) % order.size()];
      map->remove_tiles({id});
      auto u0 = std::chrono::steady_clock::now();
      map->add_tile(id, tiles.at(id));
      voxelize_ms.push_back(ms_since(u0));
      if (mode.publish) {
        const TiledVoxelMapPublish p = map->publish();
        join_ms.push_back(p.host_ms);
        stage_ms.push_back(p.device_ms);
        total_ms.push_back(ms_since(u0));
        voxels = p.voxels;
        // Handed over by publishing: the aligning thread takes it at the start of its next
        // alignment; the one after that has certainly started after the publish.
        const int after = aligned.load() + 2;
        while (aligned.load() < after) std::this_thread::yield();
      } else {
        u0 = std::chrono::steady_clock::now();
        const auto joined = map->map();
        join_ms.push_back(ms_since(u0));
        u0 = std::chrono::steady_clock::now();
        aligner.stage_target(joined);
        stage_ms.push_back(ms_since(u0));
        total_ms.push_back(voxelize_ms.back() + join_ms.back() + stage_ms.back());
        voxels = joined->size();
        const int before = swaps.load();
        {
          std::lock_guard<std::mutex> lock(mutex);
          handed = joined;
        }
        while (swaps.load() == before) std::this_thread::yield();
      }
      tile_points += tiles.at(id).size();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    updating.store(false);
    stop.store(true);
    worker.join();
    const auto pair = [](const std::vector<double>& v) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.2f / %.2f", percentile(v, 0.5), percentile(v, 1.0));
      return std::string(buf);
    };
    char busy_text[64];
    std::snprintf(busy_text, sizeof busy_text, "%.2f / %.2f / %.2f", percentile(busy, 0.5), percentile(busy, 0.99),
                  percentile(busy, 1.0));
    std::printf("| %-26s | %7zu | %11zu | %15s | %19s | %19s | %15s | %25s | %28s |\n", mode.name, voxels,
                tile_points / static_cast<std::size_t>(b.updates), pair(voxelize_ms).c_str(), pair(join_ms).c_str(),
                pair(stage_ms).c_str(), pair(total_ms).c_str(), pair(quiet).c_str(), busy_text);
  }
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
  TileBench tile_bench;
  bool no_tiles = false;
  app.add_option("--tile-points", tile_bench.tile_points, "live tile updates: mean points per 20 m tile")
      ->check(CLI::Range(1000, 5000000));
  app.add_option("--radius", tile_bench.radius, "live tile updates: tiles loaded within this radius (m)")
      ->check(CLI::Range(10.0, 120.0));
  app.add_option("--updates", tile_bench.updates, "live tile updates: tiles removed and added again")
      ->check(CLI::Range(1, 10000));
  app.add_option("--map-threads", tile_bench.map_threads,
                 "live tile updates: threads of the tiled map (its CPU voxelize and its join; 0: all)")
      ->check(CLI::Range(0, 1024));
  app.add_flag("--no-tiles", no_tiles, "skip the live tile updates");
  CLI11_PARSE(app, argc, argv);
  tile_bench.resolution = resolution;
  tile_bench.seed = seed;
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
        print_row(("ndtcu GPU, " + name + " (read back to a host map)").c_str(),
                  time_runs(repeats, [&] { return VoxelMap::build(cloud, o).size(); }));
        // What a CUDA aligner does with a target cloud: the GPU build, read back for its
        // host map, and its device map taken from the build where it lies (no upload).
        AlignSettings s = autoware_preset();
        s.resolution = resolution;
        s.covariance = mode;
        ExecutionOptions on_cuda;
        on_cuda.backend = Backend::Cuda;
        Aligner aligner(s, on_cuda);
        print_row(("ndtcu GPU, " + name + " (+ CUDA aligner's device map)").c_str(), time_runs(repeats, [&] {
                    aligner.set_target(cloud);
                    return aligner.target()->size();
                  }));
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
    if (!no_tiles) {
      if (gpu) {
        run_tile_bench(tile_bench);
      } else {
        std::printf("\n(no live tile updates: they align on CUDA)\n");
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "ndtcu_map_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
