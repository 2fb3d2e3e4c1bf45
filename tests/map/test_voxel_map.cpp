// VoxelMap statistics against a brute-force computation, both covariance conventions,
// the map origin, the hash lookup, the dense index and the neighbour searches.
#include "../support/test_support.hpp"
#include "../ndt/synthetic.hpp"

#include "ndt_point.hpp"
#include "ndt_step.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/voxel_map.hpp>

#include "ndt/evaluator.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <vector>

using namespace ndtcu;
namespace m = ndtcu::math;

namespace {

using Cell = std::tuple<long, long, long>;  // (k, j, i): std::map order is PCL's (x fastest)

std::map<Cell, std::vector<Eigen::Vector3d>> brute_cells(const PointCloud& c, double res) {
  const float inv = 1.0f / static_cast<float>(res);
  std::map<Cell, std::vector<Eigen::Vector3d>> cells;
  for (const auto& p : c.points) {
    cells[{std::lround(std::floor(p.z() * inv)), std::lround(std::floor(p.y() * inv)),
           std::lround(std::floor(p.x() * inv))}]
        .push_back(p.cast<double>());
  }
  return cells;
}

// Two-pass covariance with the eigenvalue floor of Magnusson eq. 6.11.
Eigen::Matrix3d brute_covariance(const std::vector<Eigen::Vector3d>& pts, bool autoware, double ratio) {
  Eigen::Vector3d mu = Eigen::Vector3d::Zero();
  for (const auto& p : pts) mu += p;
  mu /= static_cast<double>(pts.size());
  Eigen::Matrix3d s = Eigen::Matrix3d::Zero();
  for (const auto& p : pts) s += (p - mu) * (p - mu).transpose();
  if (autoware) s += Eigen::Matrix3d::Identity();
  Eigen::Matrix3d cov = s / (static_cast<double>(pts.size()) - 1.0);
  Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> es(cov);
  Eigen::Vector3d ev = es.eigenvalues();
  const double floor_value = ratio * ev(2);
  if (ev(0) < floor_value) {
    ev(0) = floor_value;
    ev(1) = std::max(ev(1), floor_value);
    cov = es.eigenvectors() * ev.asDiagonal() * es.eigenvectors().transpose();
  }
  return cov;
}

VoxelMapOptions options(double res, CovarianceMode mode, int threads = 2) {
  VoxelMapOptions o;
  o.resolution = res;
  o.covariance = mode;
  o.threads = threads;
  return o;
}

}  // namespace

TEST_CASE("Voxel means and covariances equal a brute-force computation", "[unit][voxel_map]") {
  PointCloud cloud = test::synthetic_scene(7, 20000, 0.02f);
  // A cell with 5 points (dropped: fewer than 6) and one with 8 identical points
  // (zero covariance: dropped as singular).
  for (int i = 0; i < 5; ++i) cloud.points.emplace_back(40.1f + 0.1f * i, 40.2f, 40.3f);
  for (int i = 0; i < 8; ++i) cloud.points.emplace_back(-40.5f, -40.5f, 40.5f);
  for (auto mode : {CovarianceMode::Pcl, CovarianceMode::Autoware}) {
    const double res = 1.0;
    const VoxelMap map = VoxelMap::build(cloud, options(res, mode));
    const auto cells = brute_cells(cloud, res);
    std::size_t v = 0, sparse = 0, singular = 0;
    for (const auto& [cell, pts] : cells) {
      if (pts.size() < 6) {
        ++sparse;
        continue;
      }
      const Eigen::Matrix3d cov = brute_covariance(pts, mode == CovarianceMode::Autoware, 0.01);
      Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> es(cov);
      if (!(es.eigenvalues()(2) > 1e-12)) {
        ++singular;
        continue;
      }
      REQUIRE(v < map.size());
      INFO("cell " << std::get<2>(cell) << " " << std::get<1>(cell) << " " << std::get<0>(cell));
      CHECK(map.cells()[v][0] == std::get<2>(cell));
      CHECK(map.cells()[v][1] == std::get<1>(cell));
      CHECK(map.cells()[v][2] == std::get<0>(cell));
      CHECK(map.point_counts()[v] == pts.size());
      Eigen::Vector3d mu = Eigen::Vector3d::Zero();
      for (const auto& p : pts) mu += p;
      mu /= static_cast<double>(pts.size());
      CHECK((map.mean_world(v) - mu).norm() < 1e-12);
      // Single-pass vs two-pass covariance: equal to ~1e-12 relative for these magnitudes.
      CHECK((map.covariance_matrix(v) - cov).norm() < 1e-9 * cov.norm());
      const Eigen::Matrix3d icov = cov.inverse();
      CHECK((map.inverse_covariance_matrix(v) - icov).norm() < 1e-7 * icov.norm());
      ++v;
    }
    CHECK(v == map.size());
    CHECK(map.stats().sparse_cells == sparse);
    CHECK(map.stats().singular_cells == singular);
    // 8 identical points: zero covariance for PCL, I/(n-1) for Autoware.
    CHECK(singular == (mode == CovarianceMode::Pcl ? 1u : 0u));
  }
}

