// Localizing with a tiled map that follows the pose (TiledMapStreamer: 10 m tiles, 30 m
// radius, updates as the pose moves) gives the whole map's poses when the scans reach no
// farther than the loaded tiles, on BALM and on a simulated drive; a memory budget evicts
// the least recently used tiles and stays under its bytes, and one too small for the
// radius is an error naming the sizes.
#include "../support/test_support.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/trajectory.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

struct Drive {
  std::vector<Eigen::Matrix4d> poses;  // one per frame, the prediction's for lost frames
  std::vector<bool> valid;
  std::size_t swaps = 0;
  TiledMapStreamStats stats;
};

// Scans within 20 m of the sensor: with 30 m of tiles around a pose at most
// update_distance old, every point's voxels (and their neighbours) are loaded, so the
// tiled map answers as the whole map does.
LocalizerSettings settings() {
  LocalizerSettings s;
  s.max_range = 20.0;
  // A tiled map has no finer voxels to refine against (LocalizerSettings::refine_ratio):
  // the whole map is localized without the refinement too, so both answer at one resolution.
  s.refine_ratio = 0.0;
  return s;
}

// The scans localized in `map` (a file) or, when `tiles` is a folder, in its tiles
// streamed around the pose, updates swapped in at the next frame: joined maps handed to
// the localizer, or (stream.publish) published to the tiled map the localizer follows.
Drive drive(const std::vector<ScanEntry>& scans, const Eigen::Matrix4d& start, const std::string& map,
            const std::string& tiles, const TiledMapStreamOptions& stream = {}, Backend backend = Backend::Cpu) {
  Localizer localizer(settings(), test::run_with(2, backend));
  std::unique_ptr<TiledMapStreamer> streamer;
  if (tiles.empty()) {
    localizer.set_map(read_point_cloud(map));
  } else {
    streamer = std::make_unique<TiledMapStreamer>(tiles, voxel_map_options(localizer.settings().align, localizer.execution()), stream);
    const auto first = streamer->load(start.topRightCorner<2, 1>());
    if (stream.publish) {
      REQUIRE(first == nullptr);
      localizer.set_map(streamer->tiled_map());
    } else {
      localizer.set_map(first);
    }
  }
  localizer.set_initial_pose(start);
  Drive out;
  for (const ScanEntry& scan : scans) {
    if (streamer) {
      if (auto next = streamer->take(true)) {
        localizer.update_map(std::move(next));
        ++out.swaps;
      } else if (streamer->take_published(true)) {
        ++out.swaps;
      }
    }
    const LocalizationResult r = localizer.localize(read_point_cloud(scan.path), scan.time);
    out.poses.push_back(r.pose);
    out.valid.push_back(r.valid);
    if (streamer && r.valid) streamer->request(r.pose.topRightCorner<2, 1>());
  }
  if (streamer) {
    (void)streamer->take(true);
    (void)streamer->take_published(true);
    out.stats = streamer->stats();
  }
  return out;
}

// Largest distance between the positions of two drives' frames (both must be valid).
double largest_difference(const Drive& a, const Drive& b) {
  REQUIRE(a.poses.size() == b.poses.size());
  double worst = 0.0;
  for (std::size_t k = 0; k < a.poses.size(); ++k) {
    CAPTURE(k);
    CHECK(a.valid[k]);
    CHECK(b.valid[k]);
    worst = std::max(worst, (a.poses[k].topRightCorner<3, 1>() - b.poses[k].topRightCorner<3, 1>()).norm());
  }
  return worst;
}

struct SimDrive {
  fs::path dir;
  std::vector<ScanEntry> scans;
  Trajectory truth;
};

// A drive of about 60 m through a simulated 300 m world, scans at 5 Hz (at 2 Hz the
// first frame, predicted without a velocity 6 m behind, slides along a street that
// 20 m of range cannot tell apart: see settings()).
SimDrive simulated_drive() {
  SimDrive d;
  d.dir = test::temp_dir("tiled_drive");
  sim::SimulationSettings s;
  s.world.seed = 5;
  s.world.size = 300.0;
  s.lidar.columns = 360;
  s.map.voxel = 0.5;
  s.trajectory.frames = 40;
  s.trajectory.rate_hz = 5.0;
  s.threads = 2;
  s.map.threads = 2;
  sim::simulate(s, d.dir.string());
  d.scans = list_scans((d.dir / "scans").string());
  d.truth = read_trajectory((d.dir / "poses_tum.txt").string());
  match_to_reference(d.scans, d.truth);
  return d;
}

