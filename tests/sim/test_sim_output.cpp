// simulate() end to end: the same bytes from the same seed, scans that lie on the map at
// their true poses, files that ndtcu reads back, the drive, and refused options.
#include "../support/test_support.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/tiled_map.hpp>

#include <nanoflann.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

using namespace ndtcu;
using namespace ndtcu::sim;
namespace fs = std::filesystem;

namespace {

/// Small but complete: a block and its streets, a few scans of a thinned HDL-32.
SimulationSettings small_settings() {
  SimulationSettings s;
  s.world.seed = 21;
  s.world.size = 80;
  s.lidar = lidar_preset("hdl32");
  s.lidar.columns = 720;
  s.trajectory.frames = 4;
  s.map.voxel = 0.2;
  s.threads = 2;
  return s;
}

std::vector<fs::path> files_under(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), dir));
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// nanoflann over float points.
struct Points {
  const std::vector<Eigen::Vector3f>& pts;
  std::size_t kdtree_get_point_count() const { return pts.size(); }
  float kdtree_get_pt(std::size_t i, std::size_t dim) const { return pts[i][static_cast<Eigen::Index>(dim)]; }
  template <class Box>
  bool kdtree_get_bbox(Box&) const {
    return false;
  }
};
using KdTree = nanoflann::KDTreeSingleIndexAdaptor<nanoflann::L2_Simple_Adaptor<float, Points>, Points, 3, std::uint32_t>;

/// Median distance from each scan point, put in the world by `pose`, to the nearest map
/// point.
double median_distance(const KdTree& tree, const PointCloud& map, const PointCloud& scan, const Eigen::Isometry3d& pose) {
  std::vector<double> d;
  d.reserve(scan.size());
  for (const auto& p : scan.points) {
    // World coordinates in double, then relative to the map's origin (UTM-sized values
    // never go through float).
    const Eigen::Vector3f q = (pose * p.cast<double>() - map.origin).cast<float>();
    std::uint32_t index;
    float dist2;
    tree.knnSearch(q.data(), 1, &index, &dist2);
    d.push_back(std::sqrt(static_cast<double>(dist2)));
  }
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

}  // namespace

TEST_CASE("the same seed and options give the same bytes in every file", "[unit][sim]") {
  const fs::path a = ndtcu::test::temp_dir("sim_same_a"), b = ndtcu::test::temp_dir("sim_same_b");
  SimulationSettings s = small_settings();
  s.world.origin = {680000, 3900000, 40};
  s.lidar.dropout = 0.02;
  simulate(s, a.string());
  s.threads = 1;  // the thread count must not matter either
  s.map.threads = 1;
  simulate(s, b.string());
  const auto names = files_under(a);
  REQUIRE(names == files_under(b));
  REQUIRE(names.size() == 5 + 4);  // map, 2 pose files, imu.csv, world.json, 4 scans
  for (const auto& name : names) {
    CAPTURE(name);
    CHECK(ndtcu::test::read_bytes(a / name) == ndtcu::test::read_bytes(b / name));
  }
  // And another seed makes another world.
  const fs::path c = ndtcu::test::temp_dir("sim_same_c");
  s.world.seed = 22;
  simulate(s, c.string());
  CHECK(ndtcu::test::read_bytes(a / "map.pcd") != ndtcu::test::read_bytes(c / "map.pcd"));
}

