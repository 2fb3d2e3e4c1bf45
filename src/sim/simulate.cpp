// `ndtcu simulate` as a library call: world, trajectory, map and scans into one folder,
// plus the pose files and world.json that describe them.
#include "names.hpp"
#include "random.hpp"
#include "world_data.hpp"

#include "io/bytes.hpp"
#include "log.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/version.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace ndtcu::sim {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Points 0, n, 2n, ... of `cloud`, intensities and times with them.
PointCloud every_nth_point(const PointCloud& cloud, std::size_t n) {
  PointCloud out;
  const bool with_intensity = cloud.intensity.size() == cloud.points.size();
  const bool with_time = cloud.has_time();
  out.origin = cloud.origin;
  out.points.reserve(cloud.points.size() / n + 1);
  for (std::size_t i = 0; i < cloud.points.size(); i += n) {
    out.points.push_back(cloud.points[i]);
    if (with_intensity) out.intensity.push_back(cloud.intensity[i]);
    if (with_time) out.time.push_back(cloud.time[i]);
  }
  return out;
}

constexpr double kPi = 3.14159265358979323846;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Unit quaternion of a rotation with w >= 0, so each rotation has one spelling.
Eigen::Quaterniond canonical_quaternion(const Eigen::Matrix3d& r) {
  Eigen::Quaterniond q(r);
  q.normalize();
  if (q.w() < 0.0) q.coeffs() *= -1.0;
  return q;
}

/// Removes scans/NNNNNN.pcd left by an earlier run (and the temporary files of a run
/// killed while writing one), so the folder holds exactly this run's frames; nothing else
/// in it is touched.
void clear_old_scans(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool numbered = name.size() == 10 && name.compare(6, 4, ".pcd") == 0 &&
                          std::all_of(name.begin(), name.begin() + 6, [](char c) { return c >= '0' && c <= '9'; });
    if (numbered || is_output_temporary(name)) fs::remove(entry.path(), ec);
  }
}

nlohmann::ordered_json vec3(const Eigen::Vector3d& v) { return {v.x(), v.y(), v.z()}; }

const char* encoding_name(PcdEncoding e) {
  switch (e) {
    case PcdEncoding::Ascii: return "ascii";
    case PcdEncoding::Binary: return "binary";
    default: return "binary_compressed";
  }
}

/// Angle of a rotation (rad), robust near 0 and pi.
double rotation_angle(const Eigen::Matrix3d& r) { return Eigen::AngleAxisd(r).angle(); }

}  // namespace

const std::vector<std::string>& scenario_names() {
  static const std::vector<std::string> names{"drive", "turns", "stop-and-go", "kidnap", "rough-start", "fast"};
  return names;
}

const char* to_string(Scenario scenario) {
  return scenario_names()[static_cast<std::size_t>(scenario)].c_str();
}

Scenario scenario_from_string(const std::string& name) {
  return static_cast<Scenario>(detail::index_of_name(scenario_names(), name, "scenario (--scenario)"));
}

void apply_scenario(SimulationSettings& settings, Scenario scenario) {
  settings.scenario = scenario;
  TrajectorySettings& t = settings.trajectory;
  t.rate_hz = 10.0;
  switch (scenario) {
    case Scenario::Drive: break;
    case Scenario::Turns:
      t.rate_hz = 1.0;
      t.start_at_rest = true;
      t.always_turn = true;
      t.min_speed = 5.0;
      t.max_speed = 9.0;
      t.turn_radius = 5.0;
      t.lateral_accel = 5.0;  // brisk; a car's tyres give about 8
      break;
    case Scenario::StopAndGo:
      t.rate_hz = 1.0;
      t.start_at_rest = true;
      t.first_stop = 25.0;
      t.stop_interval = 100.0;
      t.stop_seconds = 4.0;
      t.brake = 6.0;  // hard braking, short of an emergency stop (8-9)
      t.accel = 3.5;  // 0-100 km/h in 8 s
      break;
    case Scenario::Kidnap:
      t.rate_hz = 1.0;
      t.kidnap_frame = t.frames / 2;
      t.kidnap_distance = 20.0;
      break;
    case Scenario::RoughStart:
      settings.rough_start = true;
      settings.rough_start_offset = 3.0;
      settings.rough_start_yaw_deg = 30.0;
      break;
    case Scenario::Fast:
      t.always_turn = true;
      t.min_speed = 20.0;
      t.max_speed = 25.0;
      t.turn_radius = 4.0;
      t.lateral_accel = 9.0;  // a sports car's grip, short of the 10 m/s^2 limit
      t.accel = 4.0;
      t.brake = 8.0;  // hard braking into every turn
      break;
  }
}

