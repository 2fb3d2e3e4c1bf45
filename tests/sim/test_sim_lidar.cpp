// The simulated LiDAR: presets, ring geometry, noise, dropout, intensity, threads and
// the errors for models that make no sense.
#include "../support/test_support.hpp"

#include <ndtcu/simulator.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace ndtcu;
using namespace ndtcu::sim;

namespace {

constexpr double kPi = 3.14159265358979323846;

/// A closed 40 m room (floor, ceiling, four walls), so every ray returns.
World room() {
  Scene s;
  auto wall = [&](Eigen::Vector3d c, Eigen::Vector3d h) {
    OrientedBox b;
    b.center = c;
    b.half_extents = h;
    b.reflectivity = 0.5f;
    s.boxes.push_back(b);
  };
  wall({0, 0, -11}, {21, 21, 1});
  wall({0, 0, 11}, {21, 21, 1});
  wall({-21, 0, 0}, {1, 21, 12});
  wall({21, 0, 0}, {1, 21, 12});
  wall({0, -21, 0}, {21, 1, 12});
  wall({0, 21, 0}, {21, 1, 12});
  return World(s);
}

/// A wall filling x = 20 (its face toward the sensor), and nothing else.
World wall_ahead(float reflectivity) {
  Scene s;
  OrientedBox b;
  b.center = {21, 0, 0};
  b.half_extents = {1, 200, 200};
  b.reflectivity = reflectivity;
  s.boxes.push_back(b);
  return World(s);
}

Eigen::Isometry3d pose(double yaw, double pitch, const Eigen::Vector3d& t) {
  Eigen::Isometry3d p = Eigen::Isometry3d::Identity();
  p.linear() = (Eigen::AngleAxisd(yaw, Eigen::Vector3d::UnitZ()) * Eigen::AngleAxisd(pitch, Eigen::Vector3d::UnitY()))
                   .toRotationMatrix();
  p.translation() = t;
  return p;
}

}  // namespace

TEST_CASE("sensor presets have the datasheet ring tables", "[unit][sim]") {
  const auto hdl32 = lidar_preset("hdl32");
  REQUIRE(hdl32.ring_elevations_deg.size() == 32);
  CHECK(hdl32.ring_elevations_deg.front() == Approx(-30.67));
  CHECK(hdl32.ring_elevations_deg.back() == Approx(10.67));
  CHECK(hdl32.ring_elevations_deg[1] - hdl32.ring_elevations_deg[0] == Approx(1.3335).margin(1e-3));  // 41.34 / 31
  const auto hdl64 = lidar_preset("hdl64");
  REQUIRE(hdl64.ring_elevations_deg.size() == 64);
  CHECK(*std::min_element(hdl64.ring_elevations_deg.begin(), hdl64.ring_elevations_deg.end()) == Approx(-24.9));
  CHECK(*std::max_element(hdl64.ring_elevations_deg.begin(), hdl64.ring_elevations_deg.end()) == Approx(2.0));
  // Upper block spacing 1/3 deg, lower about 1/2 deg.
  CHECK(hdl64.ring_elevations_deg[63] - hdl64.ring_elevations_deg[62] == Approx(1.0 / 3.0).margin(2e-3));
  CHECK(hdl64.ring_elevations_deg[1] - hdl64.ring_elevations_deg[0] == Approx(0.518).margin(2e-3));
  for (const char* name : {"os1-64", "os0-64"}) {
    const auto m = lidar_preset(name);
    const double half_fov = std::string(name) == "os1-64" ? 22.5 : 45.0;
    REQUIRE(m.ring_elevations_deg.size() == 64);
    CHECK(m.ring_elevations_deg.front() == Approx(-half_fov));
    CHECK(m.ring_elevations_deg.back() == Approx(half_fov));
    CHECK(m.columns == 1024);
  }
  const auto vlp16 = lidar_preset("vlp16");
  REQUIRE(vlp16.ring_elevations_deg.size() == 16);
  CHECK(vlp16.ring_elevations_deg.front() == Approx(-15.0));
  CHECK(vlp16.ring_elevations_deg[1] - vlp16.ring_elevations_deg[0] == Approx(2.0));
  CHECK(vlp16.ring_elevations_deg.back() == Approx(15.0));
  const auto avia = lidar_preset("avia");
  CHECK(avia.pattern == ScanPattern::Rosette);
  CHECK(avia.fov_deg == 70.4);
  CHECK(avia.rays() == 24000u);
  for (const char* name : {"hdl32", "hdl64", "os1-64", "os0-64", "vlp16"}) {
    CHECK(lidar_preset(name).pattern == ScanPattern::Spinning);
  }
  CHECK(lidar_preset_names().size() == 6);
  CHECK_THROWS_WITH(lidar_preset("vlp32"), Catch::Contains("--sensor") && Catch::Contains("'vlp32'") &&
                                               Catch::Contains("hdl32, hdl64, os1-64, os0-64, vlp16, avia"));
}

