// The next map of a moving vehicle staged on the GPU while alignments go on: the
// alignments on the current map keep their bits while another thread stages, the swap
// (set_target of the staged map) gives the bits of an aligner made for the new map, the
// two buffers alternate over many swaps, and how long alignments take while a large map
// is staged and at the swap is printed (figures for the notes, not timed checks); a long
// drive in streamed tiles under a memory budget keeps device memory flat.
#include "../support/test_support.hpp"
#include "reduce_probe.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/trajectory.hpp>
#include <ndtcu/tiled_voxel_map.hpp>
#include <ndtcu/voxel_map.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

// Autoware's settings (run on the CUDA backend: kCuda).
AlignSettings cuda_settings() { return autoware_preset(); }

const ExecutionOptions kCuda = test::on(Backend::Cuda);

void require_same(const AlignResult& a, const AlignResult& b) {
  REQUIRE(a.transform == b.transform);
  CHECK(a.nvtl == b.nvtl);
  CHECK(a.iterations == b.iterations);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// A map of about `cells` voxels: random points, 8 to a 2 m cell, over a flat box.
std::shared_ptr<const VoxelMap> large_map(std::size_t cells, unsigned seed) {
  PointCloud c;
  std::mt19937 rng(seed);
  const double side = std::sqrt(static_cast<double>(cells) / 4.0) * 2.0;  // 4 layers of 2 m
  std::uniform_real_distribution<float> xy(0.f, static_cast<float>(side)), z(0.f, 8.f);
  c.points.resize(cells * 8);
  for (auto& p : c.points) p = Eigen::Vector3f(xy(rng), xy(rng), z(rng));
  VoxelMapOptions o = voxel_map_options(cuda_settings(), kCuda);
  o.backend = Backend::Cuda;
  return std::make_shared<const VoxelMap>(VoxelMap::build(c, o));
}

}  // namespace

TEST_CASE("a staged map swaps in with the bits of a fresh aligner, alignments on the current map untouched",
          "[gpu][tiles]") {
  NDTCU_REQUIRE_GPU();
  const PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  const PointCloud scan = read_point_cloud((kSample / "scans" / "000003.pcd").string());
  const VoxelMapOptions o = voxel_map_options(cuda_settings(), kCuda);
  // Two versions of the map around the sample: all of it, and its 20 m tiles west of x = 10.
  const auto a = std::make_shared<const VoxelMap>(VoxelMap::build(cloud, o));
  TiledVoxelMap tiles(o, cloud.origin);
  {
    std::map<std::string, PointCloud> parts;
    for (std::size_t i = 0; i < cloud.size(); ++i) {
      const Eigen::Vector3d w = cloud.world(i);
      if (w.x() >= 10.0) continue;
      PointCloud& t = parts[std::to_string(std::floor(w.x() / 20.0)) + "_" + std::to_string(std::floor(w.y() / 20.0))];
      t.origin = cloud.origin;
      t.points.push_back(cloud.points[i]);
    }
    for (const auto& [id, part] : parts) tiles.add_tile(id, part);
  }
  const std::shared_ptr<const VoxelMap> b = tiles.map();
  REQUIRE(b->size() < a->size());
  const Eigen::Matrix4d guess = Eigen::Matrix4d::Identity();

  Aligner fresh_a(cuda_settings(), kCuda), fresh_b(cuda_settings(), kCuda);
  fresh_a.set_target(a);
  fresh_b.set_target(b);
  const AlignResult ra = fresh_a.align(scan, guess), rb = fresh_b.align(scan, guess);
  REQUIRE(ra.transform != rb.transform);  // the maps differ where the scan is

  Aligner aligner(cuda_settings(), kCuda);
  aligner.set_target(a);
  require_same(aligner.align(scan, guess), ra);
  for (int round = 0; round < 6; ++round) {
    CAPTURE(round);
    const auto next = round % 2 == 0 ? b : a;
    const AlignResult& expect_now = round % 2 == 0 ? ra : rb;
    const AlignResult& expect_next = round % 2 == 0 ? rb : ra;
    // Staging on another thread while this one aligns on the current map.
    std::atomic<bool> staged{false};
    std::thread stager([&] {
      aligner.stage_target(next);
      staged = true;
    });
    int during = 0;
    while (!staged || during < 3) {
      require_same(aligner.align(scan, guess), expect_now);
      ++during;
    }
    stager.join();
    aligner.set_target(next);
    require_same(aligner.align(scan, guess), expect_next);
  }
  // A staged map that is not the one set is not used.
  aligner.stage_target(a);
  aligner.set_target(b);  // already the target: nothing changes
  require_same(aligner.align(scan, guess), rb);
  const auto b_copy = std::make_shared<const VoxelMap>(*b);
  aligner.set_target(b_copy);  // another object: uploaded, not the staged a
  require_same(aligner.align(scan, guess), rb);
  aligner.set_target(a);  // still staged: swapped in
  require_same(aligner.align(scan, guess), ra);
}