// BALM's 30 odd scans at 1 Hz, from the reference pose of the first, its map and the map
// cut into 10 m tiles (in `folder`), streamed within 30 m.
struct BalmTiles {
  std::vector<ScanEntry> scans;
  Eigen::Matrix4d start;
  std::string map;
  fs::path tiles;
  TiledMapStreamOptions options;
};

BalmTiles balm_tiles(const fs::path& data, const std::string& folder) {
  BalmTiles b;
  const fs::path balm = data / "balm_os0";
  b.scans = list_scans((balm / "odd_scans_1hz.txt").string());
  const Trajectory reference = read_trajectory((balm / "poses_tum.txt").string());
  match_to_reference(b.scans, reference);
  b.start = reference[1].pose.matrix();
  b.map = (balm / "map_even_frames_0-58_voxel0.1.pcd").string();
  b.tiles = test::temp_dir(folder);
  write_tiled_map(read_point_cloud(b.map), 10.0, b.tiles.string());
  b.options.radius = 30.0;
  b.options.update_distance = 2.0;  // the sequence spans about 10 m: update often
  return b;
}

}  // namespace

TEST_CASE("BALM at 1 Hz in 10 m tiles streamed within 30 m: the whole map's poses", "[data][localization][tiles]") {
  NDTCU_REQUIRE_DATA(dir, "balm_os0");
  const BalmTiles b = balm_tiles(dir, "balm_tiles");
  const Drive whole = drive(b.scans, b.start, b.map, "");
  const Drive tiled = drive(b.scans, b.start, "", b.tiles.string(), b.options);
  const double worst = largest_difference(whole, tiled);
  std::printf("balm_os0 odd scans, 10 m tiles within 30 m: %zu updates, %zu swaps, %zu tiles read, %zu dropped, "
              "largest difference from the whole map %.3g m\n",
              tiled.stats.updates, tiled.swaps, tiled.stats.tiles_read, tiled.stats.tiles_dropped, worst);
  CHECK(tiled.stats.updates >= 3);
  CHECK(tiled.swaps >= 2);
  CHECK(worst <= 1e-3);
}

TEST_CASE("a simulated drive in 10 m tiles streamed within 30 m: the whole map's poses",
          "[unit][localization][tiles]") {
  const SimDrive d = simulated_drive();
  const std::string map = (d.dir / "map.pcd").string();
  const fs::path tiles = test::temp_dir("sim_tiles");
  const TiledMapMetadata meta = write_tiled_map(read_point_cloud(map), 10.0, tiles.string());
  TiledMapStreamOptions o;
  o.radius = 30.0;
  o.update_distance = 5.0;
  const Eigen::Matrix4d start = d.truth.front().pose.matrix();
  const Drive whole = drive(d.scans, start, map, "");
  const Drive tiled = drive(d.scans, start, "", tiles.string(), o);
  const double worst = largest_difference(whole, tiled);
  const double length = (d.truth.back().pose.translation() - d.truth.front().pose.translation()).norm();
  std::printf("simulated drive (%.0f m end to end, %zu frames): %zu of %zu tiles read, %zu dropped, %zu updates, "
              "at most %zu loaded, largest difference from the whole map %.3g m\n",
              length, d.scans.size(), tiled.stats.tiles_read, meta.tiles.size(), tiled.stats.tiles_dropped,
              tiled.stats.updates, tiled.stats.peak_loaded, worst);
  CHECK(tiled.stats.tiles_dropped > 10);  // the map did move with the vehicle
  CHECK(tiled.stats.peak_loaded < meta.tiles.size() / 2);
  CHECK(worst <= 1e-3);

  // The three checks below share the drives above (sections would simulate and drive
  // again for each, three times the work under the sanitizers).
  {
    INFO("published to the tiled map the localizer follows instead of joined and handed over: the same poses");
    TiledMapStreamOptions p = o;
    p.publish = true;
    const Drive published = drive(d.scans, start, "", tiles.string(), p);
    CHECK(published.swaps == tiled.swaps);
    CHECK(published.stats.updates == tiled.stats.updates);
    for (std::size_t k = 0; k < d.scans.size(); ++k) {
      CAPTURE(k);
      CHECK(published.poses[k] == tiled.poses[k]);
    }
  }
  {
    INFO("a memory budget evicts the least recently used tiles and keeps the bytes under it");
    // A budget a quarter above what the radius needs: tiles beyond it stay until the
    // budget needs their room.
    TiledMapStreamOptions b = o;
    b.memory_budget = tiled.stats.peak_bytes * 5 / 4;
    const Drive budgeted = drive(d.scans, start, "", tiles.string(), b);
    std::printf("budget %.2f MB: peak %.2f MB, %zu tiles dropped, at most %zu loaded\n", b.memory_budget / 1e6,
                budgeted.stats.peak_bytes / 1e6, budgeted.stats.tiles_dropped, budgeted.stats.peak_loaded);
    CHECK(budgeted.stats.peak_bytes <= b.memory_budget);
    CHECK(budgeted.stats.tiles_dropped > 0);
    CHECK(budgeted.stats.tiles_dropped < tiled.stats.tiles_dropped);  // some were kept for later
    CHECK(budgeted.stats.peak_loaded > tiled.stats.peak_loaded);
  }
  {
    INFO("a budget smaller than the radius needs is an error naming the sizes");
    TiledMapStreamOptions b = o;
    b.memory_budget = 100000;
    TiledMapStreamer streamer(tiles.string(), voxel_map_options(settings().align, test::on_cpu(2)), b);
    CHECK_THROWS_WITH(streamer.load(start.topRightCorner<2, 1>()),
                      Catch::Matchers::Contains("more than the map memory budget of 0.1 MB") &&
                          Catch::Matchers::Contains("tiles within 30 m"));
  }
}

