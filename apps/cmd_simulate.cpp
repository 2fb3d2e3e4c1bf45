// `ndtcu simulate`: a synthetic world, a drive through it with exact poses, its map and
// its scans; or, with --bench, timings of the ray caster and map sampler.
#include "cli_common.hpp"
#include "commands.hpp"
#include "output_folder.hpp"

#include <ndtcu/imu.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/rosbag.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/text.hpp>
#include <ndtcu/trajectory.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <thread>

namespace ndtcu::cli {

namespace {

struct SimulateOptions {
  std::string out;
  std::string rosbag;  // also write the scans as a ROS 2 bag here
  std::uint64_t seed = 1;
  std::string sensor = "hdl32";
  int frames = 50;
  double rate = 10.0;        // given or the scenario's
  std::string scenario = "drive";
  double sweep_time = 0.0;  // seconds a scan's sweep takes (0: instantaneous scans)
  double kidnap_distance = 20.0;  // the kidnap scenario's jump (m)
  double world_size = 200.0;
  std::string origin = "0,0,0";
  double map_voxel = 0.2;
  double relief = 3.0;
  double noise = 0.0;       // given or the preset's
  int columns = 0;           // given or the preset's
  double max_range = 0.0;    // given or the preset's
  double dropout = 0.0;
  std::size_t map_points = 0;
  std::size_t scan_points = 0;
  std::size_t keep_every = 1;
  bool scale = false;
  double map_tile_size = 0.0;  // 0: map.pcd; else the tiled folder map/
  std::string encoding = "binary_compressed";
  unsigned threads = 0;
  bool bench = false;
  int bench_scans = 20;
  sim::ImuSettings imu;  // --imu-*
  std::vector<double> imu_gyro_bias{imu.gyro_bias.x(), imu.gyro_bias.y(), imu.gyro_bias.z()};
  std::vector<double> imu_accel_bias{imu.accel_bias.x(), imu.accel_bias.y(), imu.accel_bias.z()};
  double odometry_rate = 0.0;  // --odometry-rate
};

// --scale: a city of a square kilometre, a 10^7-point map and 10^5-point HDL-64 scans.
constexpr double kScaleWorldSize = 1000.0;
constexpr std::size_t kScaleMapPoints = 10000000;
constexpr std::size_t kScaleScanPoints = 100000;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// Writes the scans of a simulation in `out` (scans/*.pcd, scan k at the time of line k of
/// poses_tum.txt) as a ROS 2 bag (MCAP) at `bag`, on topic /points in frame "lidar", and
/// the samples of its imu.csv (if any) as sensor_msgs/msg/Imu on /imu in frame "lidar" (the
/// simulated IMU has the LiDAR's axes), each message at its time, the two topics in time
/// order. Returns the scan and IMU message counts.
std::pair<std::size_t, std::size_t> write_scans_as_bag(const std::string& out, const std::string& bag,
                                                       const sim::ImuSettings& imu_settings) {
  const std::vector<ScanEntry> scans = list_scans((std::filesystem::path(out) / "scans").string());
  const Trajectory truth = read_trajectory((std::filesystem::path(out) / "poses_tum.txt").string(), TrajectoryFormat::Tum);
  if (truth.size() != scans.size()) {
    throw Error(fmt::format("{}: {} scans but {} poses in poses_tum.txt", out, scans.size(), truth.size()));
  }
  const std::string imu_path = (std::filesystem::path(out) / "imu.csv").string();
  const std::vector<ImuSample> imu = imu_settings.rate_hz > 0.0 ? read_imu_csv(imu_path) : std::vector<ImuSample>{};
  rosbag::McapBagWriter writer(bag, "/points", "lidar");
  if (!imu.empty()) {
    writer.add_imu_topic("/imu", "lidar", imu_settings.gyro_noise * imu_settings.gyro_noise,
                         imu_settings.accel_noise * imu_settings.accel_noise);
  }
  std::size_t next_imu = 0;
  const auto imu_until = [&](std::int64_t ns) {  // the samples up to `ns` (a scan after samples of its time)
    for (; next_imu < imu.size() && std::llround(imu[next_imu].time * 1e9) <= ns; ++next_imu) {
      writer.write_imu(std::llround(imu[next_imu].time * 1e9), imu[next_imu]);
    }
  };
  for (std::size_t k = 0; k < scans.size(); ++k) {
    const std::int64_t ns = std::llround(truth[k].time * 1e9);
    imu_until(ns);
    writer.write(ns, read_point_cloud(scans[k].path));
  }
  imu_until(std::numeric_limits<std::int64_t>::max());
  writer.close();
  return {scans.size(), imu.size()};
}

/// Times cast_scan on poses of a drive (one warm-up scan, then `scans` timed ones) and,
/// when a map size or voxel is set, one map sampling.
int run_bench(const sim::SimulationSettings& s, int scans, bool time_map, bool json) {
  auto t0 = std::chrono::steady_clock::now();
  sim::World world(sim::generate_scene(s.world));
  const double world_ms = ms_since(t0);
  sim::TrajectorySettings ts = s.trajectory;
  ts.frames = scans + 1;
  const auto drive = sim::generate_trajectory(world, ts);
  sim::LidarModel lidar = s.lidar;
  std::vector<double> ms;
  std::size_t points = 0;
  for (int k = 0; k <= scans; ++k) {
    auto t = std::chrono::steady_clock::now();
    const sim::Scan scan = sim::cast_scan(world, lidar, drive[static_cast<std::size_t>(k)].scene_from_sensor, 1,
                                          static_cast<std::uint64_t>(k), s.threads);
    if (k > 0) {
      ms.push_back(ms_since(t));
      points += scan.cloud.size();
    }
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2], min = sorted.front();
  double map_ms = 0.0;
  std::size_t map_points = 0;
  if (time_map) {
    auto t = std::chrono::steady_clock::now();
    map_points = sim::sample_map(world, s.map).size();
    map_ms = ms_since(t);
  }
  const unsigned threads = s.threads ? s.threads : std::max(1u, std::thread::hardware_concurrency());
  if (json) {
    nlohmann::json j{{"world_size_m", s.world.size},
                     {"primitives", world.scene().primitive_count()},
                     {"world_ms", world_ms},
                     {"sensor", lidar.name},
                     {"rays_per_scan", lidar.rays()},
                     {"points_per_scan_mean", static_cast<double>(points) / scans},
                     {"scans_timed", scans},
                     {"scan_ms_median", median},
                     {"scan_ms_min", min},
                     {"threads", threads}};
    if (time_map) {
      j["map_points"] = map_points;
      j["map_ms"] = map_ms;
    }
    std::cout << dump_json(j) << "\n";
    return 0;
  }
  std::cout << fmt::format("world      {:.0f} m, {} primitives, built in {:.1f} ms\n", s.world.size,
                           world.scene().primitive_count(), world_ms);
  std::cout << fmt::format("scan       {} ({} rings x {} columns = {} rays), {:.0f} points on average, {} threads\n",
                           lidar.name, lidar.ring_elevations_deg.size(), lidar.columns, lidar.rays(),
                           static_cast<double>(points) / scans, threads);
  std::cout << fmt::format("           median {:.2f} ms, min {:.2f} ms over {} scans after one warm-up\n", median, min,
                           scans);
  if (time_map) std::cout << fmt::format("map        {} points in {:.0f} ms\n", map_points, map_ms);
  return 0;
}

}  // namespace

Command add_simulate(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand(
      "simulate",
      "Generate a synthetic world: map.pcd, scans/*.pcd, poses_tum.txt, poses_kitti.txt, imu.csv and world.json");
  cmd->add_option("--out", o->out, "output folder (created; its scans/NNNNNN.pcd files are replaced)");
  cmd->add_option("--rosbag", o->rosbag,
                  "also write the scans as a ROS 2 bag (a new folder: metadata.yaml and an MCAP file; topic /points, "
                  "sensor_msgs/msg/PointCloud2, each scan at its time in poses_tum.txt; and the IMU's samples on /imu, "
                  "sensor_msgs/msg/Imu)");
  cmd->add_option("--seed", o->seed, "seed: the same seed and options give the same bytes")->capture_default_str();
  auto* sensor = cmd->add_option("--sensor", o->sensor, "hdl32, hdl64, os1-64, os0-64, vlp16 or avia (a Livox Avia's non-repetitive 70 deg rosette, facing forward)")->capture_default_str();
  cmd->add_option("--frames", o->frames, "scans to make, at --rate")->capture_default_str();
  auto* rate = cmd->add_option("--rate", o->rate, "scans per second (default: the scenario's; 10 for drive)");
  cmd->add_option("--scenario", o->scenario,
                  "what the sequence reproduces (the truth stays exact):\n"
                  "  drive        the plain drive, 10 Hz\n"
                  "  turns        1 Hz from a standstill; a turn at every intersection, 5-9 m/s, brisk\n"
                  "               (radius 5 m, 5 m/s^2 across): 45 deg or more between two scans at each\n"
                  "               90 deg turn\n"
                  "  stop-and-go  1 Hz from a standstill; stops 25 m after the start and every 100 m,\n"
                  "               braking at 6 m/s^2, 4 s standing, then accelerating at 3.5 m/s^2\n"
                  "  kidnap       1 Hz; at the middle frame the sensor lands --kidnap-distance (20 m)\n"
                  "               away on another street (or the other lane) and drives on;\n"
                  "               poses_tum.txt has the jump\n"
                  "  rough-start  the plain drive, plus initial_pose_rough.txt: the first pose 3 m and\n"
                  "               30 deg off, as a start for localize --init-from or initpose --around\n"
                  "  fast         10 Hz at 20-25 m/s, a tight turn (radius 4 m, 9 m/s^2 across, about\n"
                  "               100 deg/s) at every intersection: for --sweep-time")
      ->check(CLI::IsMember(sim::scenario_names()))
      ->capture_default_str();
  cmd->add_option("--sweep-time", o->sweep_time,
                  "seconds a scan's sweep takes (0 to 0.5, at most 1 / --rate): each point is taken at its own time "
                  "along the drive (by azimuth; avia: in emission order), in the sensor frame of that time, its time "
                  "written as field t (float32 s from the sweep's start); the poses are those at each sweep's start. "
                  "0: every scan at one instant")
      ->capture_default_str();
  auto* kidnap_distance =
      cmd->add_option("--kidnap-distance", o->kidnap_distance,
                      "with --scenario kidnap: how far the sensor jumps, horizontally, in metres (above 0, at most 1000; a street "
                      "lane must lie that far away, so the world must be large enough)")
          ->capture_default_str();
  auto* size = cmd->add_option("--world-size", o->world_size, "side of the square world in metres (50 to 5000)")
                   ->capture_default_str();
  cmd->add_option("--origin", o->origin, "world position of the scene centre, x,y,z metres (e.g. 680000,3900000,40)")
      ->capture_default_str();
  auto* voxel = cmd->add_option("--map-voxel", o->map_voxel, "voxel filter of the map in metres; 0 keeps every sample")
                    ->capture_default_str();
  cmd->add_option("--relief", o->relief, "height of the rolling terrain in metres")->capture_default_str();
  auto* noise = cmd->add_option("--noise", o->noise, "range noise sigma in metres (default: the sensor's)");
  auto* columns = cmd->add_option("--columns", o->columns, "azimuth steps per revolution, or rays per scan of avia (default: the sensor's)");
  auto* max_range = cmd->add_option("--max-range", o->max_range, "maximum range in metres (default: the sensor's)");
  cmd->add_option("--dropout", o->dropout, "probability that a return is lost")->capture_default_str();
  auto* map_points = cmd->add_option("--map-points", o->map_points, "exact number of map points (no voxel filter)");
  map_points->excludes(voxel);
  auto* scan_points = cmd->add_option("--scan-points", o->scan_points, "choose the columns for about this many points per scan");
  cmd->add_option("--keep-every", o->keep_every,
                  "keep every N-th point of each scan (3: as sparse as thinned 32-ring keyframes)")
      ->capture_default_str();
  cmd->add_option("--map-tile-size", o->map_tile_size,
                  "write the map as a tiled folder map/ of squares this many metres wide (Autoware's layout, "
                  "written tile by tile, never whole in memory) instead of map.pcd; 0: map.pcd")
      ->capture_default_str();
  cmd->add_flag("--scale", o->scale,
                "large data: --world-size 1000 --sensor hdl64 --map-points 10000000 --scan-points 100000 "
                "(options given explicitly win)");
  cmd->add_option("--encoding", o->encoding, "PCD encoding of map and scans")
      ->check(CLI::IsMember({"ascii", "binary", "binary_compressed"}))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "worker threads (0: one per hardware thread); the output does not depend on it");
  cmd->add_option("--imu-rate", o->imu.rate_hz,
                  "IMU samples per second written as imu.csv (time,wx,wy,wz,ax,ay,az; the sensor's body rate and "
                  "specific force from the drive, plus bias and white noise) and, with --rosbag, as "
                  "sensor_msgs/msg/Imu on /imu; 0: no IMU")
      ->capture_default_str();
  cmd->add_option("--imu-gyro-noise", o->imu.gyro_noise, "IMU angular velocity white noise, one sigma per sample (rad/s)")
      ->capture_default_str();
  cmd->add_option("--imu-gyro-bias", o->imu_gyro_bias, "IMU angular velocity bias x,y,z (rad/s)")
      ->delimiter(',')
      ->expected(3)
      ->capture_default_str();
  cmd->add_option("--imu-accel-noise", o->imu.accel_noise,
                  "IMU linear acceleration white noise, one sigma per sample (m/s^2)")
      ->capture_default_str();
  cmd->add_option("--imu-accel-bias", o->imu_accel_bias, "IMU linear acceleration bias x,y,z (m/s^2)")
      ->delimiter(',')
      ->expected(3)
      ->capture_default_str();
  cmd->add_option("--odometry-rate", o->odometry_rate,
                  "the sensor's true pose this many times a second written as odometry_tum.txt (an odometry denser "
                  "than the scans, for ndtcu localize --odometry); 0: none")
      ->capture_default_str();
  cmd->add_flag("--bench", o->bench, "time ray casting (and map sampling with --map-points) instead of writing files");
  cmd->add_option("--bench-scans", o->bench_scans, "timed scans in --bench")->check(positive_number())->capture_default_str();