void write_tum_poses(const std::string& path, const std::vector<TimedPose>& poses) {
  std::string text;
  for (const auto& p : poses) {
    const Eigen::Vector3d t = p.pose.translation();
    const Eigen::Quaterniond q = canonical_quaternion(p.pose.linear());
    // Microns at 1e7 m need 14 significant digits; double carries 15-16.
    text += fmt::format("{:.6f} {:.6f} {:.6f} {:.6f} {:.9f} {:.9f} {:.9f} {:.9f}\n", p.time, t.x(), t.y(), t.z(), q.x(),
                        q.y(), q.z(), q.w());
  }
  write_file_whole(path, text);
}

void write_kitti_poses(const std::string& path, const std::vector<TimedPose>& poses) {
  std::string text;
  for (const auto& p : poses) {
    const Eigen::Matrix3d r = p.pose.linear();
    const Eigen::Vector3d t = p.pose.translation();
    text += fmt::format("{:.9f} {:.9f} {:.9f} {:.6f} {:.9f} {:.9f} {:.9f} {:.6f} {:.9f} {:.9f} {:.9f} {:.6f}\n", r(0, 0),
                        r(0, 1), r(0, 2), t.x(), r(1, 0), r(1, 1), r(1, 2), t.y(), r(2, 0), r(2, 1), r(2, 2), t.z());
  }
  write_file_whole(path, text);
}

std::vector<TimedPose> read_tum_poses(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<TimedPose> poses;
  std::string line;
  std::vector<std::string_view> tokens;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    tokens.clear();
    ndtcu::detail::split_tokens(line, tokens);
    if (tokens.empty() || tokens.front().front() == '#') continue;
    double v[8];
    bool ok = tokens.size() == 8;
    for (int k = 0; ok && k < 8; ++k) ok = ndtcu::detail::parse_double(tokens[static_cast<std::size_t>(k)], v[k]) && std::isfinite(v[k]);
    if (!ok) throw IoError(path, "line " + std::to_string(number) + ": expected 8 numbers 't x y z qx qy qz qw'");
    const Eigen::Quaterniond q(v[7], v[4], v[5], v[6]);
    // Files written to 9 decimals are unit to about 1e-8; anything far off is not a rotation.
    if (std::abs(q.norm() - 1.0) > 1e-6) {
      throw IoError(path, "line " + std::to_string(number) + ": quaternion norm " + fmt::format("{:.9f}", q.norm()) +
                              " is not 1");
    }
    TimedPose p;
    p.time = v[0];
    p.pose.linear() = q.normalized().toRotationMatrix();
    p.pose.translation() = Eigen::Vector3d(v[1], v[2], v[3]);
    poses.push_back(p);
  }
  return poses;
}

namespace {

void validate(const ImuSettings& imu) {
  if (!(imu.rate_hz == 0.0 || (imu.rate_hz >= 1.0 && imu.rate_hz <= 2000.0))) {
    throw Error("IMU rate (--imu-rate) must be 0 (no IMU) or 1 to 2000 Hz, got " + fmt::format("{:g}", imu.rate_hz));
  }
  if (!(imu.gyro_noise >= 0.0 && imu.gyro_noise <= 1.0)) {
    throw Error("IMU gyro noise (--imu-gyro-noise) must be 0 to 1 rad/s, got " + fmt::format("{:g}", imu.gyro_noise));
  }
  if (!(imu.accel_noise >= 0.0 && imu.accel_noise <= 10.0)) {
    throw Error("IMU accelerometer noise (--imu-accel-noise) must be 0 to 10 m/s^2, got " +
                fmt::format("{:g}", imu.accel_noise));
  }
  if (!(imu.gyro_bias.allFinite() && imu.gyro_bias.cwiseAbs().maxCoeff() <= 1.0)) {
    throw Error("IMU gyro bias (--imu-gyro-bias) must be finite and at most 1 rad/s in each axis");
  }
  if (!(imu.accel_bias.allFinite() && imu.accel_bias.cwiseAbs().maxCoeff() <= 10.0)) {
    throw Error("IMU accelerometer bias (--imu-accel-bias) must be finite and at most 10 m/s^2 in each axis");
  }
}

// The drive's pose at time `t` (s from the first frame), t in [0, end]: from the frame at
// or before it (the last frame's sweep beyond the last frame).
Eigen::Isometry3d pose_at(const Drive& drive, double rate_hz, double t) {
  const int frame = std::clamp(static_cast<int>(std::floor(t * rate_hz)), 0, drive.frames() - 1);
  const double limit = frame + 1 < drive.frames() ? std::max(kMaxSweepTime, 1.0 / rate_hz) : kMaxSweepTime;
  return drive.at(frame, std::clamp(t - frame / rate_hz, 0.0, limit)).scene_from_sensor;
}

}  // namespace

