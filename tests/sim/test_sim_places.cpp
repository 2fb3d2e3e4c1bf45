// The simulator's places that repeat themselves (a street of identical houses, parallel
// identical corridors): they build, their drive stays inside, a scan one pitch (or one
// corridor) away is the same scan, place_repeats() names those copies; and kidnaps of any
// distance from the command line.
#include "../support/cli_run.hpp"
#include "../support/test_support.hpp"

#include "cli_app.hpp"

#include <ndtcu/log.hpp>
#include <ndtcu/simulator.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace ndtcu;
using namespace ndtcu::sim;
namespace fs = std::filesystem;

namespace {

/// How two scans of the same rays compare.
struct ScanDifference {
  std::size_t points_a = 0, points_b = 0;
  std::size_t common = 0;  ///< rays that returned in both
  std::size_t moved = 0;   ///< common rays whose points lie more than 5 cm apart (sensor frame)
};

/// Compares two scans ray by ray (ring, column). Cast with the same seed and frame, each ray
/// draws the same noise in both, so a ray that meets the same surface at the same range gives
/// the same point to rounding; 5 cm is well above that and well below the 0.2 m recesses.
ScanDifference compare_scans(const Scan& a, const Scan& b) {
  ScanDifference d;
  d.points_a = a.cloud.size();
  d.points_b = b.cloud.size();
  std::map<std::pair<std::uint16_t, std::uint32_t>, Eigen::Vector3f> by_ray;
  for (std::size_t i = 0; i < a.cloud.size(); ++i) by_ray[{a.ring[i], a.column[i]}] = a.cloud.points[i];
  for (std::size_t i = 0; i < b.cloud.size(); ++i) {
    const auto it = by_ray.find({b.ring[i], b.column[i]});
    if (it == by_ray.end()) continue;
    ++d.common;
    if ((it->second - b.cloud.points[i]).norm() > 0.05f) ++d.moved;
  }
  return d;
}

/// A thinned HDL-32 that reaches 60 m: fast, and on a 300 m place a sensor within 90 m of the
/// middle sees neither end of the repeated part.
LidarModel short_lidar() {
  LidarModel lidar = lidar_preset("hdl32");
  lidar.columns = 720;
  lidar.max_range = 60.0;
  return lidar;
}

Eigen::Isometry3d sensor_at(const Eigen::Vector3d& p) {
  Eigen::Isometry3d pose = Eigen::Isometry3d::Identity();
  pose.translation() = p;
  return pose;
}

Scan scan_at(const World& world, const Eigen::Vector3d& p) {
  return cast_scan(world, short_lidar(), sensor_at(p), 7, 3, 2);
}

/// Checks that the scans at `p` and `q` (scene frame) are the same scan: point counts within
/// 2% (what the localizer's search sees first), and 99% of the common rays end within 5 cm.
void check_same_scene(const World& world, const Eigen::Vector3d& p, const Eigen::Vector3d& q) {
  const ScanDifference d = compare_scans(scan_at(world, p), scan_at(world, q));
  CAPTURE(p.transpose(), q.transpose(), d.points_a, d.points_b, d.common, d.moved);
  REQUIRE(d.points_a > 5000);  // 720 columns x 32 rings, most of them on the ground and the walls
  CHECK(std::abs(static_cast<double>(d.points_b) - static_cast<double>(d.points_a)) <= 0.02 * d.points_a);
  CHECK(d.common >= 0.98 * d.points_a);
  CHECK(d.moved <= 0.01 * d.common);
}

/// Checks that the scans at `p` and `q` differ: the control that shows the comparison above
/// can fail (at half a pitch, rays that met a house front meet the gap between two).
void check_other_scene(const World& world, const Eigen::Vector3d& p, const Eigen::Vector3d& q) {
  const ScanDifference d = compare_scans(scan_at(world, p), scan_at(world, q));
  CAPTURE(p.transpose(), q.transpose(), d.points_a, d.points_b, d.common, d.moved);
  CHECK(d.moved > 0.05 * d.common);
}

using test::CliRun;
using test::run_ndtcu;

/// Horizontal distance between the positions of two poses.
double horizontal(const TimedPose& a, const TimedPose& b) {
  return (a.pose.translation() - b.pose.translation()).head<2>().norm();
}

}  // namespace

