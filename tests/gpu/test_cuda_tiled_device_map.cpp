// A tiled map on the GPU published to its device twin and followed by a CUDA aligner: every
// version gives the bits of the host join of the same tiles (uploaded as a VoxelMap),
// whatever the order of the adds and removes and with cells split between tiles; an
// aligner aligning while another thread changes and publishes the map sees one whole
// version per call; a publish sends up only the voxels that changed; the misuses are
// errors; and device memory stays flat over a long drive of tile changes.
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/tiled_voxel_map.hpp>
#include <ndtcu/voxel_map.hpp>

#include "cuda/cuda_backend.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

// Autoware's settings with the covariance `mode` (run on the CUDA backend: kCuda).
AlignSettings cuda_settings(CovarianceMode mode = CovarianceMode::Autoware) {
  AlignSettings s = autoware_preset();
  s.covariance = mode;
  return s;
}

const ExecutionOptions kCuda = test::on(Backend::Cuda);

// The cloud cut into squares of `size` m (world x-y), each keeping the cloud's origin and
// its points' order; ids "i_j".
std::map<std::string, PointCloud> cut(const PointCloud& cloud, double size) {
  std::map<std::string, PointCloud> tiles;
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    const Eigen::Vector3d w = cloud.world(i);
    PointCloud& t = tiles[std::to_string(static_cast<long>(std::floor(w.x() / size))) + "_" +
                          std::to_string(static_cast<long>(std::floor(w.y() / size)))];
    t.origin = cloud.origin;
    t.points.push_back(cloud.points[i]);
  }
  return tiles;
}

// The sample map and one of its scans, which aligns from the identity.
struct Sample {
  PointCloud cloud = read_point_cloud((kSample / "map.pcd").string());
  PointCloud scan = read_point_cloud((kSample / "scans" / "000003.pcd").string());
  Eigen::Matrix4d guess = Eigen::Matrix4d::Identity();
};

bool same_bits(const AlignResult& a, const AlignResult& b) {
  return a.transform == b.transform && a.nvtl == b.nvtl && a.score == b.score && a.iterations == b.iterations &&
         a.hessian == b.hessian && a.target_voxels == b.target_voxels;
}

void require_same(const AlignResult& follower, const AlignResult& reference) {
  CAPTURE(follower.target_voxels, reference.target_voxels, follower.nvtl, reference.nvtl);
  REQUIRE(same_bits(follower, reference));
}

}  // namespace