std::vector<ImuSample> simulate_imu(const Drive& drive, double frame_rate_hz, double end_time, const ImuSettings& imu,
                                    std::uint64_t seed) {
  validate(imu);
  std::vector<ImuSample> out;
  if (imu.rate_hz == 0.0) return out;
  // Central differences about t (one-sided at the drive's start): the rotation over 2 x
  // 10 us (its log over the time: the body rate, to 1e-9 rad/s), the position's second
  // difference over 1 ms (shorter steps lose digits to the positions' rounding).
  constexpr double kRateStep = 1e-5, kAccelStep = 1e-3;
  const double gravity = 9.80665;
  for (std::uint64_t k = 0;; ++k) {
    const double t = static_cast<double>(k) / imu.rate_hz;
    if (t > end_time + 1e-9) break;
    const double ta = std::max(0.0, t - kRateStep), tb = ta + 2.0 * kRateStep;
    const Eigen::Isometry3d a = pose_at(drive, frame_rate_hz, ta), b = pose_at(drive, frame_rate_hz, tb);
    const Eigen::AngleAxisd turn(Eigen::Matrix3d(a.linear().transpose() * b.linear()));
    ImuSample s;
    s.time = t;
    s.angular_velocity = turn.angle() * turn.axis() / (tb - ta);
    const double pa = std::max(0.0, t - kAccelStep);
    const Eigen::Isometry3d p0 = pose_at(drive, frame_rate_hz, pa), p1 = pose_at(drive, frame_rate_hz, pa + kAccelStep),
                            p2 = pose_at(drive, frame_rate_hz, pa + 2.0 * kAccelStep);
    const Eigen::Vector3d accel =
        (p0.translation() - 2.0 * p1.translation() + p2.translation()) / (kAccelStep * kAccelStep);
    s.linear_acceleration = p1.linear().transpose() * (accel + Eigen::Vector3d(0.0, 0.0, gravity));
    detail::Rng rng(detail::hash4(seed, detail::kStreamImu, k));
    for (int i = 0; i < 3; ++i) s.angular_velocity(i) += imu.gyro_bias(i) + imu.gyro_noise * rng.normal();
    for (int i = 0; i < 3; ++i) s.linear_acceleration(i) += imu.accel_bias(i) + imu.accel_noise * rng.normal();
    out.push_back(s);
  }
  return out;
}

