// ndtcu_covariance_eval: how honest each pose covariance mode is, against the simulator's
// exact truth. Builds a simulated scene and its map, aligns seeded perturbed starts of many
// scans, and for every mode compares the x-y error e (result minus truth) with the reported
// x-y covariance C through the normalised estimation error squared NEES = e' C^-1 e. For an
// honest 2-D covariance NEES follows chi-square(2): mean 2, median 1.386, and 95 % of the
// trials at or below 5.991. Much larger means over-confident (C too small), much smaller
// under-confident. Not a test: see BENCHMARK.md ("Pose covariance against exact truth").
#include "cli_common.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/log.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/simulator.hpp>

#include <CLI/CLI.hpp>
#include <Eigen/Eigenvalues>
#include <Eigen/Geometry>
#include <Eigen/LU>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace ndtcu;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;
// chi-square with 2 degrees of freedom: P(X <= 5.991) = 0.95, median 2 ln 2.
constexpr double kChi2Two95 = 5.991;
constexpr double kChi2TwoMedian = 1.386;

// The simulated scenes of tests/ndt/test_sim_accuracy.cpp (world seed, sensor, origin).
struct SceneSpec {
  std::uint64_t seed;
  const char* sensor;
  Eigen::Vector3d origin;
};

SceneSpec scene_spec(const std::string& name) {
  if (name == "hdl32-utm") return {5, "hdl32", Eigen::Vector3d(680000, 3900000, 40)};
  if (name == "os1-64") return {11, "os1-64", Eigen::Vector3d::Zero()};
  throw Error("--scene: unknown scene '" + name + "' (expected hdl32-utm or os1-64)");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A mapping survey as tests/ndt/test_sim_accuracy.cpp makes one: every street driven end to
// end in both directions in the right-hand lane, a scan every `spacing` m from the car set
// on the ground (as sim::generate_trajectory sets it), each scan put into the world frame
// at its exact pose, pass by pass voxel-filtered at `voxel`, then merged and filtered again.
PointCloud survey_map(const sim::World& world, const sim::LidarModel& lidar, std::uint64_t seed, double spacing,
                      double voxel, std::size_t& scans) {
  constexpr double kHalfWheelbase = 1.4, kHalfTrack = 0.8;  // m, as the trajectory's car
  const sim::RoadNetwork& roads = world.scene().roads;
  const double sensor_height = sim::TrajectorySettings{}.sensor_height;
  const Eigen::Isometry3d world_from_scene = sim::world_from_scene(world.scene());
  const Eigen::Isometry3d rotation(world_from_scene.linear());
  PointCloud map;
  map.origin = world_from_scene.translation();
  std::uint64_t frame = 0;
  scans = 0;
  auto ground = [&world](const Eigen::Vector2d& q) { return world.ground_height(q.x(), q.y()); };
  for (const auto& [from, to] : roads.edges) {
    for (int direction = 0; direction < 2; ++direction) {
      Eigen::Vector2d a = roads.nodes[static_cast<std::size_t>(from)], b = roads.nodes[static_cast<std::size_t>(to)];
      if (direction == 1) std::swap(a, b);
      const double length = (b - a).norm();
      const Eigen::Vector2d forward = (b - a) / length, left(-forward.y(), forward.x());
      const double yaw = std::atan2(forward.y(), forward.x());
      PointCloud pass;
      pass.origin = map.origin;
      for (double s = 0.0; s <= length; s += spacing) {
        const Eigen::Vector2d p = a + s * forward - roads.lane_offset * left;
        const double front = ground(p + kHalfWheelbase * forward), rear = ground(p - kHalfWheelbase * forward);
        const double left_h = ground(p + kHalfTrack * left), right_h = ground(p - kHalfTrack * left);
        if (!std::isfinite(front + rear + left_h + right_h)) continue;  // off the ground grid
        const double pitch = std::atan2(rear - front, 2.0 * kHalfWheelbase);
        const double roll = std::atan2(left_h - right_h, 2.0 * kHalfTrack);
        Eigen::Isometry3d pose = Eigen::Isometry3d::Identity();
        pose.linear() = (Eigen::AngleAxisd(yaw, Eigen::Vector3d::UnitZ()) *
                         Eigen::AngleAxisd(pitch, Eigen::Vector3d::UnitY()) *
                         Eigen::AngleAxisd(roll, Eigen::Vector3d::UnitX()))
                            .toRotationMatrix();
        const double z = 0.25 * (front + rear + left_h + right_h);
        pose.translation() = Eigen::Vector3d(p.x(), p.y(), z) + pose.linear() * Eigen::Vector3d(0.0, 0.0, sensor_height);
        const sim::Scan scan = sim::cast_scan(world, lidar, pose, seed, frame++);
        const Eigen::Isometry3d to_map = rotation * pose;
        for (const Eigen::Vector3f& q : scan.cloud.points) pass.points.push_back((to_map * q.cast<double>()).cast<float>());
        ++scans;
      }
      const PointCloud filtered = voxel_downsample(pass, voxel);
      map.points.insert(map.points.end(), filtered.points.begin(), filtered.points.end());
    }
  }
  PointCloud out = voxel_downsample(map, voxel);
  out.intensity.clear();
  return out;
}

Eigen::Vector3d uniform_unit_vector(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Eigen::Vector3d v;
  do {
    v = Eigen::Vector3d(u(rng), u(rng), u(rng));
  } while (v.norm() < 1e-3 || v.norm() > 1.0);
  return v.normalized();
}

// One covariance row of the table: an estimator, or an estimator with Autoware's floor.
struct Row {
  Row(std::string n, std::string w) : name(std::move(n)), what(std::move(w)) {}
  std::string name, what;
  std::vector<double> nees;     // finite NEES of the trials with a valid, invertible C
  int missing = 0;              // trials without a valid C (Laplace: -H not negative definite)
  int singular = 0;             // trials whose C is not invertible (counted outside the bound)
  double sum_variance = 0.0;    // sum over the trials with a C of trace(C) / 2
  double time_ms = 0.0;         // summed estimate time
};

void add_trial(Row& row, const Eigen::Vector2d& e, const Eigen::Matrix2d& c, bool valid) {
  if (!valid) {
    ++row.missing;
    return;
  }
  row.sum_variance += 0.5 * c.trace();
  const Eigen::FullPivLU<Eigen::Matrix2d> lu(c);
  const Eigen::SelfAdjointEigenSolver<Eigen::Matrix2d> eig(c);
  if (!lu.isInvertible() || eig.eigenvalues().minCoeff() <= 0.0) {
    ++row.singular;
    return;
  }
  row.nees.push_back(e.dot(lu.solve(e)));
}

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ndtcu_covariance_eval: pose covariance modes against the simulator's exact truth (x-y NEES)"};
  std::string scene_name = "hdl32-utm", map_kind = "survey";
  int frames = 100, starts = 2;
  double world_size = 200.0, map_voxel = 0.1, survey_spacing = 2.0, scan_leaf = 1.0, max_offset = 0.5,
         max_angle_deg = 3.0, frame_spacing_s = 0.5, floor = 0.0225;
  unsigned seed = 7;
  bool json = false;
  cli::NdtOptions ndt;
  app.add_option("--scene", scene_name, "hdl32-utm (HDL-32E, UTM origin) or os1-64")->capture_default_str();
  app.add_option("--world-size", world_size, "side of the simulated world (m)")->capture_default_str()
      ->check(CLI::Range(50.0, 10000.0));
  app.add_option("--map", map_kind, "survey (scans along every street, as a mapping run) or sampled (every surface)")
      ->capture_default_str()->check(CLI::IsMember({"survey", "sampled"}));
  app.add_option("--map-voxel", map_voxel, "map voxel filter (m)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--survey-spacing", survey_spacing, "survey: a scan every this many metres")->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--frames", frames, "scans of the drive used (each its own pose and noise)")->capture_default_str()
      ->check(CLI::Range(1, 10000));
  app.add_option("--frame-spacing", frame_spacing_s, "seconds of driving between two scans used")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--starts", starts, "perturbed starts per scan (trials = frames * starts)")->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--scan-leaf", scan_leaf, "scan voxel filter (m)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-offset", max_offset, "start translation off the truth, uniform length up to (m)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--max-angle", max_angle_deg, "start rotation off the truth, uniform angle up to (deg)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "seed of the starts")->capture_default_str();
  app.add_option("--floor", floor, "Autoware's published floor on each vehicle-frame x-y variance (m^2)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cli::add_ndt_options(&app, ndt);
  app.add_flag("--json", json, "print one JSON document instead of the table");
  CLI11_PARSE(app, argc, argv);
  set_log_level(LogLevel::Warn);

  try {
    const auto t_start = std::chrono::steady_clock::now();
    AlignSettings settings = cli::ndt_settings(ndt);
    settings.pose_covariance = PoseCovariance::None;  // every mode is estimated below, from one alignment
    validate(settings);
    const ExecutionOptions execution = cli::execution_options(ndt);
    const SceneSpec spec = scene_spec(scene_name);

    // Scene, drive and map.
    sim::WorldSettings ws;
    ws.seed = spec.seed;
    ws.size = world_size;
    ws.origin = spec.origin;
    const sim::World world(sim::generate_scene(ws));
    const sim::LidarModel lidar = sim::lidar_preset(spec.sensor);
    sim::TrajectorySettings ts;
    ts.seed = spec.seed + 100;
    const int stride = std::max(1, static_cast<int>(std::lround(frame_spacing_s * ts.rate_hz)));
    ts.frames = (frames - 1) * stride + 1;
    const auto drive = sim::generate_trajectory(world, ts);
    auto t0 = std::chrono::steady_clock::now();
    std::size_t survey_scans = 0;
    PointCloud map;
    if (map_kind == "survey") {
      map = survey_map(world, lidar, spec.seed + 400, survey_spacing, map_voxel, survey_scans);
    } else {
      sim::MapSettings ms;
      ms.seed = spec.seed + 400;
      ms.voxel = map_voxel;
      map = sim::sample_map(world, ms);
      map.intensity.clear();
    }
    const double map_s = seconds_since(t0);
    Aligner aligner(settings, execution);
    aligner.set_target(map);

    // Scans with their exact poses.
    const Eigen::Isometry3d world_from_scene = sim::world_from_scene(world.scene());
    std::vector<PointCloud> scans;
    std::vector<Eigen::Matrix4d> truths;
    std::size_t scan_points = 0;
    for (int f = 0; f < frames; ++f) {
      const sim::TrajectorySample& pose = drive[static_cast<std::size_t>(f * stride)];
      const sim::Scan scan = sim::cast_scan(world, lidar, pose.scene_from_sensor, spec.seed + 300,
                                            static_cast<std::uint64_t>(f * stride));
      PointCloud cloud = voxel_downsample(scan.cloud, scan_leaf);
      cloud.intensity.clear();
      scan_points += cloud.size();
      scans.push_back(std::move(cloud));
      truths.push_back((world_from_scene * pose.scene_from_sensor).matrix());
    }

    // Trials: start = truth * delta (delta in the sensor frame), as the simulator accuracy test.
    std::vector<Row> rows = {
        {"laplace", "Autoware's -(H_xy)^-1"},
        {"laplace-marginal", "x-y block of (-H)^-1"},
        {"multi-ndt", "Autoware's MULTI_NDT"},
        {"multi-ndt-score", "Autoware's MULTI_NDT_SCORE"},
        {"laplace+floor", "laplace as published (floor)"},
        {"multi-ndt+floor", "multi-ndt as published (floor)"},
        {"multi-ndt-score+floor", "multi-ndt-score as published"},
        {"sandwich", "A^-1 B A^-1 (x-y block)"},
        {"calibrated", "Laplace calibrated (x-y block)"},
    };
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    std::vector<double> sq_error;  // |e|^2 of the trials used
    int trials = 0, not_converged = 0;
    double align_ms = 0.0;
    t0 = std::chrono::steady_clock::now();
    for (int f = 0; f < frames; ++f) {
      for (int k = 0; k < starts; ++k, ++trials) {
        const Eigen::Vector3d direction = uniform_unit_vector(rng), axis = uniform_unit_vector(rng);
        const double length = max_offset * u01(rng), angle = max_angle_deg * kDeg * u01(rng);
        Eigen::Matrix4d delta = Eigen::Matrix4d::Identity();
        delta.topLeftCorner<3, 3>() = Eigen::AngleAxisd(angle, axis).toRotationMatrix();
        delta.topRightCorner<3, 1>() = length * direction;
        const PointCloud& scan = scans[static_cast<std::size_t>(f)];
        const Eigen::Matrix4d& truth = truths[static_cast<std::size_t>(f)];
        const AlignResult r = aligner.align(scan, truth * delta);
        align_ms += r.timings.total_ms;
        // Autoware publishes no pose that ran out of iterations (unless it oscillates); such
        // trials are counted, not scored.
        if (!r.converged) {
          ++not_converged;
          continue;
        }
        const Eigen::Vector2d e = r.transform.topRightCorner<2, 1>() - truth.topRightCorner<2, 1>();
        sq_error.push_back(e.squaredNorm());
        const PoseCovarianceResult lap = estimate_pose_covariance(aligner, scan, r, PoseCovariance::Laplace);
        const PoseCovarianceResult multi = estimate_pose_covariance(aligner, scan, r, PoseCovariance::MultiNdt);
        const PoseCovarianceResult score = estimate_pose_covariance(aligner, scan, r, PoseCovariance::MultiNdtScore);
        add_trial(rows[0], e, lap.covariance_xy, lap.valid);
        add_trial(rows[1], e, lap.covariance.topLeftCorner<2, 2>(), lap.valid);
        add_trial(rows[2], e, multi.covariance_xy, multi.valid);
        add_trial(rows[3], e, score.covariance_xy, score.valid);
        add_trial(rows[4], e, floor_xy_covariance(lap.covariance_xy, r.pose, floor, floor), lap.valid);
        add_trial(rows[5], e, floor_xy_covariance(multi.covariance_xy, r.pose, floor, floor), multi.valid);
        add_trial(rows[6], e, floor_xy_covariance(score.covariance_xy, r.pose, floor, floor), score.valid);
        rows[0].time_ms += lap.elapsed_ms;
        rows[1].time_ms += lap.elapsed_ms;
        rows[2].time_ms += multi.elapsed_ms;
        rows[3].time_ms += score.elapsed_ms;
        const PoseCovarianceResult sandwich = estimate_pose_covariance(aligner, scan, r, PoseCovariance::Sandwich);
        add_trial(rows[7], e, sandwich.covariance_xy, sandwich.valid);
        rows[7].time_ms += sandwich.elapsed_ms;
        const PoseCovarianceResult calibrated = estimate_pose_covariance(aligner, scan, r, PoseCovariance::Calibrated);
        add_trial(rows[8], e, calibrated.covariance_xy, calibrated.valid);
        rows[8].time_ms += calibrated.elapsed_ms;
      }
    }
    const double trials_s = seconds_since(t0);
    const int used = static_cast<int>(sq_error.size());
    // Per-axis RMS error: sqrt(mean |e|^2 / 2), comparable with the per-axis sigma sqrt(trace C / 2).
    const double rms_error = std::sqrt(mean(sq_error) / 2.0);

    nlohmann::json j;
    j["scene"] = {{"name", scene_name},
                  {"world_size_m", world_size},
                  {"sensor", spec.sensor},
                  {"map", map_kind},
                  {"map_points", map.size()},
                  {"map_voxels", aligner.target()->size()},
                  {"map_voxel_m", map_voxel},
                  {"survey_scans", survey_scans},
                  {"map_s", map_s}};
    j["scans"] = {{"frames", frames},
                  {"frame_spacing_s", frame_spacing_s},
                  {"leaf_m", scan_leaf},
                  {"mean_points", frames ? static_cast<double>(scan_points) / frames : 0.0}};
    j["starts"] = {{"per_frame", starts}, {"max_offset_m", max_offset}, {"max_angle_deg", max_angle_deg}, {"seed", seed}};
    j["settings"] = cli::ndt_settings_json(ndt.preset, settings, execution);
    j["trials"] = trials;
    j["not_converged"] = not_converged;
    j["used"] = used;
    j["rms_error_per_axis_m"] = rms_error;
    j["max_error_m"] = sq_error.empty() ? 0.0 : std::sqrt(*std::max_element(sq_error.begin(), sq_error.end()));
    j["floor_m2"] = floor;
    auto& jr = j["modes"] = nlohmann::json::array();
    for (const Row& row : rows) {
      const int with_c = used - row.missing;
      const int inside = static_cast<int>(std::count_if(row.nees.begin(), row.nees.end(),
                                                        [](double x) { return x <= kChi2Two95; }));
      const double sigma = with_c > 0 ? std::sqrt(row.sum_variance / with_c) : 0.0;
      jr.push_back({{"mode", row.name},
                    {"what", row.what},
                    {"trials", with_c},
                    {"missing", row.missing},
                    {"singular", row.singular},
                    {"nees_mean", mean(row.nees)},
                    {"nees_median", median(row.nees)},
                    {"inside_95", with_c > 0 ? static_cast<double>(inside) / with_c : 0.0},
                    {"sigma_m", sigma},
                    {"rms_error_over_sigma", sigma > 0 ? rms_error / sigma : 0.0},
                    {"time_ms_per_trial", used > 0 ? row.time_ms / used : 0.0}});
    }
    j["align_ms_per_trial"] = trials ? align_ms / trials : 0.0;
    j["trials_s"] = trials_s;
    j["total_s"] = seconds_since(t_start);

    if (json) {
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::string out = fmt::format(
        "scene {} ({:.0f} m world, {}), {} map: {} points, {} voxels at {} m ({:.1f} s)\n", scene_name, world_size,
        spec.sensor, map_kind, map.size(), aligner.target()->size(), settings.resolution, map_s);
    out += fmt::format("trials {} ({} scans x {} starts within {} m and {} deg, {:.0f} points per scan), {} not "
                       "converged, {} used; {} preset, step {}, epsilon {}, {} iterations, {} backend\n",
                       trials, frames, starts, max_offset, max_angle_deg,
                       frames ? static_cast<double>(scan_points) / frames : 0.0, not_converged, used, ndt.preset,
                       settings.step_size, settings.epsilon, settings.max_iterations, to_string(aligner.backend()));
    out += fmt::format("x-y error against the truth: RMS per axis {:.2f} cm, max {:.2f} cm\n", 100 * rms_error,
                       100 * j["max_error_m"].get<double>());
    out += fmt::format("honest: NEES mean 2, median {:.3f}, 95 % inside {:.3f}\n\n", kChi2TwoMedian, kChi2Two95);
    out += fmt::format("{:<22} {:>6} {:>9} {:>11} {:>10} {:>9} {:>11} {:>10}\n", "mode", "trials", "NEES mean",
                       "NEES median", "inside 95", "sigma cm", "RMS/sigma", "ms/trial");
    for (const auto& r : jr) {
      out += fmt::format("{:<22} {:>6} {:>9.3g} {:>11.3g} {:>9.1f}% {:>9.3f} {:>11.2f} {:>10.1f}\n",
                         r["mode"].get<std::string>(), r["trials"].get<int>(), r["nees_mean"].get<double>(),
                         r["nees_median"].get<double>(), 100 * r["inside_95"].get<double>(),
                         100 * r["sigma_m"].get<double>(), r["rms_error_over_sigma"].get<double>(),
                         r["time_ms_per_trial"].get<double>());
    }
    for (const auto& r : jr) {
      if (r["missing"].get<int>() + r["singular"].get<int>() > 0) {
        out += fmt::format("{}: {} trials without a covariance (not counted), {} with a singular one (counted "
                           "outside, not in the NEES mean)\n",
                           r["mode"].get<std::string>(), r["missing"].get<int>(), r["singular"].get<int>());
      }
    }
    out += fmt::format("\nsigma: sqrt(mean trace(C)/2) per axis; RMS/sigma > 1: over-confident. Floor: Autoware's "
                       "published diagonal floor of {} m^2 in the vehicle frame. {:.1f} ms per alignment; {:.0f} s in "
                       "all.\n",
                       floor, j["align_ms_per_trial"].get<double>(), j["total_s"].get<double>());
    std::cout << out;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ndtcu_covariance_eval: error: " << e.what() << "\n";
    return 1;
  }
}
