// The voxel map built on the GPU against the CPU build: the same voxels, in the same
// order, with the same bits (both sum a cell's points in input order with the unfused
// arithmetic of kernels/voxel_statistics.hpp), on every map of ../shared/data, the sample
// map and simulator maps (one at UTM coordinates), in both covariance conventions; and
// the same errors.
#include "../ndt/batch_check.hpp"
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/tiled_voxel_map.hpp>
#include <ndtcu/voxel_map.hpp>

#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_voxel_build.hpp"
#include "map/voxel_cells.hpp"
#include "map/voxel_map_access.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// How many entries of two equally long arrays differ (Catch would print whole arrays of
// hundreds of thousands of voxels); the first difference is printed.
template <typename T>
std::size_t differences(const char* what, const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) {
    std::printf("  %s: %zu entries on the CPU, %zu on the GPU\n", what, a.size(), b.size());
    return std::max(a.size(), b.size());
  }
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (n++ == 0) std::printf("  %s: first difference at %zu\n", what, i);
  }
  return n;
}

std::size_t cell_differences(const VoxelMap& a, const VoxelMap& b) {
  std::size_t n = 0;
  for (std::size_t v = 0; v < std::min(a.size(), b.size()); ++v) {
    if (a.cells()[v] == b.cells()[v]) continue;
    if (n++ == 0) {
      std::printf("  cells: first difference at voxel %zu: CPU (%d %d %d) %u points, GPU (%d %d %d) %u points\n", v,
                  a.cells()[v][0], a.cells()[v][1], a.cells()[v][2], a.point_counts()[v], b.cells()[v][0],
                  b.cells()[v][1], b.cells()[v][2], b.point_counts()[v]);
    }
  }
  return n;
}

// Every array of the two maps equal, bit for bit.
void check_same(const VoxelMap& cpu, const VoxelMap& gpu) {
  CHECK_FALSE(cpu.built_on_gpu());
  CHECK(gpu.built_on_gpu());
  REQUIRE(cpu.size() == gpu.size());
  CHECK(cpu.stats().occupied_cells == gpu.stats().occupied_cells);
  CHECK(cpu.stats().sparse_cells == gpu.stats().sparse_cells);
  CHECK(cpu.stats().singular_cells == gpu.stats().singular_cells);
  CHECK(cell_differences(cpu, gpu) == 0);
  CHECK(differences("counts", cpu.point_counts(), gpu.point_counts()) == 0);
  for (int a = 0; a < 3; ++a) {
    CHECK(differences("mean", cpu.mean(a), gpu.mean(a)) == 0);
    CHECK(differences("centroid", cpu.centroid(a), gpu.centroid(a)) == 0);
  }
  for (int e = 0; e < 6; ++e) {
    CHECK(differences("inverse covariance", cpu.inverse_covariance(e), gpu.inverse_covariance(e)) == 0);
    CHECK(differences("covariance", cpu.covariance(e), gpu.covariance(e)) == 0);
  }
  CHECK(differences("table keys", detail::voxel_hash_table(cpu).keys, detail::voxel_hash_table(gpu).keys) == 0);
  CHECK(differences("table values", detail::voxel_hash_table(cpu).values, detail::voxel_hash_table(gpu).values) == 0);
  CHECK(cpu.origin() == gpu.origin());
}