TEST_CASE("a streamed tile that cannot be read is skipped and named; no tile within the radius is an error",
          "[unit][tiles]") {
  const fs::path sample = ndtcu::test::source_dir() / "data" / "sample";
  const fs::path tiles = test::temp_dir("stream_bad_tile");
  const TiledMapMetadata meta = write_tiled_map(read_point_cloud((sample / "map.pcd").string()), 20.0, tiles.string());
  REQUIRE(meta.tiles.size() > 2);
  {
    std::ofstream bad(tiles / meta.tiles[1].file, std::ios::binary | std::ios::trunc);
    bad << "VERSION .7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 10\nHEIGHT 1\nPOINTS 10\nDATA binary\n";
  }
  TiledMapStreamer streamer(tiles.string(), VoxelMapOptions{}, TiledMapStreamOptions{});
  const auto map = streamer.load(Eigen::Vector2d(0.0, 0.0));
  CHECK(streamer.stats().skipped == std::vector<std::string>{meta.tiles[1].file});
  CHECK(streamer.stats().loaded == meta.tiles.size() - 1);
  CHECK(!map->empty());
  CHECK_THROWS_WITH(streamer.load(Eigen::Vector2d(5000.0, 0.0)),
                    Catch::Matchers::Contains("none of its") && Catch::Matchers::Contains("within 100 m"));
  TiledMapStreamOptions negative;
  negative.radius = -1.0;
  CHECK_THROWS_AS(TiledMapStreamer(tiles.string(), VoxelMapOptions{}, negative), Error);
}

