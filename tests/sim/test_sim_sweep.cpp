// Scans taken by a moving sensor: each point at its own time along the drive, in the
// sensor frame of that time, with the exact time; the drive continuous through a sweep;
// no sweep, no change.
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/trajectory.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

using namespace ndtcu;
using namespace ndtcu::sim;
namespace fs = std::filesystem;

namespace {

constexpr double kPi = 3.14159265358979323846;

/// A closed room, inner faces at x, y = +-20 and z = +-10, so every ray returns.
World room() {
  Scene s;
  auto wall = [&](Eigen::Vector3d c, Eigen::Vector3d h) {
    OrientedBox b;
    b.center = c;
    b.half_extents = h;
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

/// Distance of scene point q from the nearest inner face of room().
double off_room_faces(const Eigen::Vector3d& q) {
  return std::min({std::abs(std::abs(q.x()) - 20.0), std::abs(std::abs(q.y()) - 20.0), std::abs(std::abs(q.z()) - 10.0)});
}

/// The pose at `t` of a sensor driving along x at 20 m/s while turning at 90 deg/s.
Eigen::Isometry3d fast_pose(double t) {
  Eigen::Isometry3d p = Eigen::Isometry3d::Identity();
  p.linear() = Eigen::AngleAxisd(0.5 * kPi * t, Eigen::Vector3d::UnitZ()).toRotationMatrix();
  p.translation() = Eigen::Vector3d(-5.0 + 20.0 * t, 1.0, 0.5);
  return p;
}

}  // namespace

TEST_CASE("sweep: every point is where its own pose saw the surface, at its exact time", "[unit][sim]") {
  const World world = room();
  for (const char* name : {"vlp16", "avia"}) {
    CAPTURE(name);
    LidarModel m = lidar_preset(name);
    m.columns = m.pattern == ScanPattern::Rosette ? 2000 : 360;
    m.range_noise_sigma = 0.0;
    m.min_range = 0.0;
    const double sweep = 0.1;
    std::vector<Eigen::Isometry3d> poses;
    for (int c = 0; c < m.columns; ++c) poses.push_back(fast_pose(column_time(m, c, sweep)));
    const Scan scan = cast_sweep(world, m, poses, sweep, 1, 0, 2);
    REQUIRE(scan.cloud.size() > 100);
    REQUIRE(scan.cloud.has_time());
    double worst_own = 0.0, worst_start = 0.0;
    for (std::size_t i = 0; i < scan.cloud.size(); ++i) {
      const int c = static_cast<int>(scan.column[i]);
      // The time of column c, exactly: sweep * c / columns in float.
      CHECK(scan.cloud.time[i] == static_cast<float>(sweep * c / m.columns));
      const Eigen::Vector3d p = scan.cloud.points[i].cast<double>();
      worst_own = std::max(worst_own, off_room_faces(fast_pose(scan.cloud.time[i]) * p));
      worst_start = std::max(worst_start, off_room_faces(poses.front() * p));
    }
    // float32 points of up to 45 m round by 3e-6 m; the time's float rounding (7e-9 s)
    // moves the pose by 1.4e-7 m. Taken all from the sweep's start, the points lie up to
    // the sensor's 2 m and 9 deg of motion off the walls.
    CHECK(worst_own < 1e-4);
    CHECK(worst_start > 0.5);
  }
}

TEST_CASE("sweep: a sensor standing still sweeps the points of its instantaneous scan", "[unit][sim]") {
  const World world = room();
  LidarModel m = lidar_preset("hdl32");
  m.columns = 120;
  m.dropout = 0.1;
  const Eigen::Isometry3d still = fast_pose(0.3);
  const Scan instant = cast_scan(world, m, still, 7, 3, 2);
  const Scan swept = cast_sweep(world, m, std::vector<Eigen::Isometry3d>(120, still), 0.1, 7, 3, 1);
  CHECK(swept.cloud.points == instant.cloud.points);
  CHECK(swept.cloud.intensity == instant.cloud.intensity);
  CHECK(swept.column == instant.column);
  CHECK_FALSE(instant.cloud.has_time());
  CHECK(swept.cloud.has_time());
  CHECK_THROWS_WITH(cast_sweep(world, m, std::vector<Eigen::Isometry3d>(119, still), 0.1, 7, 3),
                    Catch::Contains("119 poses for 120 columns"));
  CHECK_THROWS_WITH(cast_sweep(world, m, std::vector<Eigen::Isometry3d>(120, still), 0.6, 7, 3),
                    Catch::Contains("--sweep-time"));
}

TEST_CASE("sweep: the drive is continuous through a sweep and its frames are generate_trajectory's", "[unit][sim]") {
  WorldSettings ws;
  ws.seed = 5;
  ws.size = 200.0;
  const World world(generate_scene(ws));
  for (const bool kidnap : {false, true}) {
    CAPTURE(kidnap);
    TrajectorySettings ts;
    ts.frames = 30;
    if (kidnap) ts.kidnap_frame = 15;
    const std::vector<TrajectorySample> frames = generate_trajectory(world, ts);
    const Drive drive(world, ts);
    for (int f = 0; f < ts.frames; ++f) {
      const TrajectorySample a = drive.at(f);
      CHECK(a.scene_from_sensor.matrix() == frames[static_cast<std::size_t>(f)].scene_from_sensor.matrix());
      CHECK(a.time == frames[static_cast<std::size_t>(f)].time);
      CHECK(a.distance == frames[static_cast<std::size_t>(f)].distance);
      // Through the sweep: 10 ms steps at 13 m/s at most move at most 0.13 m.
      Eigen::Vector3d before = a.scene_from_sensor.translation();
      for (int k = 1; k <= 10; ++k) {
        const TrajectorySample b = drive.at(f, 0.01 * k);
        CHECK(b.time == Approx(f / ts.rate_hz + 0.01 * k).margin(1e-12));
        CHECK((b.scene_from_sensor.translation() - before).norm() <= 0.01 * ts.max_speed + 1e-9);
        before = b.scene_from_sensor.translation();
      }
      // A whole frame period on is the next frame (where no kidnap comes between).
      if (f + 1 < ts.frames && f + 1 != ts.kidnap_frame) {
        CHECK((drive.at(f, 1.0 / ts.rate_hz).scene_from_sensor.translation() -
               frames[static_cast<std::size_t>(f) + 1].scene_from_sensor.translation())
                  .norm() < 1e-9);
      }
    }
    CHECK_THROWS_WITH(drive.at(ts.frames), Catch::Contains("no pose at frame 30"));
    CHECK_THROWS_WITH(drive.at(0, -0.01), Catch::Contains("offsets 0 to 0.5 s"));
  }
}

TEST_CASE("sweep: the fast scenario reaches 20 m/s and 90 deg/s", "[unit][sim]") {
  SimulationSettings s;
  s.world.seed = 1;
  s.trajectory.frames = 300;
  apply_scenario(s, Scenario::Fast);
  const World world(generate_scene(s.world));
  const Drive drive(world, s.trajectory);
  double fastest = 0.0, fastest_turn = 0.0;
  for (int f = 0; f < s.trajectory.frames; ++f) {
    for (int k = 0; k < 10; ++k) {
      const TrajectorySample a = drive.at(f, 0.01 * k), b = drive.at(f, 0.01 * (k + 1));
      fastest = std::max(fastest, (b.scene_from_sensor.translation() - a.scene_from_sensor.translation()).norm() / 0.01);
      const double turn = Eigen::AngleAxisd(a.scene_from_sensor.linear().transpose() * b.scene_from_sensor.linear()).angle();
      fastest_turn = std::max(fastest_turn, turn / 0.01 * 180.0 / kPi);
    }
  }
  std::printf("fast scenario: up to %.1f m/s and %.0f deg/s over 30 s\n", fastest, fastest_turn);
  CHECK(fastest >= 20.0);
  CHECK(fastest_turn >= 90.0);
}

TEST_CASE("sweep: simulate writes t and the poses at each sweep's start; no sweep writes what it did", "[unit][sim]") {
  SimulationSettings s;
  s.world.seed = 3;
  s.world.size = 150.0;
  s.lidar.columns = 90;
  s.map.voxel = 1.0;
  s.trajectory.frames = 3;
  const fs::path still = test::temp_dir("sweep_none"), swept = test::temp_dir("sweep_0.1");
  simulate(s, still.string());
  s.sweep_time = 0.1;
  simulate(s, swept.string());
  CHECK(test::read_bytes(still / "poses_tum.txt") == test::read_bytes(swept / "poses_tum.txt"));
  CHECK(test::read_bytes(still / "map.pcd") == test::read_bytes(swept / "map.pcd"));
  CloudInfo info;
  const PointCloud a = read_point_cloud((still / "scans/000002.pcd").string());
  const PointCloud b = read_point_cloud((swept / "scans/000002.pcd").string(), {}, &info);
  CHECK_FALSE(a.has_time());
  REQUIRE(b.has_time());
  CHECK(info.time_field == "t");
  CHECK(*std::min_element(b.time.begin(), b.time.end()) >= 0.0f);
  CHECK(*std::max_element(b.time.begin(), b.time.end()) < 0.1f);
  CHECK(a.points != b.points);  // the sensor moved during the sweep
  const auto json = [](const fs::path& p) { return nlohmann::json::parse(std::ifstream(p / "world.json")); };
  CHECK(json(still)["sensor"]["motion_distortion"] == false);
  CHECK_FALSE(json(still)["sensor"].contains("sweep_time_s"));
  CHECK(json(swept)["sensor"]["motion_distortion"] == true);
  CHECK(json(swept)["sensor"]["sweep_time_s"] == 0.1);
  CHECK(json(swept)["scans"]["fields"].back() == "t");
  s.trajectory.rate_hz = 20.0;  // a 0.1 s sweep in a 0.05 s frame period
  CHECK_THROWS_WITH(validate(s), Catch::Contains("--sweep-time"));
}