TEST_CASE("Autoware covariance is (S + I)/(n - 1) and scores differently from PCL's", "[unit][voxel_map]") {
  // One voxel of 10 points: S + I against the PCL covariance times (n - 1).
  PointCloud c;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.1f, 1.9f);
  for (int i = 0; i < 10; ++i) c.points.emplace_back(u(rng), u(rng), 0.5f * u(rng));
  const VoxelMap pcl_map = VoxelMap::build(c, options(2.0, CovarianceMode::Pcl));
  const VoxelMap aw_map = VoxelMap::build(c, options(2.0, CovarianceMode::Autoware));
  REQUIRE(pcl_map.size() == 1);
  REQUIRE(aw_map.size() == 1);
  const Eigen::Matrix3d expect = (pcl_map.covariance_matrix(0) * 9.0 + Eigen::Matrix3d::Identity()) / 9.0;
  CHECK((aw_map.covariance_matrix(0) - expect).norm() < 1e-12);
  CHECK((aw_map.covariance_matrix(0) - pcl_map.covariance_matrix(0)).norm() > 0.1);

  // The score of the same scan at the same pose differs between the conventions.
  const PointCloud scene = test::synthetic_scene(11);
  AlignSettings s = autoware_preset();
  Aligner a(s);
  a.set_target(scene);
  s.covariance = CovarianceMode::Pcl;
  Aligner b(s);
  b.set_target(scene);
  Pose6 p;
  p << 0.2, -0.1, 0.0, 0.0, 0.0, 0.02;
  const auto ra = a.evaluate(scene, pose_to_matrix(p));
  const auto rb = b.evaluate(scene, pose_to_matrix(p));
  CHECK(ra.correspondences == rb.correspondences);
  CHECK(std::abs(ra.score - rb.score) > 1e-3 * std::abs(rb.score));
}

TEST_CASE("The map origin keeps UTM-sized maps exact", "[unit][voxel_map]") {
  PointCloud local = test::synthetic_scene(5, 5000);
  PointCloud utm = local;
  utm.origin = Eigen::Vector3d(652000.0, 5412000.0, 310.0);
  const VoxelMap a = VoxelMap::build(local, options(2.0, CovarianceMode::Autoware));
  const VoxelMap b = VoxelMap::build(utm, options(2.0, CovarianceMode::Autoware));
  REQUIRE(a.size() == b.size());
  CHECK(b.origin() == utm.origin);
  for (std::size_t v = 0; v < a.size(); ++v) {
    CHECK(a.mean(0)[v] == b.mean(0)[v]);
    CHECK((b.mean_world(v) - a.mean_world(v) - utm.origin).norm() < 1e-9);
  }
}

TEST_CASE("Voxel map build is identical for any thread count", "[unit][voxel_map]") {
  const PointCloud cloud = test::synthetic_scene(9, 40000);
  const VoxelMap one = VoxelMap::build(cloud, options(1.0, CovarianceMode::Pcl, 1));
  for (int t : {2, 3, 8}) {
    const VoxelMap many = VoxelMap::build(cloud, options(1.0, CovarianceMode::Pcl, t));
    REQUIRE(many.size() == one.size());
    for (int e = 0; e < 6; ++e) CHECK(many.inverse_covariance(e) == one.inverse_covariance(e));
    for (int a = 0; a < 3; ++a) CHECK(many.mean(a) == one.mean(a));
  }
}