TEST_CASE("the IMU's angular velocity is the drive's body rate; its noise and bias are the settings'", "[unit][sim]") {
  SimulationSettings s = small_settings();
  s.trajectory.frames = 30;
  apply_scenario(s, Scenario::Fast);
  const World world(generate_scene(s.world));
  const Drive drive(world, s.trajectory);
  ImuSettings exact;
  exact.rate_hz = 2000.0;  // fine steps: the drive's rate jumps where an arc meets a straight
  exact.gyro_noise = exact.accel_noise = 0.0;
  exact.gyro_bias.setZero();
  exact.accel_bias.setZero();
  const double end = (s.trajectory.frames - 1) / s.trajectory.rate_hz;
  const std::vector<ImuSample> truth = simulate_imu(drive, s.trajectory.rate_hz, end, exact, 7);
  REQUIRE(truth.size() == 5801);  // 0 to 2.9 s at 2000 Hz
  // Between two frames the rotation the rates integrate to (200 steps, each the mean of its
  // two samples) is the rotation between their poses, to the integration's second order.
  double worst = 0.0, fastest = 0.0;
  for (int f = 0; f + 1 < s.trajectory.frames; ++f) {
    const Eigen::Matrix3d relative =
        drive.at(f).scene_from_sensor.linear().transpose() * drive.at(f + 1).scene_from_sensor.linear();
    Eigen::Matrix3d integrated = Eigen::Matrix3d::Identity();
    for (int k = 0; k < 200; ++k) {
      const Eigen::Vector3d phi =
          0.5 * (truth[200 * f + k].angular_velocity + truth[200 * f + k + 1].angular_velocity) * 0.0005;
      if (phi.norm() > 0.0) integrated = integrated * Eigen::AngleAxisd(phi.norm(), phi.normalized()).toRotationMatrix();
    }
    worst = std::max(worst, Eigen::AngleAxisd(integrated.transpose() * relative).angle());
    fastest = std::max(fastest, Eigen::AngleAxisd(relative).angle() / 0.1);
  }
  std::printf("simulated IMU, no noise: its rates integrate to the poses' rotation over a frame to %.2e rad (fastest "
              "turn %.2f rad/s)\n",
              worst, fastest);
  CHECK(fastest > 1.0);  // the fast drive's turns
  // 4.4e-4 rad with the 200 Hz samples, 1.2e-4 with these: the error shrinks with the step
  // (the rate jumps where the drive's arcs meet its straights, and the terrain's triangles tilt it).
  CHECK(worst < 2e-4);  // 0.01 deg, against up to 7 deg turned in a frame
  // The default MEMS noise and bias: the mean error is the bias, the spread the noise.
  exact.rate_hz = 200.0;
  const std::vector<ImuSample> truth200 = simulate_imu(drive, s.trajectory.rate_hz, end, exact, 7);
  const std::vector<ImuSample> noisy = simulate_imu(drive, s.trajectory.rate_hz, end, ImuSettings{}, 7);
  REQUIRE(noisy.size() == 581);
  Eigen::Vector3d sum = Eigen::Vector3d::Zero(), sq = Eigen::Vector3d::Zero();
  for (std::size_t k = 0; k < noisy.size(); ++k) {
    const Eigen::Vector3d e = noisy[k].angular_velocity - truth200[k].angular_velocity;
    sum += e;
    sq += e.cwiseProduct(e);
  }
  const double n = static_cast<double>(noisy.size());
  const Eigen::Vector3d mean = sum / n;
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(mean(i) == Approx(ImuSettings{}.gyro_bias(i)).margin(4.0 * 0.001 / std::sqrt(n)));  // 4 sigma of the mean
    CHECK(std::sqrt(sq(i) / n - mean(i) * mean(i)) == Approx(0.001).epsilon(0.15));
  }
  ImuSettings bad;
  bad.rate_hz = 5000.0;
  CHECK_THROWS_WITH(simulate_imu(drive, s.trajectory.rate_hz, end, bad, 7), Catch::Contains("--imu-rate"));
}