void validate(const SimulationSettings& s) {
  validate(s.world);
  validate(s.lidar);
  validate(s.trajectory);
  validate(s.map);
  if (s.scan_points > 100000000) {
    throw Error("scan points (--scan-points) must be at most 100000000, got " + std::to_string(s.scan_points));
  }
  if (s.keep_every < 1 || s.keep_every > 1000) {
    throw Error("keep every (--keep-every) must be between 1 and 1000, got " + std::to_string(s.keep_every));
  }
  if (s.rough_start && !(s.rough_start_offset >= 0.0 && s.rough_start_offset <= 1000.0 &&
                         s.rough_start_yaw_deg >= 0.0 && s.rough_start_yaw_deg <= 180.0)) {
    throw Error("rough start must be 0 to 1000 m and 0 to 180 deg off, got " + fmt::format("{:g}", s.rough_start_offset) +
                " m and " + fmt::format("{:g}", s.rough_start_yaw_deg) + " deg");
  }
  if (s.scenario == Scenario::Kidnap && s.trajectory.kidnap_frame < 1) {
    throw Error("scenario kidnap needs --frames 2 or more");
  }
  // No two points of the square world lie farther apart than its diagonal.
  if (s.trajectory.kidnap_frame > 0 && s.trajectory.kidnap_distance > std::sqrt(2.0) * s.world.size) {
    throw Error(fmt::format("kidnap distance (--kidnap-distance) {:g} m is longer than the diagonal of the {:g} m world "
                            "({:.0f} m): no street lies that far away",
                            s.trajectory.kidnap_distance, s.world.size, std::sqrt(2.0) * s.world.size));
  }
  if (s.threads > static_cast<unsigned>(kMaxThreads)) {
    throw Error("threads (--threads) must be at most " + std::to_string(kMaxThreads) + " (0: one per hardware thread), got " +
                std::to_string(s.threads));
  }
  // A sweep longer than the frame period would take one scan's points during the next.
  if (!(s.sweep_time >= 0.0 && s.sweep_time <= kMaxSweepTime && s.sweep_time * s.trajectory.rate_hz <= 1.0)) {
    throw Error(fmt::format("sweep time (--sweep-time) must be 0 to {:g} s and at most the frame period (1 / {:g} Hz), "
                            "got {:g} s",
                            kMaxSweepTime, s.trajectory.rate_hz, s.sweep_time));
  }
  validate(s.imu);
  if (!(s.odometry_rate_hz == 0.0 || (s.odometry_rate_hz >= 1.0 && s.odometry_rate_hz <= 2000.0))) {
    throw Error("odometry rate (--odometry-rate) must be 0 (none) or 1 to 2000 Hz, got " +
                fmt::format("{:g}", s.odometry_rate_hz));
  }
  if (!(s.map_tile_size == 0.0 || (s.map_tile_size >= 1.0 && s.map_tile_size <= 10000.0))) {
    throw Error("map tile size (--map-tile-size) must be 0 (one map.pcd) or 1 to 10000 m, got " +
                fmt::format("{:g}", s.map_tile_size));
  }
}

