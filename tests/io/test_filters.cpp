// Voxel downsampling against a brute-force centroid per cell, and range cropping.
#include "../support/test_support.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/log.hpp>

#include <cmath>
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