TEST_CASE("scans at their true poses lie on the map, with a UTM-sized origin", "[unit][sim]") {
  const fs::path dir = ndtcu::test::temp_dir("sim_truth");
  SimulationSettings s = small_settings();
  s.world.origin = {680000, 3900000, 40};
  s.lidar.range_noise_sigma = 0.02;
  const SimulationSummary summary = simulate(s, dir.string());

  CloudInfo info;
  const PointCloud map = read_point_cloud((dir / "map.pcd").string(), {}, &info);
  CHECK(info.xyz_double);  // written as float64 world coordinates
  REQUIRE(map.size() == summary.map_points);
  REQUIRE(map.size() > 10000);
  const auto tum = read_tum_poses((dir / "poses_tum.txt").string());
  REQUIRE(tum.size() == 4);

  // The KITTI file holds the same poses.
  std::ifstream kitti(dir / "poses_kitti.txt");
  for (const auto& p : tum) {
    Eigen::Matrix<double, 3, 4> m;
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 4; ++c) kitti >> m(r, c);
    }
    REQUIRE(kitti);
    CHECK((m.leftCols<3>() - p.pose.linear()).cwiseAbs().maxCoeff() < 2e-8);  // 9 decimals each
    CHECK((m.col(3) - p.pose.translation()).norm() < 2e-6);                    // 6 decimals each
    // World coordinates: the origin is in the poses.
    CHECK(std::abs(p.pose.translation().x() - 680000) < 100);
    CHECK(std::abs(p.pose.translation().y() - 3900000) < 100);
  }
  CHECK(tum[1].time == Approx(0.1));

  Points adaptor{map.points};
  KdTree tree(3, adaptor, nanoflann::KDTreeSingleIndexAdaptorParams(10));
  // Allowance for the map's voxel filter: a surface point and the centroid that stands
  // for its voxel both lie in that voxel; for the flat surfaces that dominate, the
  // nearest centroid is within half a voxel diagonal, L * sqrt(3) / 2.
  const double allowance = s.map.voxel * std::sqrt(3.0) / 2.0;
  const double bound = 2.0 * s.lidar.range_noise_sigma + allowance;
  for (std::size_t f = 0; f < tum.size(); ++f) {
    char name[32];
    std::snprintf(name, sizeof name, "%06zu.pcd", f);
    const PointCloud scan = read_point_cloud((dir / "scans" / name).string());
    REQUIRE(scan.has_intensity());
    REQUIRE(scan.size() > 10000);
    const double median = median_distance(tree, map, scan, tum[f].pose);
    CAPTURE(f, median, bound);
    CHECK(median < bound);
    // The check can fail: the same scan half a metre too high is far off the map.
    Eigen::Isometry3d wrong = tum[f].pose;
    wrong.translation().z() += 0.5;
    const double wrong_median = median_distance(tree, map, scan, wrong);
    CAPTURE(wrong_median);
    CHECK(wrong_median > bound);
  }

  const auto json = nlohmann::json::parse(ndtcu::test::read_bytes(dir / "world.json"));
  CHECK(json["seed"] == 21);
  CHECK(json["world"]["origin"][0] == 680000.0);
  CHECK(json["sensor"]["rings"] == 32);
  CHECK(json["sensor"]["columns"] == 720);
  CHECK(json["sensor"]["range_noise_sigma_m"] == 0.02);
  CHECK(json["map"]["points"] == map.size());
  CHECK(json["scans"]["count"] == 4);
}

TEST_CASE("the drive stays in its lane, follows the ground and changes speed and heading", "[unit][sim]") {
  WorldSettings ws;
  ws.seed = 4;
  ws.size = 120;
  const World w(generate_scene(ws));
  TrajectorySettings ts;
  ts.frames = 400;  // 40 s: longer than one street, so it must turn
  const auto drive = generate_trajectory(w, ts);
  REQUIRE(drive.size() == 400);
  const RoadNetwork& roads = w.scene().roads;
  double min_speed = 1e9, max_speed = 0, turned = 0;
  for (std::size_t i = 0; i < drive.size(); ++i) {
    const Eigen::Isometry3d& p = drive[i].scene_from_sensor;
    const Eigen::Vector3d t = p.translation();
    CHECK(drive[i].time == Approx(0.1 * static_cast<double>(i)));
    // The sensor sits 1.8 m above the ground, give or take the body's tilt.
    CHECK(t.z() - w.ground_height(t.x(), t.y()) == Approx(ts.sensor_height).margin(0.1));
    // On a carriageway: within its half width of some street.
    double nearest = 1e9;
    for (const auto& [a, b] : roads.edges) {
      const Eigen::Vector2d p0 = roads.nodes[static_cast<std::size_t>(a)], p1 = roads.nodes[static_cast<std::size_t>(b)];
      const double u = std::clamp((t.head<2>() - p0).dot(p1 - p0) / (p1 - p0).squaredNorm(), 0.0, 1.0);
      nearest = std::min(nearest, (t.head<2>() - (p0 + u * (p1 - p0))).norm());
    }
    CHECK(nearest < roads.half_width);
    min_speed = std::min(min_speed, drive[i].speed);
    max_speed = std::max(max_speed, drive[i].speed);
    CHECK(drive[i].speed <= ts.max_speed + 1e-9);
    if (i > 0) {
      const Eigen::Vector3d step = t - drive[i - 1].scene_from_sensor.translation();
      // Distance per frame agrees with the speed (both from the same profile).
      CHECK(step.norm() == Approx(0.1 * 0.5 * (drive[i].speed + drive[i - 1].speed)).epsilon(0.03).margin(0.01));
      const Eigen::Vector3d f0 = drive[i - 1].scene_from_sensor.linear().col(0), f1 = p.linear().col(0);
      turned += std::acos(std::clamp(f0.head<2>().normalized().dot(f1.head<2>().normalized()), -1.0, 1.0));
    }
  }
  CHECK(max_speed - min_speed > 2.0);   // slows for turns, changes cruise speed
  CHECK(turned > 3.14159 / 2 - 0.01);   // at least one full turn
}

