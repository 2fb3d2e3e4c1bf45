// The tiled voxel map: all tiles give the whole map's voxels (bit for bit when no cell
// spans two tiles, within summation rounding where cells are shared), any order of adds
// and removes gives the map of the final set bit for bit, and bad ids are errors that
// leave the map as it was.
#include "../support/test_support.hpp"
#include "map/voxel_map_access.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/tiled_voxel_map.hpp>
#include <ndtcu/voxel_map.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

// The cloud split into squares of `size` m (world x-y, corners at multiples of the size),
// each keeping the cloud's origin and its points' order; ids "X_Y".
std::map<std::string, PointCloud> split(const PointCloud& cloud, double size) {
  std::map<std::string, PointCloud> tiles;
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    const Eigen::Vector3d w = cloud.world(i);
    const std::string id = fmt::format("{}_{}", std::floor(w.x() / size) * size, std::floor(w.y() / size) * size);
    PointCloud& t = tiles[id];
    t.origin = cloud.origin;
    t.points.push_back(cloud.points[i]);
  }
  return tiles;
}

VoxelMapOptions options(CovarianceMode mode) {
  VoxelMapOptions o;
  o.resolution = 2.0;
  o.covariance = mode;
  o.threads = 2;
  return o;
}

// Every array of two maps, bit for bit.
void require_same_bits(const VoxelMap& a, const VoxelMap& b) {
  REQUIRE(a.size() == b.size());
  CHECK(a.cells() == b.cells());
  CHECK(a.point_counts() == b.point_counts());
  for (int k = 0; k < 3; ++k) {
    CHECK(a.mean(k) == b.mean(k));
    CHECK(a.centroid(k) == b.centroid(k));
  }
  for (int e = 0; e < 6; ++e) {
    CHECK(a.inverse_covariance(e) == b.inverse_covariance(e));
    CHECK(a.covariance(e) == b.covariance(e));
  }
  CHECK(detail::voxel_hash_table(a).keys == detail::voxel_hash_table(b).keys);
  CHECK(detail::voxel_hash_table(a).values == detail::voxel_hash_table(b).values);
  CHECK(a.origin() == b.origin());
  CHECK(a.stats().points == b.stats().points);
  CHECK(a.stats().occupied_cells == b.stats().occupied_cells);
  CHECK(a.stats().sparse_cells == b.stats().sparse_cells);
  CHECK(a.stats().singular_cells == b.stats().singular_cells);
}

TiledVoxelMap load(const std::map<std::string, PointCloud>& tiles, const VoxelMapOptions& o, const Eigen::Vector3d& origin) {
  TiledVoxelMap m(o, origin);
  std::vector<std::pair<std::string, const PointCloud*>> all;
  for (const auto& [id, cloud] : tiles) all.emplace_back(id, &cloud);
  m.add_tiles(all);
  return m;
}

}  // namespace

TEST_CASE("a tiled map of 20 m tiles at 2 m has the whole map's voxels, bit for bit", "[unit][tiles]") {
  const PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  for (const CovarianceMode mode : {CovarianceMode::Pcl, CovarianceMode::Autoware}) {
    CAPTURE(to_string(mode));
    const auto tiles = split(cloud, 20.0);
    REQUIRE(tiles.size() > 4);
    TiledVoxelMap tiled = load(tiles, options(mode), cloud.origin);
    const VoxelMap whole = VoxelMap::build(cloud, options(mode));
    REQUIRE(whole.size() > 1000);
    require_same_bits(*tiled.map(), whole);
    const TiledVoxelMapStats s = tiled.stats();
    CHECK(s.tiles == tiles.size());
    CHECK(s.points == cloud.size());
    CHECK(s.cells == whole.stats().occupied_cells);  // no cell counted by two tiles
    CHECK(s.memory_bytes > 0);
  }
}