TEST_CASE("place names round-trip, the repeated places among them", "[unit][sim]") {
  REQUIRE(place_names().size() == 5);
  for (std::size_t k = 0; k < place_names().size(); ++k) {
    const Place place = static_cast<Place>(k);
    CHECK(place_from_string(to_string(place)) == place);
    CHECK(to_string(place_from_string(place_names()[k])) == place_names()[k]);
  }
  CHECK(place_from_string("house-row") == Place::HouseRow);
  CHECK(place_from_string("parallel-corridors") == Place::ParallelCorridors);
  CHECK_THROWS_WITH(place_from_string("house_row"),
                    Catch::Contains("'house_row' is not one of") && Catch::Contains("house-row, parallel-corridors"));
  PlaceSettings bad;
  bad.place = static_cast<Place>(5);
  CHECK_THROWS_WITH(validate(bad), Catch::Contains("no known place (5)"));
}

TEST_CASE("the repeated places build, with their plots and bays, and their drives stay inside", "[unit][sim]") {
  for (const Place place : {Place::HouseRow, Place::ParallelCorridors}) {
    CAPTURE(to_string(place));
    PlaceSettings ps;
    ps.place = place;
    ps.length = 300.0;
    ps.origin = {680000.0, 3900000.0, 40.0};
    const World world(generate_place(ps));
    const Scene& scene = world.scene();
    CHECK(scene.roads.nodes.empty());
    if (place == Place::HouseRow) {
      // Plots at -140, -120, ..., 140 (the 150 m half length holds 7 whole plots each side
      // of the middle one), both sides: 30 houses, lights and trees.
      CHECK(scene.facades.size() == 30);
      CHECK(scene.cylinders.size() == 60);
      CHECK(scene.spheres.size() == 30);
      CHECK(scene.contents.buildings == 30);
    } else {
      // Bays at -144, ..., 144 (49 of them) in 4 corridors: 4 boxes a bay, 2 walls' ends
      // per corridor, 3 + 1 walls per cross corridor, the ceiling.
      CHECK(scene.boxes.size() == 4 * (49 * 4 + 2) + 2 * 4 + 1);
      CHECK(scene.facades.empty());
    }
    // 330 frames at 10 Hz: 33 s at 5 m/s on average, about 165 m, many pitches.
    const int frames = 330;
    const std::vector<TrajectorySample> drive = place_drive(ps, frames, 10.0);
    REQUIRE(drive.size() == static_cast<std::size_t>(frames));
    CHECK(drive.back().distance > 150.0);
    for (const TrajectorySample& t : drive) {
      const Eigen::Vector3d p = t.scene_from_sensor.translation();
      CAPTURE(p.transpose());
      REQUIRE(std::abs(p.x()) <= 0.4 * ps.length);
      REQUIRE_FALSE(world.inside_solid(p, 0.0));
      REQUIRE(std::isfinite(world.ground_height(p.x(), p.y())));
      if (place == Place::HouseRow) {
        REQUIRE(p.y() == -1.5);
        REQUIRE(p.z() == 1.8);
      } else {
        REQUIRE(p.y() == -4.0);  // corridor 1's centre line
        REQUIRE(p.z() == 1.5);
      }
    }
  }
}