TEST_CASE("alignments while a large map is staged, and the swap: latencies", "[gpu][tiles]") {
  NDTCU_REQUIRE_GPU();
  const PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  const PointCloud scan = read_point_cloud((kSample / "scans" / "000003.pcd").string());
  const VoxelMapOptions o = voxel_map_options(cuda_settings(), kCuda);
  const auto current = std::make_shared<const VoxelMap>(VoxelMap::build(cloud, o));
  Aligner aligner(cuda_settings(), kCuda);
  aligner.set_target(current);
  const Eigen::Matrix4d guess = Eigen::Matrix4d::Identity();
  for (int i = 0; i < test::repeats(20, 2); ++i) (void)aligner.align(scan, guess);  // warm: graphs built

  std::vector<double> quiet;
  for (int i = 0; i < test::repeats(200, 5); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)aligner.align(scan, guess);
    quiet.push_back(ms_since(t0));
  }
  // A map of a 100 m radius in a dense city: 500k voxels, about 60 MB on the device.
  const auto big = large_map(500000, 1), big2 = large_map(500000, 2);
  std::printf("staging: large map of %zu voxels\n", big->size());
  // The first staging allocates the second set of device buffers and the pinned buffer
  // (allocations take the driver's locks); the later ones reuse them.
  std::vector<double> first, busy, stage_ms;
  for (int rep = 0; rep < test::repeats(9, 3); ++rep) {
    std::atomic<bool> done{false};
    std::thread stager([&] {
      const auto t0 = std::chrono::steady_clock::now();
      aligner.stage_target(rep % 2 == 0 ? big : big2);
      stage_ms.push_back(ms_since(t0));
      done = true;
    });
    while (!done) {
      const auto t0 = std::chrono::steady_clock::now();
      (void)aligner.align(scan, guess);
      (rep == 0 ? first : busy).push_back(ms_since(t0));
    }
    stager.join();
  }
  // The swap against an upload at the next alignment.
  aligner.stage_target(big);
  auto t0 = std::chrono::steady_clock::now();
  aligner.set_target(big);
  (void)aligner.align(scan, guess);
  const double swapped = ms_since(t0);
  aligner.set_target(current);
  (void)aligner.align(scan, guess);
  t0 = std::chrono::steady_clock::now();
  aligner.set_target(big2);  // not staged: uploaded by this alignment
  (void)aligner.align(scan, guess);
  const double uploaded = ms_since(t0);
  std::printf("staging: alignment median %.3f ms, max %.3f ms quiet (%zu); while the first staging (allocating) ran: "
              "max %.3f ms (%zu); while the next 8 ran: median %.3f ms, p99 %.3f ms, max %.3f ms (%zu); staging took "
              "%.2f ms (median of %zu); first alignment after the swap %.3f ms, after set_target of an unstaged map "
              "%.3f ms\n",
              percentile(quiet, 0.5), percentile(quiet, 1.0), quiet.size(), percentile(first, 1.0), first.size(),
              percentile(busy, 0.5), percentile(busy, 0.99), percentile(busy, 1.0), busy.size(),
              percentile(stage_ms, 0.5), stage_ms.size(), swapped, uploaded);
  CHECK(!busy.empty());
}