TEST_CASE("every ring returns one point per column at its elevation in a closed room", "[unit][sim]") {
  const World w = room();
  for (const char* name : {"hdl32", "hdl64", "os0-64", "vlp16"}) {
    CAPTURE(name);
    LidarModel m = lidar_preset(name);
    m.columns = 360;
    m.range_noise_sigma = 0.0;
    // The sensor is turned and tilted: elevations are in its own frame all the same.
    const Scan scan = cast_scan(w, m, pose(0.5, 0.1, {1, -2, 0.5}), 1, 0);
    REQUIRE(scan.rays == m.ring_elevations_deg.size() * 360);
    REQUIRE(scan.cloud.size() == scan.rays);
    std::vector<std::size_t> per_ring(m.ring_elevations_deg.size(), 0);
    double worst_el = 0, worst_az = 0;
    for (std::size_t i = 0; i < scan.cloud.size(); ++i) {
      const Eigen::Vector3d p = scan.cloud.points[i].cast<double>();
      ++per_ring[scan.ring[i]];
      const double el = std::atan2(p.z(), std::hypot(p.x(), p.y())) * 180 / kPi;
      worst_el = std::max(worst_el, std::abs(el - m.ring_elevations_deg[scan.ring[i]]));
      const double az = std::atan2(p.y(), p.x()), want = 2 * kPi * scan.column[i] / m.columns;
      worst_az = std::max(worst_az, std::abs(std::remainder(az - want, 2 * kPi)));
    }
    for (std::size_t r = 0; r < per_ring.size(); ++r) CHECK(per_ring[r] == 360u);
    // float32 points at up to ~35 m resolve directions to about 1e-7 rad.
    CHECK(worst_el < 1e-4);
    CHECK(worst_az < 2e-6);
    // Column-major order: ring varies fastest.
    CHECK(scan.ring[1] == 1);
    CHECK(scan.column[m.ring_elevations_deg.size()] == 1);
  }
}

TEST_CASE("range noise is Gaussian with the configured sigma; dropout removes that fraction", "[unit][sim]") {
  const World w = wall_ahead(0.5f);
  LidarModel m;
  m.ring_elevations_deg = {-10, -5, 0, 5, 10};
  m.columns = 3600;
  m.range_noise_sigma = 0.05;
  m.max_range = 200;
  const Scan scan = cast_scan(w, m, Eigen::Isometry3d::Identity(), 42, 7);
  // Rays toward the wall: |azimuth| < ~84 deg. The true range is 20 / x-component.
  std::vector<double> err;
  for (std::size_t i = 0; i < scan.cloud.size(); ++i) {
    const Eigen::Vector3d p = scan.cloud.points[i].cast<double>();
    const Eigen::Vector3d d = ray_direction(m, scan.ring[i], static_cast<int>(scan.column[i]));
    err.push_back(p.norm() - 20.0 / d.x());
  }
  REQUIRE(err.size() > 5000);
  const double n = static_cast<double>(err.size());
  const double mean = std::accumulate(err.begin(), err.end(), 0.0) / n;
  double var = 0;
  for (double e : err) var += (e - mean) * (e - mean);
  const double sd = std::sqrt(var / (n - 1));
  // Standard errors: mean 0.05 / sqrt(n) < 7e-4, sigma about 0.05 / sqrt(2n) < 5e-4.
  CHECK(std::abs(mean) < 0.0035);
  CHECK(sd == Approx(0.05).margin(0.0025));
  std::size_t beyond_3sigma = 0;
  for (double e : err) beyond_3sigma += std::abs(e - mean) > 0.15 ? 1 : 0;
  CHECK(static_cast<double>(beyond_3sigma) / n < 0.006);  // 0.27% for a Gaussian

  // The same seed and frame give the same noise; another frame gives other noise.
  CHECK(cast_scan(w, m, Eigen::Isometry3d::Identity(), 42, 7).cloud.points == scan.cloud.points);
  CHECK(cast_scan(w, m, Eigen::Isometry3d::Identity(), 42, 8).cloud.points != scan.cloud.points);

  const World closed = room();
  m.range_noise_sigma = 0;
  m.dropout = 0.3;
  const Scan dropped = cast_scan(closed, m, Eigen::Isometry3d::Identity(), 1, 0);
  const double kept = static_cast<double>(dropped.cloud.size()) / static_cast<double>(dropped.rays);
  CHECK(kept == Approx(0.7).margin(0.015));  // 18000 rays: standard error 0.0034
}