TEST_CASE("the repeated places' surfaces are where their constants put them", "[unit][sim]") {
  PlaceSettings ps;
  ps.length = 300.0;
  const auto range = [](const World& world, const Eigen::Vector3d& from, const Eigen::Vector3d& direction) {
    const auto hit = world.cast(from, direction, 100.0);
    return hit ? hit->range : -1.0;
  };
  const Eigen::Vector3d up = Eigen::Vector3d::UnitZ(), left = Eigen::Vector3d::UnitY(), right = -left;
  const Eigen::Vector3d ahead = Eigen::Vector3d::UnitX();
  SECTION("house row") {
    ps.place = Place::HouseRow;
    const World world(generate_place(ps));
    for (const double k : {-3.0, 0.0, 1.0, 7.0}) {
      const double x = k * kHouseRowPitch;
      CAPTURE(x);
      // From the lane (y = -1.5): a house's front wall 4 m right of its middle, between two
      // windows, on both sides; the glass 0.2 m deep in the window at 2.5 m; the light
      // pole in front of the middle (0.1 m radius); nothing above, nothing in the gap.
      CHECK(range(world, {x + 4.0, -1.5, 1.8}, left) == Approx(kHouseRowSetback + 1.5).margin(1e-9));
      CHECK(range(world, {x + 4.0, -1.5, 1.8}, right) == Approx(kHouseRowSetback - 1.5).margin(1e-9));
      CHECK(range(world, {x + 2.5, -1.5, 1.8}, left) == Approx(kHouseRowSetback + 1.5 + 0.2).margin(1e-9));
      CHECK(range(world, {x, -1.5, 1.8}, left) == Approx(6.5 + 1.5 - 0.1).margin(1e-9));
      CHECK(range(world, {x + 4.0, -1.5, 1.8}, up) < 0.0);
      CHECK(range(world, {x - 6.0, -1.5, 1.8}, left) < 0.0);
    }
    // No plot past 150 m: the street goes on 10 m, open.
    CHECK(range(world, {164.0, -1.5, 1.8}, left) < 0.0);
  }
  SECTION("parallel corridors") {
    ps.place = Place::ParallelCorridors;
    const World world(generate_place(ps));
    for (int c = 0; c < kCorridorCount; ++c) {
      for (const double k : {-24.0, -1.0, 0.0, 5.0}) {
        const double x = k * kCorridorPitch, y = (c - 1.5) * kCorridorSpacing;
        CAPTURE(c, x);
        // The ceiling 1.3 m above the sensor; the walls 1.5 m to either side, but 1.75 m
        // into a door's recess and 1.2 m to a pillar's face.
        CHECK(range(world, {x + 1.1, y, 1.5}, up) == Approx(1.3).margin(1e-9));
        CHECK(range(world, {x + 1.1, y, 1.5}, left) == Approx(1.5).margin(1e-9));
        CHECK(range(world, {x + 1.1, y, 1.5}, right) == Approx(1.5).margin(1e-9));
        CHECK(range(world, {x + 0.2, y, 1.5}, left) == Approx(1.75).margin(1e-9));
        CHECK(range(world, {x + 0.2, y, 2.5}, left) == Approx(1.5).margin(1e-9));  // the lintel
        CHECK(range(world, {x + 0.1, y, 1.5}, right) == Approx(1.2).margin(1e-9));
      }
      // Along the corridor through the cross corridor to its far wall, 3 m past the end.
      const double y = (c - 1.5) * kCorridorSpacing;
      CHECK(range(world, {140.0, y, 1.5}, ahead) == Approx(13.0).margin(1e-9));
      CHECK(range(world, {-140.0, y, 1.5}, -ahead) == Approx(13.0).margin(1e-9));
    }
    // Between two corridors' ends, the cross corridor's wall; at its ends the outer walls.
    CHECK(range(world, {151.5, 0.0, 1.5}, -ahead) == Approx(1.5).margin(1e-9));
    CHECK(range(world, {151.5, 12.0, 1.5}, left) == Approx(1.5).margin(1e-9));
    CHECK(range(world, {-151.5, -12.0, 1.5}, right) == Approx(1.5).margin(1e-9));
  }
}

TEST_CASE("house row: a scan one pitch further along the street is the same scan", "[unit][sim]") {
  PlaceSettings ps;
  ps.place = Place::HouseRow;
  ps.length = 300.0;
  const World world(generate_place(ps));
  // Off every plot's symmetry (3.3 m past a house's middle), in the right-hand lane.
  const Eigen::Vector3d p(3.3, -1.5, 1.8);
  const Eigen::Vector3d pitch(kHouseRowPitch, 0.0, 0.0);
  check_same_scene(world, p, p + pitch);
  check_same_scene(world, p, p - 2.0 * pitch);
  check_other_scene(world, p, p + 0.5 * pitch);
}

TEST_CASE("parallel corridors: a scan one bay on, or in the next corridor, is the same scan", "[unit][sim]") {
  PlaceSettings ps;
  ps.place = Place::ParallelCorridors;
  ps.length = 300.0;
  const World world(generate_place(ps));
  const Eigen::Vector3d p(1.1, -4.0, 1.5);  // corridor 1, 1.1 m past a door
  check_same_scene(world, p, p + Eigen::Vector3d(kCorridorPitch, 0.0, 0.0));
  check_same_scene(world, p, p + Eigen::Vector3d(0.0, kCorridorSpacing, 0.0));
  check_same_scene(world, p, p + Eigen::Vector3d(-3.0 * kCorridorPitch, -kCorridorSpacing, 0.0));
  check_other_scene(world, p, p + Eigen::Vector3d(0.5 * kCorridorPitch, 0.0, 0.0));
}