TEST_CASE("the exact-count map has exactly the points asked for", "[unit][sim]") {
  WorldSettings ws;
  ws.seed = 5;
  ws.size = 60;
  const World w(generate_scene(ws));
  MapSettings m;
  m.target_points = 54321;
  const PointCloud map = sample_map(w, m);
  CHECK(map.size() == 54321);
  m.threads = 1;
  CHECK(sample_map(w, m).points == map.points);
  // Hidden surfaces are gone: no point lies deep inside a building (window recesses are
  // at most 0.45 m deep, so 0.5 m from every face is inside the wall) or under the
  // ground, and the roofs are there.
  const Eigen::Matrix3d to_scene = world_from_scene(w.scene()).linear().transpose();
  REQUIRE(!w.scene().facades.empty());
  std::size_t hidden = 0, below = 0, on_roofs = 0;
  for (const auto& p : map.points) {
    const Eigen::Vector3d q = to_scene * p.cast<double>();
    below += q.z() < w.ground_height(q.x(), q.y()) - 0.01 ? 1 : 0;
    for (const auto& f : w.scene().facades) {
      const Eigen::Vector3d d = (q - f.box.center).cwiseAbs();  // the generator's boxes have yaw 0
      const Eigen::Vector3d depth = f.box.half_extents - d;
      hidden += depth.minCoeff() > 0.5 ? 1 : 0;
      on_roofs += std::abs(depth.z()) < 0.01 && depth.x() > 0.5 && depth.y() > 0.5 ? 1 : 0;
    }
  }
  CHECK(hidden == 0);
  CHECK(below == 0);
  CHECK(on_roofs > 100);
}

TEST_CASE("a simulated map written tile by tile holds the whole map's points, in bounded memory", "[unit][sim]") {
  WorldSettings ws;
  ws.seed = 7;
  ws.size = 80;
  ws.origin = Eigen::Vector3d(654321.0, 5432100.0, 30.0);  // UTM-sized: tiles keep float64 corners
  const World w(generate_scene(ws));
  MapSettings m;
  m.voxel = 0.0;
  m.density = 15.0;
  const PointCloud whole = sample_map(w, m);
  REQUIRE(whole.size() > 50000);
  const fs::path whole_dir = test::temp_dir("sim_tiles_whole");
  const TiledMapMetadata reference = write_tiled_map(whole, 20.0, whole_dir.string());

  // Sampled a few thousand points at a time and spilled: the same files, byte for byte.
  TiledMapWriterOptions o;
  o.buffer_points = 4000;
  const fs::path dir = test::temp_dir("sim_tiles_streamed");
  const TiledMapWriteStats st = write_tiled_map(w, m, 20.0, dir.string(), o);
  CHECK(st.points_written == whole.size());
  CHECK(st.tiles == reference.tiles.size());
  CHECK(st.spills > 5);
  CHECK(st.peak_buffered <= o.buffer_points);
  for (const auto& e : fs::directory_iterator(whole_dir)) {
    CAPTURE(e.path().filename().string());
    REQUIRE(fs::exists(dir / e.path().filename()));
    CHECK(test::read_bytes(dir / e.path().filename()) == test::read_bytes(e.path()));
  }
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) ==
        std::distance(fs::directory_iterator(whole_dir), fs::directory_iterator()));

  // simulate() with a tile size writes map/ instead of map.pcd, and says so in world.json.
  SimulationSettings s;
  s.world = ws;
  s.map.voxel = 0.5;
  s.trajectory.frames = 2;
  s.map_tile_size = 20.0;
  const fs::path out = test::temp_dir("sim_tiles_run");
  const SimulationSummary r = simulate(s, out.string());
  CHECK(!fs::exists(out / "map.pcd"));
  REQUIRE(is_tiled_map((out / "map").string()));
  CHECK(r.map_tiles == read_tiled_map_metadata((out / "map").string()).tiles.size());
  CHECK(r.map_points == read_tiled_map((out / "map").string()).cloud.size());
  std::ifstream world_json(out / "world.json");
  const nlohmann::json j = nlohmann::json::parse(world_json);
  CHECK(j["map"]["file"] == "map");
  CHECK(j["map"]["tiles"] == r.map_tiles);
  // And without one, map.pcd again, the tiles of the earlier run gone.
  s.map_tile_size = 0.0;
  simulate(s, out.string());
  CHECK(fs::exists(out / "map.pcd"));
  CHECK(!fs::exists(out / "map"));
  s.map_tile_size = 0.5;
  CHECK_THROWS_WITH(simulate(s, out.string()), Catch::Contains("map tile size (--map-tile-size) must be 0 (one map.pcd) or 1 to 10000 m, got 0.5"));
}

