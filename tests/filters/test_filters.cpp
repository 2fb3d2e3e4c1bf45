// Voxel downsampling against a brute-force centroid per cell, range cropping, and the CUDA
// scan filter's algorithm run on the CPU against both.
#include "../support/test_support.hpp"
#include "../support/voxel_reference.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/log.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <tuple>

using namespace ndtcu;

TEST_CASE("voxel_downsample gives one centroid per occupied cell in lattice order", "[unit][filters]") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-10.f, 10.f);
  PointCloud c;
  for (int i = 0; i < 5000; ++i) {
    c.points.emplace_back(u(rng), u(rng), 0.3f * u(rng));
    c.intensity.push_back(static_cast<float>(i % 13));
  }
  const double leaf = 0.7;
  const float inv = 1.0f / static_cast<float>(leaf);
  // Brute force: group by (k, j, i) so the map's order is the lattice order (x fastest).
  std::map<std::tuple<long, long, long>, std::vector<int>> cells;
  for (int i = 0; i < 5000; ++i) {
    const auto& p = c.points[i];
    cells[{std::lround(std::floor(p.z() * inv)), std::lround(std::floor(p.y() * inv)),
           std::lround(std::floor(p.x() * inv))}]
        .push_back(i);
  }
  PointCloud d = voxel_downsample(c, leaf);
  REQUIRE(d.size() == cells.size());
  std::size_t k = 0;
  for (const auto& [key, members] : cells) {
    Eigen::Vector3f sum = Eigen::Vector3f::Zero();
    float isum = 0;
    for (int m : members) {
      sum += c.points[m];
      isum += c.intensity[m];
    }
    // Points within a cell are summed in pcl::VoxelGrid's sort order, not input order: the
    // float centroid may differ from this input-order sum in the last bits (bit-exact
    // agreement with PCL is checked by the ndt_parity test).
    CHECK((d.points[k] - sum / static_cast<float>(members.size())).cwiseAbs().maxCoeff() < 1e-5f);
    CHECK(d.intensity[k] == Approx(isum / static_cast<float>(members.size())).epsilon(1e-5));
    ++k;
  }
  CHECK_THROWS_AS(voxel_downsample(c, 0.0), ndtcu::Error);
  CHECK_THROWS_AS(voxel_downsample(c, -1.0), ndtcu::Error);
  CHECK(voxel_downsample(PointCloud{}, 1.0).empty());
}

TEST_CASE("crop_range keeps points by distance from the frame origin", "[unit][filters]") {
  PointCloud c;
  for (int i = 0; i < 10; ++i) c.points.emplace_back(static_cast<float>(i), 0.f, 0.f);
  PointCloud r = crop_range(c, 2.0, 5.0);
  REQUIRE(r.size() == 4);
  CHECK(r.points.front().x() == 2.f);
  CHECK(r.points.back().x() == 5.f);
  CHECK_THROWS_AS(crop_range(c, 5.0, 2.0), ndtcu::Error);
  CHECK_THROWS_AS(crop_range(c, -1.0, 2.0), ndtcu::Error);
}

TEST_CASE("log level round trip", "[unit]") {
  LogLevel before = log_level();
  set_log_level(LogLevel::Debug);
  CHECK(log_level() == LogLevel::Debug);
  set_log_level(before);
}

TEST_CASE("the GPU filter's algorithm on the CPU gives voxel_downsample's cells in its order", "[unit][filters]") {
  // The CUDA scan filter's steps (tests/support/voxel_reference.hpp) with the CPU's shared
  // code: the cells and their order must be voxel_downsample's, and only the order of the
  // float sums within a cell may differ. Throws if a key needs more bits than the lattice
  // gives the radix sort.
  std::vector<test::FilterCase> cases = test::filter_cases();
  const std::filesystem::path sample = ndtcu::test::source_dir() / "data" / "sample" / "scans";
  for (const char* name : {"000000.pcd", "000005.pcd", "000009.pcd"}) {
    cases.push_back({std::string("sample ") + name, read_point_cloud((sample / name).string()),
                     {{1.0, 100.0}, {0.0, 1e9}, {3.0, 20.0}}, {0.2, 0.5, 1.0}});
  }
  double worst_near = 0.0, worst_ratio = 0.0;
  for (const auto& c : cases) {
    const double tolerance = test::centroid_tolerance(c.cloud);
    for (const auto& [lo, hi] : c.ranges) {
      INFO(c.name << ", range [" << lo << ", " << hi << "]");
      const PointCloud cropped = crop_range(c.cloud, lo, hi);
      CHECK(test::bit_identical(test::input_order_voxel_filter(c.cloud, lo, hi, 0.0), cropped));
      for (double leaf : c.leaves) {
        INFO("leaf " << leaf);
        const PointCloud cpu = voxel_downsample(cropped, leaf);
        const PointCloud emu = test::input_order_voxel_filter(c.cloud, lo, hi, leaf);
        REQUIRE(emu.size() == cpu.size());
        REQUIRE(emu.intensity.size() == cpu.intensity.size());
        CHECK(emu.origin == cpu.origin);
        const double diff = test::max_point_difference(emu, cpu);
        CHECK(diff < tolerance);
        CHECK(test::max_intensity_difference(emu, cpu) < 1e-5);
        if (tolerance <= 1e-5) worst_near = std::max(worst_near, diff);
        worst_ratio = std::max(worst_ratio, diff / tolerance);
      }
    }
  }
  // On the 64-bit lattice voxel_downsample also sums in input order: equal bits.
  const PointCloud fine = test::synthetic_scene(5, 30000);
  CHECK(test::bit_identical(test::input_order_voxel_filter(fine, 1.0, 100.0, 1e-4),
                            voxel_downsample(crop_range(fine, 1.0, 100.0), 1e-4)));
  std::printf("input-order centroids vs voxel_downsample: within %.3g m on clouds within 40 m, at most %.2f of the "
              "tolerance on all\n",
              worst_near, worst_ratio);
}