TEST_CASE("a CUDA aligner following a tiled map on the GPU has the host join's bits after any adds and removes",
          "[gpu][tiles]") {
  NDTCU_REQUIRE_GPU();
  const Sample sample;
  const auto& [cloud, scan, guess] = sample;
  const int steps = test::under_sanitizer() ? 6 : 30;
  // 10 m tiles at 2 m (no cell spans two tiles) and 7 m tiles (cells split between two to
  // four tiles, their voxels joined from the tiles' sums).
  for (const double size : {10.0, 7.0}) {
    const auto tiles = cut(cloud, size);
    std::vector<std::string> ids;
    for (const auto& entry : tiles) ids.push_back(entry.first);
    for (const CovarianceMode mode : {CovarianceMode::Autoware, CovarianceMode::Pcl}) {
      CAPTURE(size, to_string(mode));
      const AlignSettings s = cuda_settings(mode);
      auto tiled = std::make_shared<TiledVoxelMap>(voxel_map_options(s, kCuda), cloud.origin);
      REQUIRE(tiled->publishes_on_device());
      Aligner follower(s, kCuda), reference(s, kCuda);
      std::mt19937 rng(static_cast<unsigned>(size) * 2 + (mode == CovarianceMode::Pcl ? 1 : 0));
      std::set<std::string> loaded;
      std::size_t written = 0, removed = 0, staged = 0;
      for (int step = 0; step < steps; ++step) {
        CAPTURE(step);
        // Add a few tiles and remove a few, at random, in one publish; now and then many.
        const int adds = step == 0 ? static_cast<int>(ids.size()) / 2 : static_cast<int>(rng() % 4);
        for (int a = 0; a < adds; ++a) {
          const std::string& id = ids[rng() % ids.size()];
          if (loaded.insert(id).second) tiled->add_tile(id, tiles.at(id));
        }
        const int removes = step % 7 == 6 ? static_cast<int>(loaded.size()) / 2 : static_cast<int>(rng() % 3);
        for (int r = 0; r < removes && !loaded.empty(); ++r) {
          auto it = loaded.begin();
          std::advance(it, static_cast<long>(rng() % loaded.size()));
          tiled->remove_tiles({*it});
          loaded.erase(it);
        }
        const TiledVoxelMapPublish p = tiled->publish();
        REQUIRE(p.on_device);
        REQUIRE(p.version == static_cast<std::uint64_t>(step + 1));
        written += p.written;
        removed += p.removed;
        if (step == 0) follower.set_target(tiled);
        const std::shared_ptr<const VoxelMap> joined = tiled->map();
        REQUIRE(p.voxels == joined->size());
        reference.set_target(joined);
        // What a publish sends up: the voxels computed on the host (about 150 bytes each:
        // the first publish's, and cells joined from several tiles), and a slot-and-key
        // pair (16 bytes) for each voxel removed, replaced or taken from the slots its tile
        // was staged in on the device.
        REQUIRE(p.staged <= p.written);
        CHECK(p.bytes_up <= (p.written - p.staged) * 152 + (p.removed + 2 * p.written) * 16);
        if (step > 0) staged += p.staged;
        const AlignResult a = follower.align(scan, guess), b = reference.align(scan, guess);
        require_same(a, b);
        const Eigen::Matrix4d at = b.transform;
        require_same(follower.evaluate(scan, at), reference.evaluate(scan, at));
      }
      std::printf("tiled device map, %.0f m tiles, %s: %d publishes, %zu voxels written (%zu of them after the first "
                  "publish taken from where their tile was staged on the device), %zu removed in all\n",
                  size, to_string(mode), steps, written, staged, removed);
      CHECK(staged > 0);
      // Emptied and filled again: the same bits.
      tiled->clear();
      tiled->publish();
      const AlignResult none = follower.align(scan, guess);
      CHECK(none.reason == StopReason::NoVoxels);
      CHECK(none.target_voxels == 0);
      for (const auto& [id, t] : tiles) tiled->add_tile(id, t);
      tiled->publish();
      reference.set_target(tiled->map());
      require_same(follower.align(scan, guess), reference.align(scan, guess));
    }
  }
}