TEST_CASE("tiles that split cells (7 m at 2 m) join the shared cells: the whole map's voxels within rounding",
          "[unit][tiles]") {
  const PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  const VoxelMapOptions o = options(CovarianceMode::Autoware);
  const auto tiles = split(cloud, 7.0);
  TiledVoxelMap tiled = load(tiles, o, cloud.origin);
  const auto map = tiled.map();
  const VoxelMap whole = VoxelMap::build(cloud, o);
  // Cells counted by more than one tile: the borders every 7 m cut through cells.
  REQUIRE(tiled.stats().cells > whole.stats().occupied_cells + 100);
  REQUIRE(map->size() == whole.size());
  CHECK(map->cells() == whole.cells());
  CHECK(map->point_counts() == whole.point_counts());
  CHECK(map->stats().occupied_cells == whole.stats().occupied_cells);
  CHECK(map->stats().sparse_cells == whole.stats().sparse_cells);
  std::size_t differing = 0;
  double worst_mean = 0.0, worst_icov = 0.0;
  for (std::size_t v = 0; v < whole.size(); ++v) {
    bool same = true;
    for (int k = 0; k < 3; ++k) {
      worst_mean = std::max(worst_mean, std::abs(map->mean(k)[v] - whole.mean(k)[v]));
      same = same && map->mean(k)[v] == whole.mean(k)[v];
    }
    const double scale = whole.inverse_covariance_matrix(v).norm();
    worst_icov = std::max(worst_icov, (map->inverse_covariance_matrix(v) - whole.inverse_covariance_matrix(v)).norm() / scale);
    differing += !same;
  }
  // Partial sums added instead of points one by one: the means may differ in the last bits
  // (values of tens of metres: 1e-12 m), the inverse covariances by the conditioning of
  // a voxel's covariance times that (eigenvalues down to 1% of the largest). Sums of a few
  // float coordinates and their products are mostly exact in double, so most shared cells
  // come out with the same bits.
  INFO(differing << " of " << whole.size() << " voxels differ in their bits");
  CHECK(worst_mean < 1e-11);
  CHECK(worst_icov < 1e-7);
}

TEST_CASE("any order of adds and removes gives the map of the final tiles, bit for bit", "[unit][tiles]") {
  const PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  const VoxelMapOptions o = options(CovarianceMode::Autoware);
  for (const double size : {20.0, 7.0}) {
    CAPTURE(size);
    const auto tiles = split(cloud, size);
    std::vector<std::string> ids;
    for (const auto& entry : tiles) ids.push_back(entry.first);
    std::mt19937 rng(static_cast<unsigned>(size));
    for (int trial = 0; trial < 3; ++trial) {
      CAPTURE(trial);
      // A random walk of adds and removes, then the final set built fresh.
      TiledVoxelMap walked(o, cloud.origin);
      std::vector<std::string> loaded;
      for (int step = 0; step < 40; ++step) {
        const std::string& id = ids[rng() % ids.size()];
        if (walked.contains(id)) {
          walked.remove_tiles({id});
          loaded.erase(std::find(loaded.begin(), loaded.end(), id));
        } else {
          walked.add_tile(id, tiles.at(id));
          loaded.push_back(id);
        }
        if (step % 10 == 9) (void)walked.map();  // joins in between must not leave traces
      }
      REQUIRE(!loaded.empty());
      std::reverse(loaded.begin(), loaded.end());  // another order than the walk's
      TiledVoxelMap fresh(o, cloud.origin);
      for (const std::string& id : loaded) fresh.add_tile(id, tiles.at(id));
      std::sort(loaded.begin(), loaded.end());
      CHECK(walked.tile_ids() == loaded);
      require_same_bits(*walked.map(), *fresh.map());
    }
  }
}