namespace {

/// Makes `dir`/scans and removes an earlier run's description, poses and scans: a folder
/// never holds new scans beside another run's world.json (written last) or truth.
void prepare_output_folder(const fs::path& dir, const fs::path& scans_dir) {
  std::error_code ec;
  // The scans go into the folder's own scans/, never through a link out of it.
  if (fs::is_symlink(scans_dir, ec)) {
    throw IoError(scans_dir.string(), "is a symbolic link; the scans are written into a folder of the output's own "
                                      "(remove the link)");
  }
  fs::create_directories(scans_dir, ec);
  if (ec) throw IoError(scans_dir.string(), "cannot create folder: " + ec.message());
  for (const char* name :
       {"world.json", "poses_tum.txt", "poses_kitti.txt", "initial_pose_rough.txt", "imu.csv", "odometry_tum.txt"}) {
    fs::remove(dir / name, ec);
    if (ec) throw IoError((dir / name).string(), "cannot remove an earlier run's file: " + ec.message());
  }
  clear_old_scans(scans_dir);
}

/// The LiDAR with its columns sized so that a scan holds about `scan_points` points (0:
/// the model's own): a pilot revolution at the first pose gives the fraction of rays that
/// return.
LidarModel sized_lidar(const World& world, LidarModel lidar, std::size_t scan_points, const TrajectorySample& first,
                       std::uint64_t noise_seed, unsigned threads) {
  if (scan_points == 0) return lidar;
  const Scan pilot = cast_scan(world, lidar, first.scene_from_sensor, noise_seed, 0, threads);
  if (pilot.cloud.empty()) throw Error("scan points (--scan-points): the first pose sees nothing to size the scan by");
  const double per_column = static_cast<double>(pilot.cloud.size()) / lidar.columns;
  lidar.columns = static_cast<int>(std::clamp(std::ceil(static_cast<double>(scan_points) / per_column), 1.0, 1e6));
  validate(lidar);
  return lidar;
}

/// One map: map.pcd, or the tiled folder map/. An earlier run's other form would not
/// belong to this one.
void write_map(const World& world, const MapSettings& map_settings, const SimulationSettings& settings,
               const fs::path& dir, const WriteOptions& write, SimulationSummary& summary) {
  std::error_code ec;
  if (settings.map_tile_size > 0.0) {
    fs::remove(dir / "map.pcd", ec);
    fs::remove_all(dir / "map", ec);
    TiledMapWriterOptions tiles;
    tiles.write = write;
    const TiledMapWriteStats tiled = write_tiled_map(world, map_settings, settings.map_tile_size, (dir / "map").string(), tiles);
    summary.map_points = tiled.points_written;
    summary.map_tiles = tiled.tiles;
  } else {
    fs::remove_all(dir / "map", ec);
    const PointCloud map = sample_map(world, map_settings);
    write_pcd((dir / "map.pcd").string(), map, write);
    summary.map_points = map.size();
  }
}

/// Scan `frame`: at one instant (the frame's pose), or with a sweep, each column from the
/// pose of the drive at its own time.
Scan make_scan(const World& world, const LidarModel& lidar, const Drive& drive, const TrajectorySample& pose, int frame,
               const SimulationSettings& settings, std::uint64_t noise_seed) {
  const auto f = static_cast<std::uint64_t>(frame);
  if (settings.sweep_time == 0.0) return cast_scan(world, lidar, pose.scene_from_sensor, noise_seed, f, settings.threads);
  std::vector<Eigen::Isometry3d> column_poses(static_cast<std::size_t>(lidar.columns));
  for (int c = 0; c < lidar.columns; ++c) {
    column_poses[static_cast<std::size_t>(c)] =
        drive.at(frame, column_time(lidar, c, settings.sweep_time)).scene_from_sensor;
  }
  return cast_sweep(world, lidar, column_poses, settings.sweep_time, noise_seed, f, settings.threads);
}

/// Casts and writes every scan; returns the true poses (T_world_sensor: at each sweep's
/// start) and fills the summary's scan counts.
std::vector<TimedPose> write_scans(const World& world, const LidarModel& lidar, const Drive& drive,
                                   const std::vector<TrajectorySample>& trajectory, const SimulationSettings& settings,
                                   std::uint64_t noise_seed, const fs::path& scans_dir, const WriteOptions& write,
                                   SimulationSummary& summary) {
  const Eigen::Isometry3d world_from_scene_frame = world_from_scene(world.scene());
  std::vector<TimedPose> poses;
  summary.scan_points_min = std::numeric_limits<std::size_t>::max();
  for (std::size_t f = 0; f < trajectory.size(); ++f) {
    Scan scan = make_scan(world, lidar, drive, trajectory[f], static_cast<int>(f), settings, noise_seed);
    if (settings.keep_every > 1) scan.cloud = every_nth_point(scan.cloud, settings.keep_every);
    write_pcd((scans_dir / fmt::format("{:06d}.pcd", f)).string(), scan.cloud, write);
    summary.scan_points_min = std::min(summary.scan_points_min, scan.cloud.size());
    summary.scan_points_max = std::max(summary.scan_points_max, scan.cloud.size());
    summary.scan_points_total += scan.cloud.size();
    poses.push_back({trajectory[f].time, world_from_scene_frame * trajectory[f].scene_from_sensor});
  }
  summary.frames = trajectory.size();
  summary.path_length = trajectory.back().distance;
  for (std::size_t f = 1; f < poses.size(); ++f) {
    const Eigen::Isometry3d step = poses[f - 1].pose.inverse() * poses[f].pose;
    summary.max_turn_deg = std::max(summary.max_turn_deg, rotation_angle(step.linear()) * 180.0 / kPi);
    summary.max_step = std::max(summary.max_step, step.translation().norm());
  }
  return poses;
}

/// The rough start: a guess such as a person or a GNSS fix gives, for the first scan.
struct RoughStart {
  Eigen::Vector3d shift = Eigen::Vector3d::Zero();
  double yaw = 0.0;
};

RoughStart write_rough_start(const SimulationSettings& settings, std::uint64_t seed, const TimedPose& first,
                             const fs::path& path) {
  RoughStart r;
  if (!settings.rough_start) return r;
  detail::Rng rng(detail::hash4(seed, detail::kStreamRoughStart, 0));
  const double direction = rng.uniform(-kPi, kPi);
  r.yaw = (rng.chance(0.5) ? 1.0 : -1.0) * settings.rough_start_yaw_deg * kPi / 180.0;
  r.shift = settings.rough_start_offset * Eigen::Vector3d(std::cos(direction), std::sin(direction), 0.0);
  TimedPose rough = first;
  rough.pose.translation() += r.shift;
  rough.pose.linear() = Eigen::AngleAxisd(r.yaw, Eigen::Vector3d::UnitZ()).toRotationMatrix() * rough.pose.linear();
  write_tum_poses(path.string(), {rough});
  return r;
}

/// world.json: every parameter, and nothing that changes from run to run (no times,
/// paths, threads).
nlohmann::ordered_json world_description(const SimulationSettings& settings, const Scene& scene, const LidarModel& lidar,
                                         const TrajectorySettings& trajectory_settings,
                                         const std::vector<TrajectorySample>& trajectory, const MapSettings& map_settings,
                                         const SimulationSummary& summary, const RoughStart& rough) {
  const std::uint64_t seed = settings.world.seed;
  const Eigen::Vector3d& rough_shift = rough.shift;
  const double rough_yaw = rough.yaw;
  nlohmann::ordered_json j;
  j["generator"] = {{"name", "ndtcu simulate"}, {"version", NDTCU_VERSION_STRING}};
  j["seed"] = seed;
  j["frames"] = {{"scene", "primitives and ground, metres"},
                 {"world", "origin + Rz(yaw) * scene"},
                 {"sensor", "x forward, y left, z up"},
                 {"map", "world"},
                 {"poses", "T_world_sensor, one per scan"}};
  const Heightfield& g = scene.ground;
  j["world"] = {{"size_m", scene.size},
                {"origin", vec3(scene.origin)},
                {"yaw_deg", scene.yaw * 180.0 / 3.14159265358979323846},
                {"relief_m", settings.world.relief},
                {"ground", {{"cell_m", g.cell}, {"cells", {g.nx, g.ny}}, {"min_corner_scene", {g.min_corner.x(), g.min_corner.y()}}}},
                {"roads",
                 {{"intersections", scene.roads.nodes.size()},
                  {"streets", scene.roads.edges.size()},
                  {"half_width_m", scene.roads.half_width},
                  {"lane_offset_m", scene.roads.lane_offset}}},
                {"contents",
                 {{"buildings", scene.contents.buildings},
                  {"trees", scene.contents.trees},
                  {"poles", scene.contents.poles},
                  {"vehicles", scene.contents.vehicles},
                  {"walls", scene.contents.walls}}},
                {"primitives",
                 {{"boxes", scene.boxes.size()},
                  {"facades", scene.facades.size()},
                  {"cylinders", scene.cylinders.size()},
                  {"spheres", scene.spheres.size()}}}};
  j["sensor"] = {{"name", lidar.name},
                 {"pattern", lidar.pattern == ScanPattern::Rosette ? "rosette" : "spinning"},
                 {"rings", lidar.ring_elevations_deg.size()},
                 {"ring_elevations_deg", lidar.ring_elevations_deg},
                 {"columns", lidar.columns},
                 {"rays_per_scan", lidar.rays()},
                 {"min_range_m", lidar.min_range},
                 {"max_range_m", lidar.max_range},
                 {"range_noise_sigma_m", lidar.range_noise_sigma},
                 {"dropout", lidar.dropout},
                 {"scan_points_requested", settings.scan_points},
                 {"intensity", "255 * reflectivity * |cos(incidence)|"},
                 {"motion_distortion", settings.sweep_time > 0.0}};
  if (settings.sweep_time > 0.0) {
    j["sensor"]["sweep_time_s"] = settings.sweep_time;
    j["sensor"]["point_time"] = {
        {"field", "t"},
        {"unit", "s"},
        {"reference", "sweep start: the scan's pose and stamp"},
        {"order", lidar.pattern == ScanPattern::Rosette ? "emission order: ray c at sweep_time * c / rays"
                                                        : "azimuth: column c at sweep_time * c / columns"},
        {"points", "each in the sensor frame of its own time"}};
  }
  if (lidar.pattern == ScanPattern::Rosette) j["sensor"]["fov_deg"] = lidar.fov_deg;
  if (settings.keep_every > 1) j["sensor"]["keep_every"] = settings.keep_every;
  const TrajectorySettings& ts = trajectory_settings;
  j["trajectory"] = {{"scenario", to_string(settings.scenario)},
                     {"frames", trajectory.size()},
                     {"rate_hz", ts.rate_hz},
                     {"sensor_height_m", ts.sensor_height},
                     {"cruise_speed_mps", {ts.min_speed, ts.max_speed}},
                     {"turn_radius_m", ts.turn_radius},
                     {"lateral_accel_mps2", ts.lateral_accel},
                     {"accel_mps2", ts.accel},
                     {"brake_mps2", ts.brake},
                     {"always_turn", ts.always_turn},
                     {"start_at_rest", ts.start_at_rest},
                     {"stops", {{"first_m", ts.first_stop}, {"interval_m", ts.stop_interval}, {"standing_s", ts.stop_seconds}}},
                     {"kidnap", ts.kidnap_frame < 0 ? nlohmann::ordered_json(nullptr)
                                                   : nlohmann::ordered_json{{"frame", ts.kidnap_frame},
                                                                            {"distance_m", ts.kidnap_distance}}},
                     {"path_length_m", summary.path_length},
                     {"duration_s", trajectory.back().time},
                     {"max_turn_between_poses_deg", summary.max_turn_deg},
                     {"max_step_between_poses_m", summary.max_step}};
  j["map"] = {{"file", settings.map_tile_size > 0.0 ? "map" : "map.pcd"},
              {"tile_size_m", settings.map_tile_size > 0.0 ? nlohmann::ordered_json(settings.map_tile_size)
                                                           : nlohmann::ordered_json(nullptr)},
              {"tiles", summary.map_tiles},
              {"voxel_m", map_settings.target_points > 0 ? 0.0 : map_settings.voxel},
              // The density sample_map() used: the exact-count mode picks its own.
              {"density_per_m2", map_settings.target_points > 0 ? nlohmann::ordered_json(nullptr)
                                 : map_settings.density > 0.0   ? nlohmann::ordered_json(map_settings.density)
                                 : map_settings.voxel > 0.0
                                     ? nlohmann::ordered_json(6.0 / (map_settings.voxel * map_settings.voxel))
                                     : nlohmann::ordered_json(100.0)},
              {"target_points", map_settings.target_points},
              {"points", summary.map_points},
              {"encoding", encoding_name(settings.encoding)}};
  j["scans"] = {{"folder", "scans"},
                {"count", summary.frames},
                {"fields", settings.sweep_time > 0.0 ? nlohmann::ordered_json{"x", "y", "z", "intensity", "t"}
                                                     : nlohmann::ordered_json{"x", "y", "z", "intensity"}},
                {"points_min", summary.scan_points_min},
                {"points_max", summary.scan_points_max},
                {"points_total", summary.scan_points_total},
                {"encoding", encoding_name(settings.encoding)}};
  j["poses"] = {{"tum", "poses_tum.txt"}, {"kitti", "poses_kitti.txt"}};
  if (settings.imu.rate_hz > 0.0) {
    const ImuSettings& imu = settings.imu;
    j["imu"] = {{"file", "imu.csv"},
                {"columns", "time,wx,wy,wz,ax,ay,az (s, rad/s, m/s^2)"},
                {"frame", "the sensor's (the LiDAR's axes)"},
                {"rate_hz", imu.rate_hz},
                {"gyro_noise_rad_s", imu.gyro_noise},
                {"gyro_bias_rad_s", vec3(imu.gyro_bias)},
                {"accel_noise_m_s2", imu.accel_noise},
                {"accel_bias_m_s2", vec3(imu.accel_bias)},
                {"truth", "the sensor's body rate and specific force from the drive, plus bias and white noise"}};
  }
  if (settings.rough_start) {
    j["rough_start"] = {{"file", "initial_pose_rough.txt"},
                        {"offset_m", vec3(rough_shift)},
                        {"yaw_offset_deg", rough_yaw * 180.0 / kPi},
                        {"applied", "R = Rz(yaw offset) * R_first, t = t_first + offset"}};
  }
  return j;
}

}  // namespace