TEST_CASE("Voxel map rejects bad options and far points", "[unit][voxel_map]") {
  PointCloud c = test::synthetic_scene(1, 100);
  CHECK_THROWS_AS(VoxelMap::build(c, options(0.0, CovarianceMode::Pcl)), Error);
  VoxelMapOptions o = options(1.0, CovarianceMode::Pcl);
  o.min_points = 2;
  CHECK_THROWS_AS(VoxelMap::build(c, o), Error);
  c.points.emplace_back(3.0e6f, 0.f, 0.f);  // beyond 2^20 cells of 1 m from the origin
  CHECK_THROWS_AS(VoxelMap::build(c, options(1.0, CovarianceMode::Pcl)), Error);
  CHECK(VoxelMap::build(PointCloud{}, options(1.0, CovarianceMode::Pcl)).empty());
}

TEST_CASE("a resolution too fine for the map is named as such, not as an origin to move", "[unit][voxel_map]") {
  // The scene spreads over tens of metres: 2^21 voxels of 1e-9 m (2 mm) cannot hold it,
  // whatever the origin; it was told to "read the map with an origin near its points".
  const PointCloud c = test::synthetic_scene(1, 100);
  CHECK_THROWS_WITH(VoxelMap::build(c, options(1e-9, CovarianceMode::Pcl)),
                    Catch::Contains("resolution 1e-09 m is too small for this cloud") &&
                        Catch::Contains("use a resolution of at least") && !Catch::Contains("origin"));
  // Below what float32 holds: the lattice's inverse resolution would be infinite.
  CHECK_THROWS_WITH(VoxelMap::build(c, options(1e-300, CovarianceMode::Pcl)),
                    Catch::Contains("resolution 1e-300 m is too small: the lattice keeps it in float32") &&
                        !Catch::Contains("origin"));
  // Points far from their origin in a small cloud: the origin is what to change.
  PointCloud far = c;
  for (auto& p : far.points) p.x() += 3.0e6f;
  CHECK_THROWS_WITH(VoxelMap::build(far, options(1.0, CovarianceMode::Pcl)),
                    Catch::Contains("from the cloud origin; read the map with an origin near its points"));
}


TEST_CASE("Radius search equals a brute-force search over every voxel, in FLANN's order", "[unit][voxel_map]") {
  const PointCloud cloud = test::synthetic_scene(13, 30000);
  for (double res : {1.0, 2.0}) {
    const VoxelMap map = VoxelMap::build(cloud, options(res, CovarianceMode::Pcl));
    const auto g = detail::host_view(map);
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> ux(-13.f, 13.f), uy(-10.f, 10.f), uz(-2.5f, 3.5f);
    std::size_t total = 0;
    for (int q = 0; q < 3000; ++q) {
      const float p[3] = {ux(rng), uy(rng), uz(rng)};
      std::vector<std::pair<float, std::int32_t>> brute;
      for (std::size_t v = 0; v < map.size(); ++v) {
        const float dx = p[0] - map.centroid(0)[v], dy = p[1] - map.centroid(1)[v], dz = p[2] - map.centroid(2)[v];
        const float d = dx * dx + dy * dy + dz * dz;
        if (d < map.radius_squared()) brute.emplace_back(d, static_cast<std::int32_t>(v));
      }
      std::sort(brute.begin(), brute.end());
      std::int32_t got[m::kMaxNeighbours];
      const int n = m::find_neighbours(g, m::Search::Radius, p, got);
      REQUIRE(static_cast<std::size_t>(n) == brute.size());
      for (int k = 0; k < n; ++k) CHECK(got[k] == brute[static_cast<std::size_t>(k)].second);
      total += brute.size();

      // Direct searches: the lattice cells around the point, centre first.
      std::int32_t d27[m::kMaxNeighbours], d7[m::kMaxNeighbours], d1[m::kMaxNeighbours];
      const int n27 = m::find_neighbours(g, m::Search::Direct27, p, d27);
      const int n7 = m::find_neighbours(g, m::Search::Direct7, p, d7);
      const int n1 = m::find_neighbours(g, m::Search::Direct1, p, d1);
      const long ci = std::lround(std::floor(p[0] * map.inverse_resolution()));
      const long cj = std::lround(std::floor(p[1] * map.inverse_resolution()));
      const long ck = std::lround(std::floor(p[2] * map.inverse_resolution()));
      int expect27 = 0, expect7 = 0;
      for (int dk = -1; dk <= 1; ++dk)
        for (int dj = -1; dj <= 1; ++dj)
          for (int di = -1; di <= 1; ++di) {
            if (map.find(ci + di, cj + dj, ck + dk) < 0) continue;
            ++expect27;
            if (std::abs(di) + std::abs(dj) + std::abs(dk) <= 1) ++expect7;
          }
      CHECK(n27 == expect27);
      CHECK(n7 == expect7);
      const std::int32_t centre = map.find(ci, cj, ck);
      CHECK(n1 == (centre >= 0 ? 1 : 0));
      if (centre >= 0) {
        CHECK(d1[0] == centre);
        CHECK(d7[0] == centre);
        CHECK(d27[0] == centre);
      }
      // Every radius neighbour is in the 27-cell block.
      for (int k = 0; k < n; ++k) CHECK(std::find(d27, d27 + n27, got[k]) != d27 + n27);
    }
    CHECK(total > 3000);  // the queries do find voxels
  }
}