TEST_CASE("a tile with another origin is moved onto the map's", "[unit][tiles]") {
  const PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  const VoxelMapOptions o = options(CovarianceMode::Pcl);
  // The tile holds the cloud's points relative to another origin; moved back (in double,
  // then float) they are what the map bins.
  const Eigen::Vector3d shift(8.25, -4.5, 2.0);
  PointCloud shifted = cloud, moved = cloud;
  shifted.origin = cloud.origin + shift;
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    shifted.points[i] = (cloud.points[i].cast<double>() - shift).cast<float>();
    moved.points[i] = (shift + shifted.points[i].cast<double>()).cast<float>();
  }
  TiledVoxelMap a(o, cloud.origin), b(o, cloud.origin);
  a.add_tile("all", moved);
  b.add_tile("all", shifted);
  CHECK(b.origin() == cloud.origin);
  require_same_bits(*a.map(), *b.map());
}

TEST_CASE("tiled map errors name the tile and leave the map as it was", "[unit][tiles]") {
  const PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  const auto tiles = split(cloud, 20.0);
  TiledVoxelMap m(options(CovarianceMode::Autoware), cloud.origin);
  const std::string first = tiles.begin()->first;
  m.add_tile(first, tiles.begin()->second);
  const auto before = m.map();

  CHECK_THROWS_WITH(m.add_tile(first, tiles.begin()->second), Catch::Matchers::Contains(first) &&
                                                                   Catch::Matchers::Contains("loaded already"));
  CHECK_THROWS_WITH(m.add_tile("", cloud), Catch::Matchers::Contains("empty"));
  CHECK_THROWS_WITH(m.remove_tiles({"nowhere"}), Catch::Matchers::Contains("'nowhere' is not loaded"));
  CHECK_THROWS_WITH(m.remove_tiles({first, first}), Catch::Matchers::Contains("named twice"));
  PointCloud bad = tiles.begin()->second;
  bad.points[3].y() = std::numeric_limits<float>::quiet_NaN();
  // All or none: the good tile before the bad one is not added either.
  const auto second = std::next(tiles.begin());
  CHECK_THROWS_WITH(m.add_tiles({{second->first, &second->second}, {"bad", &bad}}),
                    Catch::Matchers::Contains("tile 'bad': point 3 is not finite"));
  PointCloud far;
  far.points.push_back(Eigen::Vector3f(3e6f, 0.f, 0.f));
  CHECK_THROWS_WITH(m.add_tile("far", far), Catch::Matchers::Contains("tile 'far'") &&
                                                Catch::Matchers::Contains("2^20"));
  CHECK(m.tile_ids() == std::vector<std::string>{first});
  CHECK(m.map() == before);  // nothing changed: the joined map is the one shared before
  CHECK_THROWS_AS(TiledVoxelMap(VoxelMapOptions{0.0}), Error);

  m.remove_tiles({first});
  CHECK(m.map()->empty());
  CHECK(m.stats().tiles == 0);
}

TEST_CASE("a VersionHold keeps an aligner on the tiled map version it used, across calls", "[unit][tiles]") {
  const PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  const PointCloud scan = read_point_cloud((kSample / "scans" / "000003.pcd").string());
  const auto tiles = split(cloud, 20.0);
  AlignSettings s = autoware_preset();
  ExecutionOptions e;
  e.backend = Backend::Cpu;
  e.threads = 2;
  auto tiled = std::make_shared<TiledVoxelMap>(voxel_map_options(s, e), cloud.origin);
  for (const auto& [id, t] : tiles) tiled->add_tile(id, t);
  tiled->publish();
  Aligner follower(s, e);
  follower.set_target(tiled);
  const Eigen::Matrix4d guess = Eigen::Matrix4d::Identity();
  const AlignResult whole = follower.align(scan, guess);

  tiled->remove_tiles({tiles.begin()->first});
  {
    const Aligner::VersionHold hold = follower.hold_target_version();
    REQUIRE(tiled->publish().version == 2);
    // Held: version 1 still, through nested and moved holds.
    CHECK(follower.align(scan, guess).target_voxels == whole.target_voxels);
    Aligner::VersionHold inner = follower.hold_target_version();
    const Aligner::VersionHold moved = std::move(inner);
    CHECK(follower.evaluate(scan, guess).target_voxels == whole.target_voxels);
  }
  // Every hold ended: the next call takes version 2.
  Aligner reference(s, e);
  reference.set_target(tiled->map());
  const AlignResult fewer = reference.align(scan, guess);
  REQUIRE(fewer.target_voxels < whole.target_voxels);
  const AlignResult now = follower.align(scan, guess);
  CHECK(now.target_voxels == fewer.target_voxels);
  CHECK(now.transform == fewer.transform);
}