TEST_CASE("simulate refuses options that cannot work, naming them", "[unit][sim]") {
  const std::string out = ndtcu::test::temp_dir("sim_bad").string();
  SimulationSettings s = small_settings();
  s.trajectory.frames = 0;
  CHECK_THROWS_WITH(simulate(s, out), Catch::Contains("--frames") && Catch::Contains("got 0"));
  s = small_settings();
  s.world.size = 0;
  CHECK_THROWS_WITH(simulate(s, out), Catch::Contains("--world-size") && Catch::Contains("got 0"));
  s = small_settings();
  s.lidar.ring_elevations_deg.clear();
  CHECK_THROWS_WITH(simulate(s, out), Catch::Contains("no rings"));
  s = small_settings();
  s.lidar.max_range = -1;
  CHECK_THROWS_WITH(simulate(s, out), Catch::Contains("--max-range") && Catch::Contains("-1"));
  s = small_settings();
  s.map.voxel = -0.2;
  CHECK_THROWS_WITH(simulate(s, out), Catch::Contains("--map-voxel") && Catch::Contains("-0.2"));
  CHECK(fs::is_empty(out));  // nothing was written before the options were checked
  // A hand-made world without streets has nowhere to drive.
  Scene no_roads;
  no_roads.spheres.emplace_back();
  CHECK_THROWS_WITH(generate_trajectory(World(no_roads), TrajectorySettings{}), Catch::Contains("no road network"));
  // An output path that is a file.
  const fs::path file = fs::path(out) / "plain_file";
  ndtcu::test::write_bytes(file, "x");
  CHECK_THROWS_AS(simulate(small_settings(), file.string()), IoError);
}

TEST_CASE("keep_every thins each scan to every n-th point, as thinned keyframes are", "[unit][sim]") {
  const fs::path full = ndtcu::test::temp_dir("sim_keep_all"), thin = ndtcu::test::temp_dir("sim_keep_third");
  SimulationSettings s = small_settings();
  s.trajectory.frames = 2;
  simulate(s, full.string());
  s.keep_every = 3;
  simulate(s, thin.string());
  for (const char* name : {"000000.pcd", "000001.pcd"}) {
    CAPTURE(name);
    const PointCloud a = read_point_cloud((full / "scans" / name).string());
    const PointCloud b = read_point_cloud((thin / "scans" / name).string());
    REQUIRE(b.size() == (a.size() + 2) / 3);
    for (std::size_t i = 0; i < b.size(); ++i) {
      REQUIRE(b.points[i] == a.points[3 * i]);
      REQUIRE(b.intensity[i] == a.intensity[3 * i]);
    }
  }
  const auto world = nlohmann::json::parse(ndtcu::test::read_bytes(thin / "world.json"));
  CHECK(world["sensor"]["keep_every"] == 3);
  s.keep_every = 0;
  CHECK_THROWS_WITH(simulate(s, ndtcu::test::temp_dir("sim_keep_none").string()),
                    Catch::Contains("--keep-every") && Catch::Contains("got 0"));
}