TEST_CASE("place_repeats lists the copies of a position in world coordinates, clear of the ends", "[unit][sim]") {
  PlaceSettings ps;
  ps.place = Place::HouseRow;
  ps.length = 300.0;
  ps.origin = {680000.0, 3900000.0, 40.0};
  ps.yaw = 0.5;
  const Scene frame = generate_place(ps);
  const Eigen::Isometry3d world_from = world_from_scene(frame);
  const Eigen::Vector3d axis = place_axis(frame);
  const Eigen::Vector3d p_scene(3.3, -1.5, 1.8);
  const Eigen::Vector3d p = world_from * p_scene;
  // The repeated part spans +-150 m; with 60 m of range a copy's scene x is within +-90 m:
  // 3.3 + 20 k for k = -4..4.
  const std::vector<Eigen::Vector3d> copies = place_repeats(ps, p, 60.0);
  REQUIRE(copies.size() == 9);
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const Eigen::Vector3d step = copies[i] - p;
    const double k = static_cast<double>(i) - 4.0;
    CHECK((step - k * kHouseRowPitch * axis).norm() < 1e-6);
  }
  // The copies are the same scene (two of them cast: the first and the position itself).
  const World world(generate_place(ps));
  check_same_scene(world, p_scene, world_from.inverse() * copies.front());
  // Without range, every plot's copy; with more range than the row, or from a position that
  // sees an end, the position alone.
  CHECK(place_repeats(ps, p, 0.0).size() == 15);
  CHECK(place_repeats(ps, p, 200.0) == std::vector<Eigen::Vector3d>{p});
  const Eigen::Vector3d near_end = world_from * Eigen::Vector3d(103.3, -1.5, 1.8);
  CHECK(place_repeats(ps, near_end, 60.0) == std::vector<Eigen::Vector3d>{near_end});
  CHECK(place_repeats(ps, near_end, 40.0).size() == 11);  // scene x 3.3 + 20 k within +-110: k = -5..5
  CHECK_THROWS_WITH(place_repeats(ps, p, -1.0), Catch::Contains("clearance"));

  // Corridors: every corridor at the same place, corridor by corridor.
  ps.place = Place::ParallelCorridors;
  const Eigen::Vector3d c_scene(1.1, -4.3, 1.5);  // corridor 1, 0.3 m right of its centre
  const std::vector<Eigen::Vector3d> rooms = place_repeats(ps, world_from * c_scene, 137.0);
  // The bays span +-147 m (24.5 pitches), less 137: scene x within +-10 m: 1.1 - 6, 1.1 and
  // 1.1 + 6 in each of the 4 corridors.
  REQUIRE(rooms.size() == 12);
  for (std::size_t i = 0; i < rooms.size(); ++i) {
    const Eigen::Vector3d q = world_from.inverse() * rooms[i];
    const int corridor = static_cast<int>(i / 3), k = static_cast<int>(i % 3) - 1;
    CHECK(q.x() == Approx(1.1 + k * kCorridorPitch).margin(1e-6));
    CHECK(q.y() == Approx(-4.3 + (corridor - 1) * kCorridorSpacing).margin(1e-6));
    CHECK(q.z() == Approx(1.5).margin(1e-6));
  }
  // A place without a pitch: the position alone.
  ps.place = Place::Corridor;
  CHECK(place_repeats(ps, p, 60.0) == std::vector<Eigen::Vector3d>{p});
}

TEST_CASE("a 200 m kidnap on a 500 m world lands 200 m away, whatever the seed", "[unit][sim]") {
  // The drive and its landing alone, for a few seeds: a street lane at 200 m in another
  // direction must be found from wherever the middle frame is. A 2 m ground grid: the
  // streets are the same, the scene is made 16 times faster.
  for (const std::uint64_t seed : {2u, 3u, 4u}) {
    CAPTURE(seed);
    WorldSettings ws;
    ws.seed = seed;
    ws.size = 500.0;
    ws.ground_cell = 2.0;
    const World world(generate_scene(ws));
    TrajectorySettings ts;
    ts.seed = seed;
    ts.frames = 6;
    ts.rate_hz = 1.0;
    ts.kidnap_frame = 3;
    ts.kidnap_distance = 200.0;
    const std::vector<TrajectorySample> drive = generate_trajectory(world, ts);
    REQUIRE(drive.size() == 6);
    const Eigen::Vector3d a = drive[2].scene_from_sensor.translation(), b = drive[3].scene_from_sensor.translation();
    // 200 m between the ground points; the sensor stands 1.8 m above them, tilted by the
    // road's slope and camber (a few per cent): centimetres.
    CHECK((b - a).head<2>().norm() == Approx(200.0).margin(0.2));
  }
}