SimulationSummary simulate(const SimulationSettings& settings, const std::string& out_dir) {
  validate(settings);
  const auto t_start = Clock::now();
  auto& log = ndtcu::detail::log();
  // One seed drives everything; each part gets its own stream of it.
  const std::uint64_t seed = settings.world.seed;
  TrajectorySettings trajectory_settings = settings.trajectory;
  trajectory_settings.seed = detail::hash4(seed, detail::kStreamRoute, 1);
  MapSettings map_settings = settings.map;
  map_settings.seed = detail::hash4(seed, detail::kStreamMap, 1);
  map_settings.threads = settings.threads;
  const std::uint64_t noise_seed = detail::hash4(seed, detail::kStreamRayNoise, 1);

  const fs::path dir(out_dir);
  const fs::path scans_dir = dir / "scans";
  prepare_output_folder(dir, scans_dir);

  SimulationSummary summary;
  World world(generate_scene(settings.world));
  const Scene& scene = world.scene();
  summary.primitives = scene.primitive_count();
  summary.contents = scene.contents;
  summary.seconds_world = seconds_since(t_start);
  log.debug("sim: {:.0f} m world with {} buildings, {} trees, {} vehicles ({} primitives) in {:.2f} s", scene.size,
           scene.contents.buildings, scene.contents.trees, scene.contents.vehicles, summary.primitives,
           summary.seconds_world);

  const Drive drive(world, trajectory_settings);
  std::vector<TrajectorySample> trajectory;
  for (int f = 0; f < drive.frames(); ++f) trajectory.push_back(drive.at(f));
  const LidarModel lidar =
      sized_lidar(world, settings.lidar, settings.scan_points, trajectory.front(), noise_seed, settings.threads);
  summary.columns = lidar.columns;

  const auto t_map = Clock::now();
  WriteOptions write;
  write.pcd_encoding = settings.encoding;
  write_map(world, map_settings, settings, dir, write, summary);
  summary.seconds_map = seconds_since(t_map);
  log.debug("sim: map: {} points in {:.2f} s", summary.map_points, summary.seconds_map);

  const auto t_scans = Clock::now();
  const std::vector<TimedPose> poses =
      write_scans(world, lidar, drive, trajectory, settings, noise_seed, scans_dir, write, summary);
  summary.seconds_scans = seconds_since(t_scans);
  log.debug("sim: {} scans ({} to {} points) in {:.2f} s", summary.frames, summary.scan_points_min,
           summary.scan_points_max, summary.seconds_scans);
  write_tum_poses((dir / "poses_tum.txt").string(), poses);
  write_kitti_poses((dir / "poses_kitti.txt").string(), poses);
  const RoughStart rough = write_rough_start(settings, seed, poses.front(), dir / "initial_pose_rough.txt");
  if (settings.imu.rate_hz > 0.0) {
    // The samples in the poses' clock (times frame / rate from 0), through the last sweep.
    const double end = trajectory.back().time + settings.sweep_time;
    write_imu_csv((dir / "imu.csv").string(),
                  simulate_imu(drive, settings.trajectory.rate_hz, end, settings.imu, detail::hash4(seed, detail::kStreamImu, 1)));
  }
  if (settings.odometry_rate_hz > 0.0) {
    // The true pose in the poses' clock (times k / rate from 0), through the last sweep.
    const double end = trajectory.back().time + settings.sweep_time;
    const Eigen::Isometry3d world_from_scene_frame = world_from_scene(world.scene());
    std::vector<TimedPose> odometry;
    for (long k = 0;; ++k) {
      const double t = static_cast<double>(k) / settings.odometry_rate_hz;
      if (t > end + 1e-9) break;
      odometry.push_back({t, world_from_scene_frame * pose_at(drive, settings.trajectory.rate_hz, t)});
    }
    write_tum_poses((dir / "odometry_tum.txt").string(), odometry);
  }

  const nlohmann::ordered_json j = world_description(settings, scene, lidar, trajectory_settings, trajectory,
                                                     map_settings, summary, rough);
  write_file_whole((dir / "world.json").string(), j.dump(2) + "\n");
  summary.seconds_total = seconds_since(t_start);
  return summary;
}

}  // namespace ndtcu::sim