TEST_CASE("a CUDA aligner aligning while another thread changes and publishes the tiled map sees whole versions",
          "[gpu][tiles]") {
  NDTCU_REQUIRE_GPU();
  const Sample sample;
  const auto& [cloud, scan, guess] = sample;
  const AlignSettings s = cuda_settings();
  const auto tiles = cut(cloud, 20.0);
  // Two versions: every tile (A), and the tiles west of x = 10 m (B).
  std::vector<std::string> east;
  for (const auto& [id, t] : tiles) {
    if (std::stol(id.substr(0, id.find('_'))) * 20.0 >= 10.0) east.push_back(id);
  }
  REQUIRE_FALSE(east.empty());
  auto tiled = std::make_shared<TiledVoxelMap>(voxel_map_options(s, kCuda), cloud.origin);
  for (const auto& [id, t] : tiles) tiled->add_tile(id, t);
  tiled->publish();
  Aligner reference(s, kCuda);
  reference.set_target(tiled->map());
  const AlignResult ra = reference.align(scan, guess);
  {
    TiledVoxelMap west(voxel_map_options(s, kCuda), cloud.origin);
    for (const auto& [id, t] : tiles) {
      if (std::find(east.begin(), east.end(), id) == east.end()) west.add_tile(id, t);
    }
    reference.set_target(west.map());
  }
  const AlignResult rb = reference.align(scan, guess);
  REQUIRE_FALSE(same_bits(ra, rb));

  Aligner follower(s, kCuda);
  follower.set_target(tiled);
  require_same(follower.align(scan, guess), ra);
  const int rounds = test::under_sanitizer() ? 4 : 40;
  std::atomic<bool> done{false};
  std::atomic<int> publishes{0};
  std::thread owner([&] {
    for (int r = 0; r < rounds; ++r) {
      tiled->remove_tiles(east);
      tiled->publish();
      ++publishes;
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      for (const std::string& id : east) tiled->add_tile(id, tiles.at(id));
      tiled->publish();
      ++publishes;
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    done = true;
  });
  int seen_a = 0, seen_b = 0, other = 0;
  while (!done) {
    const AlignResult r = follower.align(scan, guess);
    if (same_bits(r, ra)) ++seen_a;
    else if (same_bits(r, rb)) ++seen_b;
    else ++other;
  }
  owner.join();
  std::printf("tiled device map under a publishing thread: %d publishes; %d alignments on the whole map, %d on the "
              "western tiles, %d on neither\n",
              publishes.load(), seen_a, seen_b, other);
  CHECK(other == 0);
  CHECK(seen_a > 0);
  CHECK(seen_b > 0);
  require_same(follower.align(scan, guess), ra);  // the last publish: every tile
}

TEST_CASE("a tiled map on the GPU: who may follow it, and device memory over a long drive of tile changes",
          "[gpu][tiles]") {
  NDTCU_REQUIRE_GPU();
  const Sample sample;
  const auto& [cloud, scan, guess] = sample;
  const AlignSettings s = cuda_settings();
  const auto tiles = cut(cloud, 10.0);
  auto tiled = std::make_shared<TiledVoxelMap>(voxel_map_options(s, kCuda), cloud.origin);
  for (const auto& [id, t] : tiles) tiled->add_tile(id, t);
  Aligner first(s, kCuda), second(s, kCuda);
  REQUIRE_THROWS_WITH(first.set_target(tiled), Catch::Matchers::Contains("published nothing yet"));
  tiled->publish();
  // A CPU aligner cannot read the device twin.
  AlignSettings cpu = s;
  ExecutionOptions cpu_exec;
  cpu_exec.backend = Backend::Cpu;
  Aligner on_cpu(cpu, cpu_exec);
  REQUIRE_THROWS_WITH(on_cpu.set_target(tiled), Catch::Matchers::Contains("CPU aligner"));
  CHECK_FALSE(on_cpu.has_target());
  // One CUDA aligner at a time; the other keeps its own target.
  first.set_target(tiled);
  second.set_target(tiled->map());
  const AlignResult whole = second.align(scan, guess);
  REQUIRE_THROWS_WITH(second.set_target(tiled), Catch::Matchers::Contains("another CUDA aligner"));
  CHECK(second.tiled_target() == nullptr);
  require_same(second.align(scan, guess), whole);
  require_same(first.align(scan, guess), whole);
  // Once the first leaves it, the second may follow it.
  first.set_target(tiled->map());
  second.set_target(tiled);
  require_same(second.align(scan, guess), whole);
  require_same(first.align(scan, guess), whole);

  // A long drive: tiles dropped and loaded again, published each time, aligned in between.
  // The slot arrays and lookups grow to the largest version and are reused from then on.
  std::vector<std::string> ids;
  for (const auto& entry : tiles) ids.push_back(entry.first);
  // Under a sanitizer: one pass over the tiles and a few more changes (every launch is slow).
  const int rounds = test::under_sanitizer() ? static_cast<int>(ids.size()) + 10 : 400;
  std::size_t bytes_after_warmup = 0;
  std::uint64_t allocations_after_warmup = 0;
  std::size_t max_bytes = 0;
  for (int r = 0; r < rounds; ++r) {
    const std::string& id = ids[static_cast<std::size_t>(r) % ids.size()];
    tiled->remove_tiles({id});
    tiled->publish();
    (void)second.align(scan, guess);
    tiled->add_tile(id, tiles.at(id));
    tiled->publish();
    (void)second.align(scan, guess);
    const std::size_t bytes = tiled->stats().device_bytes;
    max_bytes = std::max(max_bytes, bytes);
    if (r == static_cast<int>(ids.size())) {
      bytes_after_warmup = bytes;
      allocations_after_warmup = detail::device_allocations();
    }
  }
  std::printf("tiled device map over %d tile drops and reloads: %zu device bytes after the first pass over the tiles, "
              "%zu at the end (at most %zu); %llu device allocations after the first pass\n",
              rounds, bytes_after_warmup, tiled->stats().device_bytes, max_bytes,
              static_cast<unsigned long long>(detail::device_allocations() - allocations_after_warmup));
  CHECK(tiled->stats().device_bytes == bytes_after_warmup);
  CHECK(detail::device_allocations() == allocations_after_warmup);
  require_same(second.align(scan, guess), whole);
}
