// The voxel map built on the GPU against the CPU build: the same voxels, in the same
// order, with the same bits (both sum a cell's points in input order with the unfused
// arithmetic of kernels/voxel_statistics.hpp), on every map of ../shared/data, the sample
// map and simulator maps (one at UTM coordinates), in both covariance conventions; and
// the same errors.
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/voxel_map.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = fs::path(NDTCU_SOURCE_DIR) / "data" / "sample";

#define NDTCU_REQUIRE_GPU()                                                                 \
  do {                                                                                      \
    if (!cuda_compiled()) NDTCU_SKIP("built without CUDA");                                 \
    if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason()); \
  } while (0)

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Every array of the two maps equal, bit for bit.
void check_same(const VoxelMap& cpu, const VoxelMap& gpu) {
  CHECK_FALSE(cpu.built_on_gpu());
  CHECK(gpu.built_on_gpu());
  REQUIRE(cpu.size() == gpu.size());
  CHECK(cpu.stats().occupied_cells == gpu.stats().occupied_cells);
  CHECK(cpu.stats().sparse_cells == gpu.stats().sparse_cells);
  CHECK(cpu.stats().singular_cells == gpu.stats().singular_cells);
  CHECK(cpu.cells() == gpu.cells());
  CHECK(cpu.point_counts() == gpu.point_counts());
  for (int a = 0; a < 3; ++a) {
    CHECK(cpu.mean(a) == gpu.mean(a));
    CHECK(cpu.centroid(a) == gpu.centroid(a));
  }
  for (int e = 0; e < 6; ++e) {
    CHECK(cpu.inverse_covariance(e) == gpu.inverse_covariance(e));
    CHECK(cpu.covariance(e) == gpu.covariance(e));
  }
  CHECK(cpu.table_keys() == gpu.table_keys());
  CHECK(cpu.table_values() == gpu.table_values());
  CHECK(cpu.origin() == gpu.origin());
}

void compare_builds(const std::string& name, const PointCloud& cloud) {
  for (const CovarianceMode mode : {CovarianceMode::Autoware, CovarianceMode::Pcl}) {
    for (const double resolution : {1.0, 2.0}) {
      CAPTURE(name, to_string(mode), resolution);
      VoxelMapOptions o;
      o.resolution = resolution;
      o.covariance = mode;
      o.threads = 4;
      auto t0 = std::chrono::steady_clock::now();
      const VoxelMap cpu = VoxelMap::build(cloud, o);
      const double cpu_ms = ms_since(t0);
      o.backend = Backend::Cuda;
      t0 = std::chrono::steady_clock::now();
      const VoxelMap gpu = VoxelMap::build(cloud, o);
      const double gpu_ms = ms_since(t0);
      std::printf("voxel build %-28s %-8s res %.0f: %9zu points, %7zu voxels (%zu sparse, %zu singular): CPU (4 "
                  "threads) %.1f ms, GPU %.1f ms\n",
                  name.c_str(), to_string(mode), resolution, cloud.size(), gpu.size(), gpu.stats().sparse_cells,
                  gpu.stats().singular_cells, cpu_ms, gpu_ms);
      check_same(cpu, gpu);
    }
  }
}

PointCloud simulator_map(const Eigen::Vector3d& origin, double voxel, std::uint64_t seed) {
  sim::WorldSettings w;
  w.seed = seed;
  w.size = 300.0;
  w.origin = origin;
  sim::MapSettings m;
  m.voxel = voxel;
  return sim::sample_map(sim::World(sim::generate_scene(w)), m);
}

}  // namespace

TEST_CASE("the GPU voxel map build equals the CPU build bit for bit", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  compare_builds("sample map", read_point_cloud((kSample / "map.pcd").string()));
  compare_builds("simulator 300 m", simulator_map(Eigen::Vector3d::Zero(), 0.2, 5));
  compare_builds("simulator 300 m at UTM", simulator_map(Eigen::Vector3d(680000.0, 3900000.0, 40.0), 0.1, 6));
  // A dense one: every sample kept (about 100 per square metre).
  compare_builds("simulator 300 m, dense", simulator_map(Eigen::Vector3d::Zero(), 0.0, 7));
  const auto data = test::data_dir();
  if (!data) {
    WARN("real data folder not found (set NDTCU_DATA_DIR): only the sample and simulator maps compared");
    return;
  }
  for (const char* file : {"pairs/hdl32/target_251370668.pcd", "pairs/room_scan/room_scan1.pcd",
                           "balm_os0/map_even_frames_0-58_voxel0.1.pcd", "kitti00/velodyne/000000.bin"}) {
    const fs::path path = *data / file;
    if (!fs::exists(path)) {
      WARN(std::string("missing ") + path.string());
      continue;
    }
    compare_builds(file, read_point_cloud(path.string()));
  }
}

TEST_CASE("the GPU voxel map build: edge cases and errors as on the CPU", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  VoxelMapOptions o;
  o.backend = Backend::Cuda;
  // Empty and tiny clouds: no voxel.
  const VoxelMap empty = VoxelMap::build(PointCloud{}, o);
  CHECK(empty.empty());
  CHECK(empty.stats().occupied_cells == 0);
  PointCloud few;
  for (int i = 0; i < 5; ++i) few.points.emplace_back(0.1f * static_cast<float>(i), 0.2f, 0.3f);
  const VoxelMap sparse = VoxelMap::build(few, o);
  CHECK(sparse.empty());
  CHECK(sparse.stats().sparse_cells == 1);
  // Collinear points: a singular covariance, dropped as on the CPU.
  PointCloud line;
  for (int i = 0; i < 10; ++i) line.points.emplace_back(0.1f * static_cast<float>(i), 0.5f, 0.5f);
  const VoxelMap singular = VoxelMap::build(line, o);
  VoxelMapOptions cpu_o = o;
  cpu_o.backend = Backend::Cpu;
  check_same(VoxelMap::build(line, cpu_o), singular);
  // A point too far from the origin: the CPU build's error, naming the same point.
  PointCloud far = few;
  far.points.emplace_back(5.0e6f, 0.0f, 0.0f);
  far.points.emplace_back(6.0e6f, 0.0f, 0.0f);
  CHECK_THROWS_WITH(VoxelMap::build(far, o), Catch::Contains("point 5 lies more than 2^20 voxels"));
  CHECK_THROWS_WITH(VoxelMap::build(far, cpu_o), Catch::Contains("point 5 lies more than 2^20 voxels"));
  // An aligner on the GPU map aligns as on the CPU map, bit for bit.
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  const PointCloud scan = voxel_downsample(read_point_cloud((kSample / "scans/000003.pcd").string()), 1.0);
  AlignSettings s = autoware_preset();
  s.backend = Backend::Cpu;
  Aligner a(s), b(s);
  VoxelMapOptions mo;
  mo.resolution = s.resolution;
  mo.covariance = s.covariance;
  a.set_target(std::make_shared<const VoxelMap>(VoxelMap::build(map, mo)));
  mo.backend = Backend::Cuda;
  b.set_target(std::make_shared<const VoxelMap>(VoxelMap::build(map, mo)));
  const AlignResult ra = a.align(scan), rb = b.align(scan);
  CHECK(ra.transform == rb.transform);
  CHECK(ra.score == rb.score);
}