TEST_CASE("the map handed out covers a place when it holds every tile within reach of it", "[unit][tiles]") {
  const fs::path sample = ndtcu::test::source_dir() / "data" / "sample";
  const fs::path tiles = test::temp_dir("stream_covers");
  // The sample's 90 m square in 10 m tiles.
  const TiledMapMetadata meta = write_tiled_map(read_point_cloud((sample / "map.pcd").string()), 10.0, tiles.string());
  REQUIRE(meta.tiles.size() > 60);
  for (const bool publish : {false, true}) {
    CAPTURE(publish);
    TiledMapStreamOptions o;
    o.radius = 20.0;
    o.update_distance = 5.0;
    o.publish = publish;
    TiledMapStreamer streamer(tiles.string(), VoxelMapOptions{}, o);
    const Eigen::Vector2d start(-20.0, 0.0), ahead(0.0, 0.0);
    CHECK(!streamer.covers(start, 5.0));  // nothing handed out yet
    (void)streamer.load(start);
    CHECK(streamer.covers(start, 20.0));
    CHECK(streamer.covers(start, 5.0));
    CHECK(!streamer.covers(start, 25.0));       // tiles 20-25 m away are not loaded
    CHECK(!streamer.covers(ahead, 15.0));       // 20 m on, the scan reaches 35 m from the start
    CHECK(streamer.covers(Eigen::Vector2d(5000.0, 0.0), 10.0));  // no tile there: nothing missing
    CHECK(!streamer.covers(Eigen::Vector2d(std::nan(""), 0.0), 1.0));
    streamer.request(ahead);
    // The update runs; the map in hand stays the first until it is taken.
    streamer.wait_idle();
    CHECK(!streamer.covers(ahead, 15.0));
    if (publish) {
      CHECK(streamer.take_published(true));
    } else {
      CHECK(streamer.take(true) != nullptr);
    }
    CHECK(streamer.covers(ahead, 15.0));
    CHECK(!streamer.covers(start, 20.0));  // the tiles beyond 20 m of `ahead` were dropped
  }
  // A tile that cannot be read counts as held: waiting would not bring it.
  {
    std::ofstream bad(tiles / meta.tiles[0].file, std::ios::binary | std::ios::trunc);
    bad << "not a point cloud\n";
  }
  TiledMapStreamer streamer(tiles.string(), VoxelMapOptions{}, TiledMapStreamOptions{});
  const Eigen::Vector2d corner(meta.tiles[0].x_min + 5.0, meta.tiles[0].y_min + 5.0);
  (void)streamer.load(corner);
  REQUIRE(streamer.stats().skipped.size() == 1);
  CHECK(streamer.covers(corner, 1.0));
}

TEST_CASE("a simulated drive on CUDA in 10 m tiles published to the device within 30 m: the whole map's poses",
          "[gpu][localization][tiles]") {
  NDTCU_REQUIRE_GPU();
  const SimDrive d = simulated_drive();
  const std::string map = (d.dir / "map.pcd").string();
  const fs::path tiles = test::temp_dir("sim_tiles_gpu");
  write_tiled_map(read_point_cloud(map), 10.0, tiles.string());
  TiledMapStreamOptions o;
  o.radius = 30.0;
  o.update_distance = 5.0;
  const Eigen::Matrix4d start = d.truth.front().pose.matrix();
  const Drive whole = drive(d.scans, start, map, "", {}, Backend::Cuda);
  const Drive joined = drive(d.scans, start, "", tiles.string(), o, Backend::Cuda);
  o.publish = true;
  const Drive published = drive(d.scans, start, "", tiles.string(), o, Backend::Cuda);
  const double worst = largest_difference(whole, published);
  std::printf("simulated drive on CUDA, tiles published to the device: %zu updates, %zu swaps, %zu tiles dropped, "
              "largest difference from the whole map %.3g m\n",
              published.stats.updates, published.swaps, published.stats.tiles_dropped, worst);
  CHECK(published.stats.tiles_dropped > 10);
  CHECK(worst <= 1e-3);
  // The device twin's versions are the joined maps, bit for bit.
  for (std::size_t k = 0; k < d.scans.size(); ++k) {
    CAPTURE(k);
    CHECK(published.poses[k] == joined.poses[k]);
  }
}

TEST_CASE("BALM at 1 Hz on CUDA in 10 m tiles published to the device within 30 m: the whole map's poses",
          "[gpu][data][localization][tiles]") {
  NDTCU_REQUIRE_GPU();
  NDTCU_REQUIRE_DATA(dir, "balm_os0");
  BalmTiles b = balm_tiles(dir, "balm_tiles_gpu");
  b.options.publish = true;
  const Drive whole = drive(b.scans, b.start, b.map, "", {}, Backend::Cuda);
  const Drive published = drive(b.scans, b.start, "", b.tiles.string(), b.options, Backend::Cuda);
  const double worst = largest_difference(whole, published);
  std::printf("balm_os0 odd scans on CUDA, 10 m tiles published within 30 m: %zu updates, %zu swaps, largest "
              "difference from the whole map %.3g m\n",
              published.stats.updates, published.swaps, worst);
  CHECK(published.stats.updates >= 3);
  CHECK(worst <= 1e-3);
}