TEST_CASE("adding a 2x10^5-point tile to a live tiled map: voxelize, join, stage, swap", "[gpu][tiles]") {
  NDTCU_REQUIRE_GPU();
  // A 100 m radius of 20 m tiles (8 x 8 of them), 2x10^5 points each: a dense city map.
  const VoxelMapOptions o = voxel_map_options(cuda_settings(), kCuda);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> in_tile(0.f, 20.f), height(0.f, 12.f);
  const auto tile = [&](int i, int j) {
    PointCloud c;
    c.points.resize(200000);
    for (auto& p : c.points) p = Eigen::Vector3f(20.f * i + in_tile(rng), 20.f * j + in_tile(rng), height(rng));
    return c;
  };
  TiledVoxelMap tiles(o);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) tiles.add_tile(std::to_string(i) + "_" + std::to_string(j), tile(i, j));
  }
  const PointCloud scan = read_point_cloud((kSample / "scans" / "000003.pcd").string());
  Aligner aligner(cuda_settings(), kCuda);
  aligner.set_target(tiles.map());
  for (int i = 0; i < 5; ++i) (void)aligner.align(scan, Eigen::Matrix4d::Identity());
  aligner.stage_target(tiles.map());  // the staging buffers, allocated before the clock runs
  std::vector<double> add_ms, join_ms, stage_ms, swap_ms;
  for (int k = 0; k < 5; ++k) {
    const PointCloud next = tile(8, k);
    auto t0 = std::chrono::steady_clock::now();
    tiles.add_tile("8_" + std::to_string(k), next);
    add_ms.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    const auto map = tiles.map();
    join_ms.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    aligner.stage_target(map);
    stage_ms.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    aligner.set_target(map);
    (void)aligner.align(scan, Eigen::Matrix4d::Identity());
    swap_ms.push_back(ms_since(t0));
    CHECK(aligner.target() == map);
  }
  std::printf("tile add: %zu tiles, %zu voxels; per 2x10^5-point tile (median of 5): voxelize %.1f ms, join %.1f ms, "
              "stage %.1f ms (on the worker), first alignment after the swap %.2f ms (%d host threads)\n",
              tiles.stats().tiles, tiles.map()->size(), percentile(add_ms, 0.5), percentile(join_ms, 0.5),
              percentile(stage_ms, 0.5), percentile(swap_ms, 0.5),
              static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST_CASE("a long drive in streamed tiles under a memory budget keeps device memory flat", "[gpu][tiles]") {
  NDTCU_REQUIRE_GPU();
  // 150 scans at 5 Hz through a simulated 400 m world, 10 m tiles within 30 m, updates
  // every 5 m, a budget of 4 MB: tiles beyond the radius are kept until it is full, then
  // evicted, least recently used first.
  const fs::path dir = test::temp_dir("gpu_long_drive");
  sim::SimulationSettings sim_settings;
  sim_settings.world.seed = 11;
  sim_settings.world.size = 400.0;
  sim_settings.lidar.columns = 360;
  sim_settings.map.voxel = 0.5;
  sim_settings.trajectory.frames = 150;
  sim_settings.trajectory.rate_hz = 5.0;
  sim::simulate(sim_settings, dir.string());
  std::vector<ScanEntry> scans = list_scans((dir / "scans").string());
  const Trajectory truth = read_trajectory((dir / "poses_tum.txt").string());
  match_to_reference(scans, truth);
  const fs::path tiles = dir / "tiles";
  write_tiled_map(read_point_cloud((dir / "map.pcd").string()), 10.0, tiles.string());

  // Joined maps staged and handed to the localizer, then published to the tiled map's
  // device twin that the localizer follows.
  for (const bool publish : {false, true}) {
  CAPTURE(publish);
  LocalizerSettings s;
  ExecutionOptions execution;
  execution.backend = Backend::Cuda;
  s.max_range = 20.0;
  Localizer localizer(s, execution);
  TiledMapStreamOptions o;
  o.radius = 30.0;
  o.update_distance = 5.0;
  o.memory_budget = 4000000;
  o.publish = publish;
  o.on_map = [&localizer](const std::shared_ptr<const VoxelMap>& m) { localizer.stage_map(m); };
  const std::size_t free_at_start = test::device_free_bytes();
  TiledMapStreamer streamer(tiles.string(), voxel_map_options(s.align, execution), o);
  const auto first = streamer.load(truth.front().pose.translation().head<2>());
  if (publish) {
    localizer.set_map(streamer.tiled_map());
  } else {
    localizer.set_map(first);
  }
  localizer.set_initial_pose(truth.front().pose.matrix());
  std::vector<double> used_mb;
  std::size_t lost = 0, degenerate = 0, swaps = 0, device_bytes = 0, coverage_waits = 0;
  double worst_valid_m = 0.0;
  std::optional<Eigen::Vector2d> last_xy, before_last_xy;
  for (std::size_t k = 0; k < scans.size(); ++k) {
    const ScanEntry& e = scans[k];
    // An update is taken when it is ready, and waited for when the map in hand lacks tiles
    // within the scan's reach of where it is expected (the drive runs far faster than its
    // 5 Hz: without the wait, scans aligned on the part of their surroundings loaded and
    // valid frames ended up to 0.5 m off).
    const Eigen::Vector2d expected =
        !last_xy ? truth.front().pose.translation().head<2>()
                 : (before_last_xy ? Eigen::Vector2d(2.0 * *last_xy - *before_last_xy) : *last_xy);
    const bool wait = !streamer.covers(expected, s.max_range);
    coverage_waits += wait && streamer.busy();
    if (auto next = streamer.take(wait)) {
      localizer.update_map(std::move(next));
      ++swaps;
    } else if (streamer.take_published(wait)) {
      ++swaps;
    }
    const LocalizationResult r = localizer.localize(read_point_cloud(e.path), e.time);
    lost += r.status == FrameStatus::Lost;
    // With the tiles within 30 m only, a straight street can leave the position along it
    // unpinned (the cross streets that pin it lie beyond the tiles): such a frame is
    // degenerate, its pose the prediction along the street, not a loss.
    degenerate += r.status == FrameStatus::Degenerate;
    if (r.valid) worst_valid_m = std::max(worst_valid_m, (r.pose.topRightCorner<3, 1>() - truth[k].pose.translation()).norm());
    if (r.status != FrameStatus::Lost) streamer.request(r.pose.topRightCorner<2, 1>());
    if (r.valid) {
      before_last_xy = last_xy;
      last_xy = r.pose.topRightCorner<2, 1>();
    }
    used_mb.push_back(static_cast<double>(free_at_start - std::min(free_at_start, test::device_free_bytes())) / 1e6);
  }
  streamer.wait_idle();
  if (publish) device_bytes = streamer.stats().peak_device_bytes;
  const TiledMapStreamStats st = streamer.stats();
  const std::size_t half = used_mb.size() / 2;
  const double first_half = *std::max_element(used_mb.begin(), used_mb.begin() + half);
  const double second_half = *std::max_element(used_mb.begin() + half, used_mb.end());
  const double length = (truth.back().pose.translation() - truth.front().pose.translation()).norm();
  std::printf("long drive (%s): %zu frames (%.0f m end to end), %zu lost, %zu degenerate, valid frames within %.3f m, "
              "%zu updates, %zu swaps (%zu waited for tiles within reach), %zu tiles read, %zu "
              "evicted, at most %zu loaded, host peak %.2f MB of a %.1f MB budget; device memory used by the run "
              "(cudaMemGetInfo): first half at most %.1f MB, second half at most %.1f MB; device twin at most %.2f MB\n",
              publish ? "published to the device" : "joined and staged", scans.size(), length, lost, degenerate,
              worst_valid_m, st.updates, swaps, coverage_waits,
              st.tiles_read, st.tiles_dropped, st.peak_loaded, st.peak_bytes / 1e6, o.memory_budget / 1e6, first_half,
              second_half, device_bytes / 1e6);
  CHECK(lost == 0);
  CHECK(degenerate <= scans.size() / 10);
  // No wrong pose accepted (more than 0.3 m off). Measured on an H200: valid frames within
  // 0.28 m. The 20 m scans see one street at a time and the position along it is weakly
  // held: Autoware's score (the radius search's sum over neighbouring voxels) has its
  // optimum up to 0.28 m from the truth on this drive with the whole map loaded too (the
  // CPU backend, the same frames).
  CHECK(worst_valid_m < 0.30);
  CHECK(st.peak_bytes <= o.memory_budget);
  CHECK(st.tiles_dropped > 0);
  // The device holds the map in use and the staged one (or the device twin's slots and two
  // lookups), each at most the joined map's share of the budget (with the buffers'
  // headroom): flat, whatever the drive's length.
  if (publish) CHECK(device_bytes <= o.memory_budget);
  if (test::under_sanitizer()) {
    WARN("under a sanitizer: device memory used, first half " << first_half << " MB, second half " << second_half
                                                              << " MB (not checked)");
  } else {
    CHECK(second_half <= first_half + 2.0 * o.memory_budget / 1e6);
  }
  }
}