void compare_builds(const std::string& name, const PointCloud& cloud) {
  for (const CovarianceMode mode : {CovarianceMode::Autoware, CovarianceMode::Pcl}) {
    // Under a sanitizer one resolution, and no second build: the same kernels.
    for (const double resolution : test::under_sanitizer() ? std::vector<double>{2.0} : std::vector<double>{1.0, 2.0}) {
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
      // And the same again: nothing of a GPU build depends on scheduling.
      if (test::under_sanitizer()) continue;
      const VoxelMap again = VoxelMap::build(cloud, o);
      CHECK(cell_differences(gpu, again) == 0);
      for (int a = 0; a < 3; ++a) CHECK(differences("mean, second GPU build", gpu.mean(a), again.mean(a)) == 0);
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

// `cloud` cut into squares of `size` metres (ids "i_j" by lower corner), origin kept.
std::map<std::string, PointCloud> cut_into_tiles(const PointCloud& cloud, double size) {
  std::map<std::string, PointCloud> tiles;
  for (const Eigen::Vector3f& p : cloud.points) {
    const auto i = static_cast<long>(std::floor(p.x() / size)), j = static_cast<long>(std::floor(p.y() / size));
    PointCloud& t = tiles[std::to_string(i) + "_" + std::to_string(j)];
    t.origin = cloud.origin;
    t.points.push_back(p);
  }
  return tiles;
}

// The tiled map of `tiles` by `o`, added in id order or in reverse.
std::shared_ptr<const VoxelMap> tiled_map(const std::map<std::string, PointCloud>& tiles, const VoxelMapOptions& o,
                                          const Eigen::Vector3d& origin, bool reverse) {
  TiledVoxelMap m(o, origin);
  if (reverse) {
    for (auto it = tiles.rbegin(); it != tiles.rend(); ++it) m.add_tile(it->first, it->second);
  } else {
    for (const auto& [id, t] : tiles) m.add_tile(id, t);
  }
  return m.map();
}

}  // namespace

TEST_CASE("tiles voxelized on the GPU give the CPU tiles' map bit for bit", "[gpu][tiles]") {
  NDTCU_REQUIRE_GPU();
  // 10 m tiles at 2 m (no cell spans two tiles) and 7 m tiles (the borders cut cells, whose
  // sums from two to four tiles are joined: the GPU's sums must be the CPU's bits too).
  PointCloud utm = simulator_map(Eigen::Vector3d(680000.0, 3900000.0, 40.0), 0.2, 6);
  if (test::under_sanitizer()) {
    // The middle 60 m square: tens of tiles instead of thousands (every launch is slow
    // under the tools), the same borders and joins.
    PointCloud middle;
    middle.origin = utm.origin;
    for (const Eigen::Vector3f& p : utm.points) {
      if (std::abs(p.x()) < 30.0f && std::abs(p.y()) < 30.0f) middle.points.push_back(p);
    }
    utm = std::move(middle);
  }
  for (const double size : {10.0, 7.0}) {
    const auto tiles = cut_into_tiles(utm, size);
    for (const CovarianceMode mode : {CovarianceMode::Autoware, CovarianceMode::Pcl}) {
      CAPTURE(size, to_string(mode));
      VoxelMapOptions o;
      o.resolution = 2.0;
      o.covariance = mode;
      o.threads = 4;
      o.backend = Backend::Cpu;
      const auto cpu = tiled_map(tiles, o, utm.origin, false);
      o.backend = Backend::Cuda;
      const auto gpu = tiled_map(tiles, o, utm.origin, true);
      std::printf("tiles on the GPU: %zu tiles of %.0f m, %s: %zu voxels (%zu singular)\n", tiles.size(), size,
                  to_string(mode), gpu->size(), gpu->stats().singular_cells);
      check_same(*cpu, *gpu);
    }
  }
  // Adds and removes in another order on the GPU give the map of the final set.
  const auto tiles = cut_into_tiles(utm, 7.0);
  VoxelMapOptions o;
  o.resolution = 2.0;
  o.backend = Backend::Cuda;
  TiledVoxelMap walked(o, utm.origin);
  std::map<std::string, PointCloud> kept;
  std::size_t k = 0;
  for (const auto& [id, t] : tiles) {
    walked.add_tile(id, t);
    if (k++ % 3 == 0) {
      walked.remove_tiles({id});
    } else {
      kept.emplace(id, t);
    }
  }
  const auto fresh = tiled_map(kept, o, utm.origin, true);
  const auto walked_map = walked.map();
  REQUIRE(walked_map->size() == fresh->size());
  CHECK(cell_differences(*fresh, *walked_map) == 0);
  for (int e = 0; e < 6; ++e) {
    CHECK(differences("inverse covariance", fresh->inverse_covariance(e), walked_map->inverse_covariance(e)) == 0);
  }
}

TEST_CASE("the GPU tile voxelizer allocates nothing once sized, and its errors name the tile", "[gpu][tiles]") {
  NDTCU_REQUIRE_GPU();
  const PointCloud map = simulator_map(Eigen::Vector3d::Zero(), 0.2, 5);
  auto tiles = cut_into_tiles(map, 20.0);
  VoxelMapOptions o;
  o.resolution = 2.0;
  o.backend = Backend::Cuda;
  TiledVoxelMap m(o);
  // The largest tile first sizes the buffers; every other tile then reuses them (no
  // cudaMalloc, and no cudaFree: a free synchronizes the whole device).
  const auto largest = std::max_element(tiles.begin(), tiles.end(), [](const auto& a, const auto& b) {
    return a.second.size() < b.second.size();
  });
  m.add_tile(largest->first, largest->second);
  const std::uint64_t allocations = detail::device_allocations();
  std::size_t added = 1;
  for (const auto& [id, t] : tiles) {
    if (id == largest->first) continue;
    m.add_tile(id, t);
    ++added;
  }
  CHECK(detail::device_allocations() == allocations);
  CHECK(m.stats().tiles == added);
  // A point beyond the lattice's reach: an Error naming the tile, the map unchanged.
  const std::size_t voxels = m.map()->size();
  PointCloud far;
  far.points.assign(10, Eigen::Vector3f(1.0f, 1.0f, 1.0f));
  far.points[4] = Eigen::Vector3f(5.0e6f, 0.0f, 0.0f);
  CHECK_THROWS_WITH(m.add_tile("far", far), Catch::Matchers::Contains("tile 'far'") &&
                                                Catch::Matchers::Contains("point 4"));
  CHECK_FALSE(m.contains("far"));
  CHECK(m.map()->size() == voxels);
  // And the next tile voxelizes as before.
  PointCloud one;
  one.points.assign(10, Eigen::Vector3f(1001.0f, 1001.0f, 1.0f));
  for (std::size_t i = 0; i < one.size(); ++i) one.points[i].z() += 0.1f * static_cast<float>(i);
  m.add_tile("one", one);
  CHECK(m.contains("one"));
}

TEST_CASE("the GPU voxel map build equals the CPU build bit for bit", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  compare_builds("sample map", read_point_cloud((kSample / "map.pcd").string()));
  compare_builds("simulator 300 m", simulator_map(Eigen::Vector3d::Zero(), 0.2, 5));
  compare_builds("simulator 300 m at UTM", simulator_map(Eigen::Vector3d(680000.0, 3900000.0, 40.0), 0.2, 6));
  // A dense one: every sample kept (about 100 per square metre); too slow under a sanitizer.
  if (!test::under_sanitizer()) compare_builds("simulator 300 m, dense", simulator_map(Eigen::Vector3d::Zero(), 0.0, 7));
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
  // Points spread wider than the lattice holds at this resolution: the CPU build's error.
  PointCloud far = few;
  far.points.emplace_back(5.0e6f, 0.0f, 0.0f);
  far.points.emplace_back(6.0e6f, 0.0f, 0.0f);
  CHECK_THROWS_WITH(VoxelMap::build(far, o), Catch::Contains("resolution 2 m is too small for this cloud"));
  CHECK_THROWS_WITH(VoxelMap::build(far, cpu_o), Catch::Contains("resolution 2 m is too small for this cloud"));
  // An aligner on the GPU map aligns as on the CPU map, bit for bit.
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  const PointCloud scan = voxel_downsample(read_point_cloud((kSample / "scans/000003.pcd").string()), 1.0);
  AlignSettings s = autoware_preset();
  ExecutionOptions e;
  e.backend = Backend::Cpu;
  Aligner a(s, e), b(s, e);
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

// A CUDA aligner's map taken from its GPU build where the voxels lie
// (CudaBackend::set_map_from_device: the arrays copied on the device, the hash table and
// the dense index built there) against the same map uploaded from the host: every lookup
// finds the same voxel, so every evaluation has the same bits, in both lookups and every
// search mode; and no byte of the map goes up.
TEST_CASE("a CUDA map taken from the device build evaluates as the uploaded map and sends nothing up", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  std::vector<std::pair<std::string, PointCloud>> maps = {
      {"sample map", read_point_cloud((kSample / "map.pcd").string())},
      {"simulator 300 m at UTM", simulator_map(Eigen::Vector3d(680000.0, 3900000.0, 40.0), 0.2, 6)},
  };
  PointCloud few;  // one sparse cell: no voxel
  for (int i = 0; i < 5; ++i) few.points.emplace_back(0.1f * static_cast<float>(i), 0.2f, 0.3f);
  maps.emplace_back("no voxel", few);
  if (const auto data = test::data_dir(); data && fs::exists(*data / "pairs/hdl32/target_251370668.pcd")) {
    maps.emplace_back("hdl32 target", read_point_cloud((*data / "pairs/hdl32/target_251370668.pcd").string()));
  }
  const Pose6 poses[] = {Pose6::Zero(), (Pose6() << 0.3, -0.2, 0.1, 0.01, 0.02, -0.03).finished(),
                         (Pose6() << 1.0, 1.5, -0.2, 0.0, 0.0, 0.5).finished()};
  for (const auto& [name, cloud] : maps) {
    // The map's own points, every 5th, and the same moved by 0.7 of a voxel: the searches
    // meet every voxel and the empty cells around them.
    PointCloud source;
    for (std::size_t i = 0; i < cloud.size(); i += 5) {
      source.points.push_back(cloud.points[i]);
      source.points.push_back(cloud.points[i] + Eigen::Vector3f(1.4f, -1.4f, 0.7f));
    }
    for (const detail::VoxelLookup lookup : {detail::VoxelLookup::Hash, detail::VoxelLookup::Dense}) {
      CAPTURE(name, lookup == detail::VoxelLookup::Hash ? "hash" : "dense");
      VoxelMapOptions o;
      o.backend = Backend::Cuda;
      detail::CudaVoxelizer voxelizer(false);
      detail::DeviceVoxelCells cells;
      const VoxelMap map = detail::build_voxel_map(cloud, o, &voxelizer, &cells);
      CHECK(map.built_on_gpu());
      REQUIRE(cells.voxels == map.size());
      detail::CudaBackend uploaded, from_device;
      uploaded.set_map(map, lookup);
      from_device.set_map_from_device(map, cells, lookup);
      CHECK(from_device.telemetry().setup_bytes_up == 0);
      if (!map.empty()) CHECK(uploaded.telemetry().setup_bytes_up >= map.size() * 9 * sizeof(double));
      CHECK(from_device.lookup() == uploaded.lookup());
      CHECK(from_device.lookup() == (map.empty() ? detail::VoxelLookup::Hash : lookup));
      // Another build in the same voxelizer: nothing of the backend's map points into it.
      (void)voxelizer.usable_cells(cloud, 1.0f, o);
      uploaded.set_source(source);
      from_device.set_source(source);
      int compared = 0, nonzero = 0;
      for (const SearchMethod search :
           {SearchMethod::Radius, SearchMethod::Direct27, SearchMethod::Direct7, SearchMethod::Direct1}) {
        uploaded.configure(search, 0.55);
        from_device.configure(search, 0.55);
        for (const Pose6& pose : poses) {
          const math::DerivativeSums a = uploaded.evaluate(0, pose, true), b = from_device.evaluate(0, pose, true);
          CHECK(std::memcmp(&a, &b, sizeof(a)) == 0);
          ++compared;
          nonzero += a.v[0] != 0.0;
        }
      }
      CHECK(compared == 12);
      if (!map.empty()) CHECK(nonzero == 12);
    }
  }
  // Through the Aligner: a CUDA aligner given points builds its map this way and aligns
  // with the bits of one given the CPU-built map (uploaded).
  const PointCloud map = read_point_cloud((kSample / "map.pcd").string());
  const PointCloud scan = voxel_downsample(read_point_cloud((kSample / "scans/000003.pcd").string()), 1.0);
  AlignSettings s = autoware_preset();
  ExecutionOptions e;
  e.backend = Backend::Cuda;
  Aligner built_here(s, e), uploaded(s, e);
  built_here.set_target(map);
  VoxelMapOptions mo = voxel_map_options(s, e);
  mo.backend = Backend::Cpu;
  uploaded.set_target(std::make_shared<const VoxelMap>(VoxelMap::build(map, mo)));
  CHECK(built_here.target()->built_on_gpu());
  const Eigen::Matrix4d guess = pose_to_matrix((Pose6() << -24.06, 16.31, 1.41, -0.024, 0.036, -1.66).finished());
  const AlignResult a = built_here.align(scan, guess), b = uploaded.align(scan, guess);
  CHECK(a.iterations > 1);
  test::check_same_bits(a, b);
}