TEST_CASE("intensity follows reflectivity and the cosine of incidence", "[unit][sim]") {
  const World w = wall_ahead(0.4f);
  LidarModel m;
  m.ring_elevations_deg = {0.0};
  m.columns = 8;  // azimuths 0, 45, ... deg: 0 and 45 face the wall
  m.range_noise_sigma = 0;
  const Scan scan = cast_scan(w, m, Eigen::Isometry3d::Identity(), 1, 0);
  REQUIRE(scan.cloud.size() == 3);  // azimuths 0, 45 and 315 deg
  CHECK(scan.cloud.intensity[0] == Approx(255 * 0.4).epsilon(1e-6));
  CHECK(scan.cloud.intensity[1] == Approx(255 * 0.4 * std::cos(kPi / 4)).epsilon(1e-6));
  CHECK(scan.cloud.points[1].norm() == Approx(20 * std::sqrt(2.0)).epsilon(1e-6));
}

TEST_CASE("returns nearer than the minimum range are dropped, and still occlude", "[unit][sim]") {
  Scene s;
  OrientedBox near_box, far_box;
  near_box.center = {0.7, 0, 0};
  near_box.half_extents = {0.1, 0.1, 0.1};
  far_box.center = {10, 0, 0};
  far_box.half_extents = {1, 5, 5};
  s.boxes = {near_box, far_box};
  const World w(s);
  LidarModel m;
  m.ring_elevations_deg = {0.0};
  m.columns = 4;
  m.min_range = 1.0;
  m.range_noise_sigma = 0;
  const Scan scan = cast_scan(w, m, Eigen::Isometry3d::Identity(), 1, 0);
  CHECK(scan.cloud.empty());  // azimuth 0 meets the near box at 0.6 m first
  const Scan moved = cast_scan(w, m, pose(0, 0, {0, 0.5, 0}), 1, 0);
  REQUIRE(moved.cloud.size() == 1);
  CHECK(moved.cloud.points[0].x() == Approx(9.0));
}

TEST_CASE("a scan does not depend on the number of threads", "[unit][sim]") {
  WorldSettings ws;
  ws.seed = 9;
  ws.size = 80;
  const World w(generate_scene(ws));
  LidarModel m = lidar_preset("hdl32");
  m.columns = 500;
  m.dropout = 0.05;
  TrajectorySettings ts;
  ts.frames = 1;
  const auto drive = generate_trajectory(w, ts);
  const Scan one = cast_scan(w, m, drive[0].scene_from_sensor, 5, 3, 1);
  const Scan three = cast_scan(w, m, drive[0].scene_from_sensor, 5, 3, 3);
  REQUIRE(one.cloud.size() > 5000);
  CHECK(one.cloud.points == three.cloud.points);
  CHECK(one.cloud.intensity == three.cloud.intensity);
  CHECK(one.ring == three.ring);
}