  return [o, &global, sensor, size, map_points, scan_points, voxel, noise, columns, max_range, rate, kidnap_distance]() {
    sim::SimulationSettings s;
    if (o->scale) {
      if (size->count() == 0) o->world_size = kScaleWorldSize;
      if (sensor->count() == 0) o->sensor = "hdl64";
      if (map_points->count() == 0 && voxel->count() == 0) o->map_points = kScaleMapPoints;
      if (scan_points->count() == 0) o->scan_points = kScaleScanPoints;
    }
    s.world.seed = o->seed;
    s.world.size = o->world_size;
    s.world.origin = sim::parse_origin(o->origin);
    s.world.relief = o->relief;
    s.lidar = sim::lidar_preset(o->sensor);
    // Sensor options replace the preset's values only when given; validation checks them.
    if (noise->count() > 0) s.lidar.range_noise_sigma = o->noise;
    if (columns->count() > 0) s.lidar.columns = o->columns;
    if (max_range->count() > 0) s.lidar.max_range = o->max_range;
    s.lidar.dropout = o->dropout;
    s.trajectory.frames = o->frames;
    sim::apply_scenario(s, sim::scenario_from_string(o->scenario));  // after --frames: the kidnap is at its middle
    if (rate->count() > 0) s.trajectory.rate_hz = o->rate;
    if (kidnap_distance->count() > 0) {
      if (s.scenario != sim::Scenario::Kidnap) {
        throw Error(fmt::format("--kidnap-distance {}: only the kidnap scenario jumps (add --scenario kidnap)",
                                number_text(o->kidnap_distance)));
      }
      s.trajectory.kidnap_distance = o->kidnap_distance;
    }
    s.map.voxel = o->map_voxel;
    s.map.target_points = o->map_points;
    s.scan_points = o->scan_points;
    s.keep_every = o->keep_every;
    s.encoding = pcd_encoding_from_string(o->encoding);
    s.threads = o->threads;
    s.map.threads = o->threads;
    s.map_tile_size = o->map_tile_size;
    s.sweep_time = o->sweep_time;
    s.imu = o->imu;
    s.imu.gyro_bias = Eigen::Vector3d(o->imu_gyro_bias[0], o->imu_gyro_bias[1], o->imu_gyro_bias[2]);
    s.imu.accel_bias = Eigen::Vector3d(o->imu_accel_bias[0], o->imu_accel_bias[1], o->imu_accel_bias[2]);
    s.odometry_rate_hz = o->odometry_rate;
    if (o->bench) {
      sim::validate(s);
      return run_bench(s, o->bench_scans, o->map_points > 0, global.json);
    }
    if (o->out.empty()) throw Error("simulate: --out DIR is required (or use --bench)");
    sim::validate(s);  // before the folder is made
    // One run at a time in a folder: a second is refused, naming the first.
    const OutputFolder folder(o->out, "ndtcu simulate");
    const sim::SimulationSummary r = sim::simulate(s, o->out);
    const auto [bag_messages, bag_imu] =
        o->rosbag.empty() ? std::pair<std::size_t, std::size_t>{0, 0} : write_scans_as_bag(o->out, o->rosbag, s.imu);
    if (global.json) {
      nlohmann::json j{{"out", json_text(o->out)},
                       {"primitives", r.primitives},
                       {"buildings", r.contents.buildings},
                       {"trees", r.contents.trees},
                       {"vehicles", r.contents.vehicles},
                       {"map_points", r.map_points},
                       {"map_tiles", r.map_tiles},
                       {"frames", r.frames},
                       {"columns", r.columns},
                       {"scan_points_min", r.scan_points_min},
                       {"scan_points_max", r.scan_points_max},
                       {"scan_points_total", r.scan_points_total},
                       {"path_length_m", r.path_length},
                       {"scenario", o->scenario},
                       {"rate_hz", s.trajectory.rate_hz},
                       {"max_turn_deg", r.max_turn_deg},
                       {"max_step_m", r.max_step},
                       {"seconds_world", r.seconds_world},
                       {"seconds_map", r.seconds_map},
                       {"seconds_scans", r.seconds_scans},
                       {"seconds_total", r.seconds_total}};
      if (!o->rosbag.empty()) {
        j["rosbag"] = {{"path", json_text(o->rosbag)}, {"topic", "/points"}, {"messages", bag_messages}};
        if (bag_imu > 0) j["rosbag"]["imu"] = {{"topic", "/imu"}, {"messages", bag_imu}};
      }
      if (s.imu.rate_hz > 0.0) j["imu"] = {{"file", "imu.csv"}, {"rate_hz", s.imu.rate_hz}};
      if (s.odometry_rate_hz > 0.0) j["odometry"] = {{"file", "odometry_tum.txt"}, {"rate_hz", s.odometry_rate_hz}};
      std::cout << dump_json(j) << "\n";
      return 0;
    }
    std::cout << fmt::format("{}: {:.0f} m world, seed {}\n", printable(o->out), s.world.size, s.world.seed);
    std::cout << fmt::format("  world   {} buildings, {} trees, {} vehicles, {} primitives ({:.2f} s)\n",
                             r.contents.buildings, r.contents.trees, r.contents.vehicles, r.primitives, r.seconds_world);
    if (r.map_tiles > 0) {
      std::cout << fmt::format("  map     map/, {} points in {} tiles of {:g} m ({:.2f} s)\n", r.map_points, r.map_tiles,
                               s.map_tile_size, r.seconds_map);
    } else {
      std::cout << fmt::format("  map     map.pcd, {} points ({:.2f} s)\n", r.map_points, r.seconds_map);
    }
    std::cout << fmt::format("  scans   {} frames of {} x {} columns, {} to {} points, {:.1f} m driven ({:.2f} s)\n",
                             r.frames, s.lidar.name, r.columns, r.scan_points_min, r.scan_points_max, r.path_length,
                             r.seconds_scans);
    std::cout << fmt::format("  truth   poses_tum.txt, {} at {:g} Hz: at most {:.2f} m and {:.1f} deg between scans\n",
                             o->scenario, s.trajectory.rate_hz, r.max_step, r.max_turn_deg);
    if (s.rough_start) {
      std::cout << fmt::format("  start   initial_pose_rough.txt, the first pose {:g} m and {:g} deg off\n",
                               s.rough_start_offset, s.rough_start_yaw_deg);
    }
    if (s.imu.rate_hz > 0.0) {
      std::cout << fmt::format("  imu     imu.csv at {:g} Hz (gyro noise {:g} rad/s, bias {:g},{:g},{:g} rad/s)\n",
                               s.imu.rate_hz, s.imu.gyro_noise, s.imu.gyro_bias.x(), s.imu.gyro_bias.y(),
                               s.imu.gyro_bias.z());
    }
    if (s.odometry_rate_hz > 0.0) {
      std::cout << fmt::format("  odom    odometry_tum.txt, the true pose at {:g} Hz\n", s.odometry_rate_hz);
    }
    if (!o->rosbag.empty()) {
      std::cout << fmt::format("  rosbag  {}: {} sensor_msgs/msg/PointCloud2 messages on /points{} (ROS 2, MCAP)\n",
                               printable(o->rosbag), bag_messages,
                               bag_imu ? fmt::format(", {} sensor_msgs/msg/Imu on /imu", bag_imu) : std::string());
    }
    std::cout << fmt::format("  total   {:.2f} s\n", r.seconds_total);
    return 0;
  };
}

}  // namespace ndtcu::cli