TEST_CASE("simulate --kidnap-distance: the jump at the middle frame, recorded in world.json; bad values refused",
          "[unit][sim]") {
  const fs::path dir = ndtcu::test::temp_dir("sim_kidnap_distance");
  const std::string out = (dir / "sim").string();
  const CliRun r = run_ndtcu({"simulate", "--out", out, "--world-size", "500", "--frames", "4", "--columns", "90",
                              "--map-points", "2000", "--scenario", "kidnap", "--kidnap-distance", "200",
                              "--threads", "2"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const std::vector<TimedPose> poses = read_tum_poses(out + "/poses_tum.txt");
  REQUIRE(poses.size() == 4);
  CHECK(horizontal(poses[1], poses[2]) == Approx(200.0).margin(1.0));  // the middle frame, 4 / 2
  CHECK(horizontal(poses[0], poses[1]) < 20.0);                        // 1 s at 13 m/s at most
  CHECK(horizontal(poses[2], poses[3]) < 20.0);
  std::ifstream in(out + "/world.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j["trajectory"]["kidnap"]["frame"] == 2);
  CHECK(j["trajectory"]["kidnap"]["distance_m"] == 200.0);

  for (const std::string bad : {"0", "-5", "1000.5"}) {
    CAPTURE(bad);
    const CliRun b = run_ndtcu({"simulate", "--out", (dir / "bad").string(), "--scenario", "kidnap",
                                "--kidnap-distance", bad});
    CHECK(b.rc == 1);
    CHECK_THAT(b.err, Catch::Contains("--kidnap-distance") && Catch::Contains("got " + bad));
  }
  // From seed 8's middle frame no lane 100 m away runs across the drive or against it (the
  // parallel street's opposite lane is 100.3 m away, the crossings fall in intersections):
  // the sensor lands on the parallel street's lane in its own direction, 100 m away, and
  // not on its own street.
  const std::string parallel = (dir / "parallel").string();
  const CliRun p = run_ndtcu({"simulate", "--out", parallel, "--world-size", "500", "--frames", "10", "--columns", "20",
                              "--map-points", "500", "--scenario", "kidnap", "--kidnap-distance", "100", "--seed", "8",
                              "--threads", "2"});
  INFO(p.err);
  REQUIRE(p.rc == 0);
  const std::vector<TimedPose> side = read_tum_poses(parallel + "/poses_tum.txt");
  REQUIRE(side.size() == 10);
  CHECK(horizontal(side[4], side[5]) == Approx(100.0).margin(1.0));
  const Eigen::Vector3d before = side[4].pose.linear().col(0), after = side[5].pose.linear().col(0);
  CHECK(before.dot(after) > std::cos(3.14159265358979323846 / 4.0));   // the same direction ...
  const Eigen::Vector3d jump = side[5].pose.translation() - side[4].pose.translation();
  CHECK(std::abs(before.head<2>().normalized().dot(jump.head<2>().normalized())) < 0.99);  // ... not straight ahead

  // Without the kidnap scenario the option would do nothing: refused, naming it.
  const CliRun plain = run_ndtcu({"simulate", "--out", (dir / "bad").string(), "--kidnap-distance", "50"});
  CHECK(plain.rc == 1);
  CHECK_THAT(plain.err, Catch::Contains("--kidnap-distance 50") && Catch::Contains("--scenario kidnap"));
  // Farther than any street of the world: refused, naming the distance and the option.
  const CliRun far = run_ndtcu({"simulate", "--out", (dir / "far").string(), "--world-size", "100", "--frames", "4",
                                "--columns", "90", "--map-points", "2000", "--scenario", "kidnap",
                                "--kidnap-distance", "900"});
  CHECK(far.rc == 1);
  CHECK_THAT(far.err, Catch::Contains("900 m") && Catch::Contains("--kidnap-distance"));
}