TEST_CASE("sensor models that make no sense are refused, naming the option and value", "[unit][sim]") {
  const World w = room();
  LidarModel m = lidar_preset("hdl32");
  const auto at = Eigen::Isometry3d::Identity();
  LidarModel no_rings = m;
  no_rings.ring_elevations_deg.clear();
  CHECK_THROWS_WITH(cast_scan(w, no_rings, at, 1, 0), Catch::Contains("has no rings"));
  LidarModel negative_range = m;
  negative_range.max_range = -5;
  CHECK_THROWS_WITH(cast_scan(w, negative_range, at, 1, 0), Catch::Contains("--max-range") && Catch::Contains("-5"));
  LidarModel short_range = m;
  short_range.max_range = 0.5;  // below the preset's 1 m minimum range
  CHECK_THROWS_WITH(validate(short_range), Catch::Contains("--max-range") && Catch::Contains("min range 1"));
  LidarModel zero_columns = m;
  zero_columns.columns = 0;
  CHECK_THROWS_WITH(validate(zero_columns), Catch::Contains("--columns") && Catch::Contains("got 0"));
  LidarModel bad_noise = m;
  bad_noise.range_noise_sigma = -0.1;
  CHECK_THROWS_WITH(validate(bad_noise), Catch::Contains("--noise") && Catch::Contains("-0.1"));
  LidarModel bad_dropout = m;
  bad_dropout.dropout = 1.0;
  CHECK_THROWS_WITH(validate(bad_dropout), Catch::Contains("--dropout") && Catch::Contains("got 1"));
  LidarModel straight_up = m;
  straight_up.ring_elevations_deg[3] = 90;
  CHECK_THROWS_WITH(validate(straight_up), Catch::Contains("ring 3 elevation"));
  CHECK_THROWS_AS(validate(no_rings), Error);
}

TEST_CASE("the avia rosette: every ray inside its cone, filling it, never the same rays twice", "[unit][sim]") {
  const World w = room();
  LidarModel m = lidar_preset("avia");
  REQUIRE(m.pattern == ScanPattern::Rosette);
  m.range_noise_sigma = 0.0;
  m.columns = 6000;
  const Eigen::Isometry3d at = pose(0.3, 0.1, {1, -2, 0.5});
  const Scan a = cast_scan(w, m, at, 1, 0), b = cast_scan(w, m, at, 1, 1);
  REQUIRE(a.rays == 6000u);
  REQUIRE(a.cloud.size() == a.rays);  // a closed room: every ray returns
  const double half = 0.5 * m.fov_deg * kPi / 180.0;
  double widest = 0.0, worst_dir = 0.0;
  // Coverage of the cone: 10 x 10 cells of the deflection's tangent plane inside it.
  std::vector<int> cells(100, 0);
  for (std::size_t i = 0; i < a.cloud.size(); ++i) {
    const Eigen::Vector3d p = a.cloud.points[i].cast<double>().normalized();
    CHECK(a.ring[i] == 0);
    widest = std::max(widest, std::acos(std::clamp(p.x(), -1.0, 1.0)));
    worst_dir = std::max(worst_dir, (p - ray_direction(m, 0, static_cast<int>(a.column[i]), 0)).norm());
    const double u = std::atan2(p.y(), p.x()) / half, v = std::atan2(p.z(), p.x()) / half;
    ++cells[static_cast<std::size_t>(std::clamp(static_cast<int>((u + 1) * 5), 0, 9) * 10 +
                                     std::clamp(static_cast<int>((v + 1) * 5), 0, 9))];
  }
  CHECK(widest <= half + 1e-6);
  CHECK(widest > 0.95 * half);
  CHECK(worst_dir < 1e-5);
  // The cells whose centre lies well inside the cone (within 0.8 of its half angle) all get rays.
  for (int cu = 0; cu < 10; ++cu) {
    for (int cv = 0; cv < 10; ++cv) {
      const double u = (cu + 0.5) / 5 - 1, v = (cv + 0.5) / 5 - 1;
      if (std::hypot(u, v) < 0.8) CHECK(cells[static_cast<std::size_t>(cu * 10 + cv)] > 0);
    }
  }
  // The next scan's rays fall elsewhere (the curve goes on): no direction repeats.
  std::size_t repeated = 0;
  for (int k = 0; k < m.columns; k += 7) {
    repeated += (ray_direction(m, 0, k, 0) - ray_direction(m, 0, k, 1)).norm() < 1e-6;
  }
  CHECK(repeated == 0);
  CHECK_FALSE(std::equal(a.cloud.points.begin(), a.cloud.points.end(), b.cloud.points.begin()));

  LidarModel bad = lidar_preset("avia");
  bad.fov_deg = 180.0;
  CHECK_THROWS_WITH(validate(bad), Catch::Contains("field of view must be in (0, 180) deg, got 180"));
  bad = lidar_preset("avia");
  bad.ring_elevations_deg = {0.0, 1.0};
  CHECK_THROWS_WITH(validate(bad), Catch::Contains("a rosette has one laser"));
}