TEST_CASE("an aligner following a tiled map aligns on its last publish, taken between two calls", "[unit][tiles]") {
  const PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  const PointCloud scan = read_point_cloud((kSample / "scans" / "000003.pcd").string());
  const auto tiles = split(cloud, 20.0);
  AlignSettings s = autoware_preset();
  ExecutionOptions execution;
  execution.backend = Backend::Cpu;
  execution.threads = 2;
  VoxelMapOptions o = voxel_map_options(s, execution);
  auto tiled = std::make_shared<TiledVoxelMap>(o, cloud.origin);
  REQUIRE_FALSE(tiled->publishes_on_device());
  for (const auto& [id, t] : tiles) tiled->add_tile(id, t);

  Aligner follower(s, execution);
  // Nothing published yet: refused, and the aligner keeps no target.
  REQUIRE_THROWS_WITH(follower.set_target(tiled), Catch::Matchers::Contains("published nothing yet"));
  CHECK_FALSE(follower.has_target());
  const TiledVoxelMapPublish first = tiled->publish();
  CHECK(first.version == 1);
  CHECK_FALSE(first.on_device);
  CHECK(first.voxels == tiled->map()->size());
  follower.set_target(tiled);
  CHECK(follower.has_target());
  CHECK(follower.tiled_target() == tiled);
  REQUIRE(follower.target() == tiled->map());

  Aligner reference(s, execution);
  const Eigen::Matrix4d guess = Eigen::Matrix4d::Identity();
  const auto same = [](const AlignResult& a, const AlignResult& b) {
    CHECK(a.transform == b.transform);
    CHECK(a.nvtl == b.nvtl);
    CHECK(a.iterations == b.iterations);
    CHECK(a.target_voxels == b.target_voxels);
  };
  reference.set_target(tiled->map());
  const AlignResult whole = reference.align(scan, guess);
  same(follower.align(scan, guess), whole);

  // A change is not seen until published; then the next call takes it.
  const std::string dropped = tiles.begin()->first;
  tiled->remove_tiles({dropped});
  same(follower.align(scan, guess), whole);
  CHECK(tiled->publish().version == 2);
  CHECK(tiled->published_version() == 2);
  reference.set_target(tiled->map());
  const AlignResult fewer = reference.align(scan, guess);
  CHECK(fewer.target_voxels < whole.target_voxels);
  same(follower.align(scan, guess), fewer);
  same(follower.evaluate(scan, fewer.transform), reference.evaluate(scan, fewer.transform));

  // Another resolution or covariance mode than the aligner's is refused.
  VoxelMapOptions coarse = o;
  coarse.resolution = 3.0;
  auto other = std::make_shared<TiledVoxelMap>(coarse, cloud.origin);
  other->add_tile(dropped, tiles.at(dropped));
  other->publish();
  REQUIRE_THROWS_WITH(follower.set_target(other), Catch::Matchers::Contains("resolution"));
  // ...and the aligner still follows the map it had.
  CHECK(follower.tiled_target() == tiled);
  REQUIRE_THROWS_AS(follower.set_target(std::shared_ptr<TiledVoxelMap>()), Error);
  // A plain map set afterwards ends the following.
  follower.set_target(tiled->map());
  CHECK(follower.tiled_target() == nullptr);
  tiled->add_tile(dropped, tiles.at(dropped));
  tiled->publish();
  same(follower.align(scan, guess), fewer);
}