TEST_CASE("The dense index holds every voxel and finds what the hash finds, inside and outside its box",
          "[unit][voxel_map]") {
  const PointCloud cloud = test::synthetic_scene(17, 30000);
  CHECK(detail::occupied_box(VoxelMap::build(PointCloud{}, options(1.0, CovarianceMode::Pcl))).cells() == 0.0);
  for (double res : {1.0, 2.0}) {
    const VoxelMap map = VoxelMap::build(cloud, options(res, CovarianceMode::Pcl));
    const detail::LatticeBox box = detail::occupied_box(map);
    const detail::DenseVoxelIndex dense = detail::DenseVoxelIndex::build(map, box);
    REQUIRE(static_cast<double>(dense.cells.size()) == box.cells());
    // Every voxel at its cell, every other cell empty, and the box as tight as the voxels.
    std::size_t occupied = 0;
    for (std::int32_t v : dense.cells) occupied += v >= 0;
    CHECK(occupied == map.size());
    std::int64_t lo[3] = {box.dims[0], box.dims[1], box.dims[2]}, hi[3] = {-1, -1, -1};
    for (std::size_t v = 0; v < map.size(); ++v) {
      std::int64_t a[3];
      for (int k = 0; k < 3; ++k) {
        a[k] = map.cells()[v][static_cast<std::size_t>(k)] - box.min[k];
        lo[k] = std::min(lo[k], a[k]);
        hi[k] = std::max(hi[k], a[k]);
      }
      CHECK(dense.cells[static_cast<std::size_t>((a[2] * box.dims[1] + a[1]) * box.dims[0] + a[0])] ==
            static_cast<std::int32_t>(v));
    }
    for (int k = 0; k < 3; ++k) {
      CHECK(lo[k] == 0);
      CHECK(hi[k] == box.dims[k] - 1);
    }

    // Queries over the box and two cells beyond each face: both lookups give the same
    // voxels in the same order, through the dense fast path and off it.
    const auto hash_view = detail::host_view(map);
    const auto dense_view = detail::host_view(map, &dense);
    REQUIRE(dense_view.dense != nullptr);
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    int inside = 0, near_or_outside = 0;
    for (int q = 0; q < 20000; ++q) {
      float p[3];
      for (int k = 0; k < 3; ++k) {
        const double from = static_cast<double>(box.min[k] - 2) * res, extent = (box.dims[k] + 4) * res;
        p[k] = static_cast<float>(from + extent * u(rng));
      }
      for (auto search : {m::Search::Radius, m::Search::Direct27, m::Search::Direct7, m::Search::Direct1}) {
        std::int32_t a[m::kMaxNeighbours], b[m::kMaxNeighbours];
        const int na = m::find_neighbours(hash_view, search, p, a);
        const int nb = m::find_neighbours(dense_view, search, p, b);
        REQUIRE(na == nb);
        for (int k = 0; k < na; ++k) CHECK(a[k] == b[k]);
        if (search == m::Search::Direct27 && na > 0) {
          const bool fast = m::dense_block_centre(dense_view, m::lattice_index(p[0], map.inverse_resolution()),
                                                  m::lattice_index(p[1], map.inverse_resolution()),
                                                  m::lattice_index(p[2], map.inverse_resolution())) != nullptr;
          (fast ? inside : near_or_outside) += 1;
        }
      }
    }
    CHECK(inside > 1000);
    CHECK(near_or_outside > 100);
  }
}
