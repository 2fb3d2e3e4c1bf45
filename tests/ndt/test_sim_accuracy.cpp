// Accuracy of the CPU backend on the simulator's scenes, where the truth is exact (issue 4):
// "Autoware mode from guesses up to 1.5 m and 5 deg off lands within 2 cm and 0.1 deg of the
// truth in at least 19 of 20 seeded trials per scene."
//
// Scenes (built with ndtcu::sim, nothing read from disk), both 120 m urban blocks:
//   hdl32-utm: world seed 5, HDL-32E (2 cm range noise), scene origin (680000, 3900000, 40)
//   os1-64:    world seed 11, Ouster OS1-64 (1 cm range noise), origin zero
// Map: sample_map of every surface, 0.2 m voxel filter (0.7-0.85 M points). Scans: frames
// 0, 10, 20 and 30 of a drive (one second apart), voxel-downsampled at 0.5 m as Autoware
// does (5-8 k points). Truth: T_world_sensor = world_from_scene * scene_from_sensor.
//
// Trials: 20 per scene, trial k on frame k mod 4. Each guess is truth * delta (applied in
// the sensor frame), delta drawn from std::mt19937(7): translation direction uniform on the
// sphere (rejection sampling in the unit ball), length uniform in [0, 1.5] m; rotation axis
// uniform on the sphere, angle uniform in [0, 5] deg.
//
// What these scenes show (measured; see the printed lines):
// - The truth itself is consistent: a point-to-plane fit of the raw scans against a 0.05 m
//   map (measured once, not repeated here: an 11 M point map takes 15 s) moves less than
//   1 mm and 0.001 deg from it, and a UTM-sized origin changes no result (checked below),
//   so the misses are not the origin handling, the sensor frame or the pose conversions.
// - The score's own optimum (the pose Newton converges to from the truth with a tight
//   epsilon) lies 1.3-4.8 cm from the truth on hdl32-utm and 0.7-1.4 cm on os1-64 (rotation
//   under 0.04 deg). No setting of the optimizer moves an alignment closer to the truth
//   than that. Autoware's covariance, (S + I)/(n - 1), is much of it: with on the order
//   of 100 map points per 2 m voxel the identity adds (10 cm)^2 to every direction;
//   PCL's S/(n - 1) at resolution 2 puts the optimum 0.2-1.8 cm from the truth on frames
//   0-35 of hdl32-utm, and a 16x denser map (0.05 m filter) halves Autoware's bias. A map
//   accumulated from other scans of the drive (only surfaces seen from the road) instead
//   of sample_map lowers it from a median of 3.0 to 1.8 cm.
// - With the preset, trials also stop short: 30 steps of at most 0.1 (|dp| over all six
//   entries) do not always cover a 1.2-1.4 m offset (max_iterations), and epsilon 0.01
//   stops some with about 0.2 deg left.
// So the bound fails for the preset on both scenes (hdl32-utm 4/20, os1-64 16/20)
// and is kept below as a test expected to fail; the variant with epsilon 1e-3 and 60
// iterations reaches the score's optimum in every trial, which meets the bound on os1-64
// and not on hdl32-utm (the bias). PCL's score (resolution 1, S/(n - 1)) is far less
// biased (0.03-0.65 cm) once its stopping rule lets it iterate, but its basin is smaller.
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/simulator.hpp>

#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace ndtcu;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;

// Issue 4's bound against the truth.
constexpr double kMaxTranslation = 0.02;       // m
constexpr double kMaxRotation = 0.1 * kDeg;    // rad
// How close an alignment must come to the score's optimum to count as having reached it:
// half the bound (the variant below lands within 0.4 mm and 0.01 deg of it).
constexpr double kNearOptimumTranslation = 0.01;  // m
constexpr double kNearOptimumRotation = 0.05 * kDeg;  // rad
constexpr int kTrials = 20;
constexpr int kRequired = 19;

struct Frame {
  PointCloud scan;                                        // sensor frame, 0.5 m voxel centroids
  Eigen::Matrix4d truth = Eigen::Matrix4d::Identity();    // T_world_sensor
  Eigen::Matrix4d optimum = Eigen::Matrix4d::Identity();  // Autoware score's optimum near the truth
};

struct SimScene {
  std::string name;
  PointCloud map;  // world frame: origin = the scene's origin
  std::vector<Frame> frames;
};

struct SceneSpec {
  const char* name;
  std::uint64_t seed;
  const char* sensor;
  Eigen::Vector3d origin;
};

AlignSettings cpu(AlignSettings s) {
  s.backend = Backend::Cpu;
  s.threads = 2;
  return s;
}

SimScene build_scene(const SceneSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  sim::WorldSettings ws;
  ws.seed = spec.seed;
  ws.size = 120.0;
  ws.origin = spec.origin;
  const sim::World world(sim::generate_scene(ws));
  sim::TrajectorySettings ts;
  ts.seed = spec.seed + 100;
  ts.frames = 31;
  const auto drive = sim::generate_trajectory(world, ts);
  sim::MapSettings ms;
  ms.seed = spec.seed + 200;
  ms.voxel = 0.2;
  ms.threads = 2;

  SimScene scene;
  scene.name = spec.name;
  scene.map = sim::sample_map(world, ms);
  const sim::LidarModel lidar = sim::lidar_preset(spec.sensor);
  const Eigen::Isometry3d world_from_scene = sim::world_from_scene(world.scene());
  for (int f : {0, 10, 20, 30}) {
    const sim::TrajectorySample& pose = drive[static_cast<std::size_t>(f)];
    const sim::Scan scan = sim::cast_scan(world, lidar, pose.scene_from_sensor, spec.seed + 300,
                                          static_cast<std::uint64_t>(f), 2);
    Frame frame;
    frame.scan = voxel_downsample(scan.cloud, 0.5);
    frame.scan.intensity.clear();
    frame.truth = (world_from_scene * pose.scene_from_sensor).matrix();
    scene.frames.push_back(std::move(frame));
  }

  // The optimum of Autoware's score function near the truth: Newton from the truth until
  // the step is below 1e-5 (it takes 2-10 iterations).
  AlignSettings tight = cpu(autoware_preset());
  tight.epsilon = 1e-5;
  tight.max_iterations = 100;
  Aligner aligner(tight);
  aligner.set_target(scene.map);
  for (Frame& frame : scene.frames) {
    const AlignResult r = aligner.align(frame.scan, frame.truth);
    REQUIRE(r.converged);
    frame.optimum = r.transform;
  }
  std::printf("scene %s: map %zu points, scans %zu-%zu points, built in %.2f s\n", spec.name, scene.map.size(),
              scene.frames.front().scan.size(), scene.frames.back().scan.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return scene;
}

// Both scenes, built once for every test case of this file.
const std::vector<SimScene>& scenes() {
  static const std::vector<SimScene> all = [] {
    std::vector<SimScene> v;
    v.push_back(build_scene({"hdl32-utm", 5, "hdl32", Eigen::Vector3d(680000, 3900000, 40)}));
    v.push_back(build_scene({"os1-64", 11, "os1-64", Eigen::Vector3d::Zero()}));
    return v;
  }();
  return all;
}

double translation_error(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b) {
  return (a.topRightCorner<3, 1>() - b.topRightCorner<3, 1>()).norm();
}

double rotation_error(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b) {
  return Eigen::AngleAxisd(Eigen::Matrix3d(a.topLeftCorner<3, 3>().transpose() * b.topLeftCorner<3, 3>())).angle();
}

Eigen::Vector3d uniform_unit_vector(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Eigen::Vector3d v;
  do {
    v = Eigen::Vector3d(u(rng), u(rng), u(rng));
  } while (v.norm() < 1e-3 || v.norm() > 1.0);
  return v.normalized();
}

// The kTrials sensor-frame perturbations of every scene (see the file comment).
std::vector<Eigen::Matrix4d> perturbations() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<Eigen::Matrix4d> out;
  for (int k = 0; k < kTrials; ++k) {
    const Eigen::Vector3d direction = uniform_unit_vector(rng);
    const Eigen::Vector3d axis = uniform_unit_vector(rng);
    const double length = 1.5 * u01(rng);
    const double angle = 5.0 * kDeg * u01(rng);
    Eigen::Matrix4d d = Eigen::Matrix4d::Identity();
    d.topLeftCorner<3, 3>() = Eigen::AngleAxisd(angle, axis).toRotationMatrix();
    d.topRightCorner<3, 1>() = length * direction;
    out.push_back(d);
  }
  return out;
}

struct TrialOutcome {
  AlignResult result;
  std::size_t frame = 0;
  double dt = 0, da = 0;                   // from the truth
  double dt_optimum = 0, da_optimum = 0;   // from the score's optimum
};

struct Summary {
  int within_bound = 0;    // issue 4's bound against the truth
  int at_optimum = 0;      // within kNearOptimum* of the score's optimum
  std::vector<TrialOutcome> trials;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs the trials of one scene with `settings`, printing one line per trial and a summary.
Summary run_trials(const SimScene& scene, const AlignSettings& settings, const char* label,
                   const Eigen::Vector3d& shift = Eigen::Vector3d::Zero()) {
  // `shift` moves the map's origin and every pose by the same offset (same scene, other
  // world coordinates).
  PointCloud map = scene.map;
  map.origin += shift;
  auto shifted = [&shift](Eigen::Matrix4d m) {
    m.topRightCorner<3, 1>() += shift;
    return m;
  };
  Aligner aligner(cpu(settings));
  aligner.set_target(map);
  // Frame::optimum belongs to Autoware's score function at resolution 2 (what
  // build_scene computes); other settings have another optimum.
  const AlignSettings reference = autoware_preset();
  const bool same_score = settings.covariance == reference.covariance && settings.resolution == reference.resolution &&
                          settings.search == reference.search && settings.outlier_ratio == reference.outlier_ratio;
  const auto deltas = perturbations();
  Summary s;
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < kTrials; ++k) {
    TrialOutcome t;
    t.frame = static_cast<std::size_t>(k) % scene.frames.size();
    const Frame& frame = scene.frames[t.frame];
    const Eigen::Matrix4d truth = shifted(frame.truth), optimum = shifted(frame.optimum);
    t.result = aligner.align(frame.scan, truth * deltas[static_cast<std::size_t>(k)]);
    t.dt = translation_error(t.result.transform, truth);
    t.da = rotation_error(t.result.transform, truth);
    t.dt_optimum = translation_error(t.result.transform, optimum);
    t.da_optimum = rotation_error(t.result.transform, optimum);
    s.within_bound += t.dt < kMaxTranslation && t.da < kMaxRotation;
    s.at_optimum += t.dt_optimum < kNearOptimumTranslation && t.da_optimum < kNearOptimumRotation;
    const Eigen::Matrix4d& delta = deltas[static_cast<std::size_t>(k)];
    std::printf("%s %s %2d (frame %2zu): guess %.2f m %.2f deg -> %2d it %-14s dt %.4f m da %.4f deg", label,
                scene.name.c_str(), k, t.frame * 10, delta.topRightCorner<3, 1>().norm(),
                rotation_error(delta, Eigen::Matrix4d::Identity()) / kDeg, t.result.iterations,
                to_string(t.result.reason), t.dt, t.da / kDeg);
    if (same_score) {
      std::printf(" | optimum %.4f m from the truth, %.4f m %.4f deg from it",
                  translation_error(frame.optimum, frame.truth), t.dt_optimum, t.da_optimum / kDeg);
    }
    std::printf("%s\n", t.dt < kMaxTranslation && t.da < kMaxRotation ? "" : "  (outside 2 cm / 0.1 deg)");
    s.trials.push_back(std::move(t));
  }
  std::vector<double> dt, da, it;
  for (const auto& t : s.trials) {
    dt.push_back(t.dt);
    da.push_back(t.da / kDeg);
    it.push_back(t.result.iterations);
  }
  std::printf("%s %s: %d/%d within 2 cm and 0.1 deg of the truth", label, scene.name.c_str(), s.within_bound, kTrials);
  if (same_score) std::printf(", %d/%d at the score's optimum", s.at_optimum, kTrials);
  std::printf("; dt median %.4f max %.4f m, da median %.4f max %.4f deg, iterations median %.0f max %.0f (%.2f s)\n",
              median(dt), *std::max_element(dt.begin(), dt.end()), median(da), *std::max_element(da.begin(), da.end()),
              median(it), *std::max_element(it.begin(), it.end()),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return s;
}

// The preset's trials of scene `i`, run once for the two test cases that read them.
const Summary& preset_trials(std::size_t i) {
  static std::vector<Summary> cache = [] {
    std::vector<Summary> v;
    for (const SimScene& scene : scenes()) v.push_back(run_trials(scene, autoware_preset(), "autoware"));
    return v;
  }();
  return cache[i];
}

// Autoware's preset with the two limits that stop it short relaxed: epsilon 1e-3 (instead
// of 0.01, which ends some trials 0.2 deg from the optimum) and 60 iterations (instead of
// 30, which 0.1-long steps need to cover 1.5 m and 5 deg along a bent path).
AlignSettings relaxed_autoware() {
  AlignSettings s = autoware_preset();
  s.epsilon = 1e-3;
  s.max_iterations = 60;
  return s;
}

}  // namespace

// Issue 4's requirement, as written, with Autoware's preset. It does not hold on these
// scenes (hdl32-utm 4/20, os1-64 16/20: see the file comment), hence [!shouldfail]: when a
// change makes it pass, this test fails and should lose the tag.
TEST_CASE("Simulator scenes: Autoware preset lands within 2 cm and 0.1 deg in 19 of 20 trials (issue 4)",
          "[unit][accuracy][sim][!shouldfail]") {
  for (std::size_t i = 0; i < scenes().size(); ++i) {
    const SimScene& scene = scenes()[i];
    const Summary& s = preset_trials(i);
    INFO(scene.name << ": " << s.within_bound << "/" << kTrials);
    CHECK(s.within_bound >= kRequired);
  }
}

// Why the preset misses: every trial either runs out of iterations, or converges within
// 1 cm of the score's optimum, or is one of the few that epsilon 0.01 stops early.
TEST_CASE("Simulator scenes: Autoware preset misses are the score's bias and its stopping limits",
          "[unit][accuracy][sim]") {
  for (std::size_t i = 0; i < scenes().size(); ++i) {
    const SimScene& scene = scenes()[i];
    const Summary& s = preset_trials(i);
    int out_of_iterations = 0, short_of_optimum = 0;
    for (const auto& t : s.trials) {
      if (t.result.reason == StopReason::MaxIterations) {
        ++out_of_iterations;
        continue;
      }
      CHECK(t.result.reason == StopReason::Converged);
      // Converged trials reach the optimum's neighbourhood: within 1 cm always (the last
      // step is under epsilon 0.01); the rotation, which shares |dp| with the translation,
      // can be left up to 0.25 deg away (measured 0.20 deg).
      CHECK(t.dt_optimum < kNearOptimumTranslation);
      CHECK(t.da_optimum < 0.25 * kDeg);
      short_of_optimum += t.da_optimum >= kNearOptimumRotation;
    }
    INFO(scene.name << ": " << out_of_iterations << " out of iterations, " << short_of_optimum
                    << " converged short of the optimum");
    // Measured 3 and 2 per scene; the bounds leave room for rounding differences between
    // builds while still saying that most trials reach the optimum.
    CHECK(out_of_iterations <= 5);
    CHECK(short_of_optimum <= 4);
    CHECK(s.at_optimum >= kTrials - out_of_iterations - short_of_optimum);
  }
}

// Where the score's optimum lies: within 5 cm and 0.05 deg of the truth on every frame
// (measured at most 4.8 cm, 0.03 deg). A regression in the score or the map would move it.
TEST_CASE("Simulator scenes: the Autoware score's optimum lies within 5 cm and 0.05 deg of the truth",
          "[unit][accuracy][sim]") {
  for (const SimScene& scene : scenes()) {
    for (std::size_t f = 0; f < scene.frames.size(); ++f) {
      const Frame& frame = scene.frames[f];
      const double dt = translation_error(frame.optimum, frame.truth), da = rotation_error(frame.optimum, frame.truth);
      std::printf("optimum %s frame %zu: %.4f m, %.4f deg from the truth\n", scene.name.c_str(), f * 10, dt, da / kDeg);
      CAPTURE(scene.name, f, dt, da / kDeg);
      CHECK(dt < 0.05);
      CHECK(da < 0.05 * kDeg);
    }
  }
}

// The documented variant: epsilon 1e-3 and 60 iterations reach the optimum from every
// guess. That meets issue 4's bound where the score's optimum is within it (os1-64).
TEST_CASE("Simulator scenes: Autoware with epsilon 1e-3 and 60 iterations reaches the score's optimum",
          "[unit][accuracy][sim]") {
  const SimScene& hdl32 = scenes()[0];
  const SimScene& os1 = scenes()[1];
  const Summary h = run_trials(hdl32, relaxed_autoware(), "autoware-eps1e-3-it60");
  const Summary o = run_trials(os1, relaxed_autoware(), "autoware-eps1e-3-it60");
  CHECK(h.at_optimum >= kRequired);
  CHECK(o.at_optimum >= kRequired);
  CHECK(o.within_bound >= kRequired);
  for (const auto* s : {&h, &o}) {
    for (const auto& t : s->trials) CHECK(t.result.converged);
  }
}

// The map origin is only a change of coordinates: the same hdl32 scene with its origin at
// zero instead of UTM gives the same poses (to 1e-6 m, 1e-9 rad: the subtraction of a
// 4e6 m offset in double leaves about 5e-10 m).
TEST_CASE("Simulator scenes: a UTM-sized origin gives the same alignments as origin zero",
          "[unit][accuracy][sim]") {
  const SimScene& scene = scenes()[0];
  REQUIRE(scene.map.origin.norm() > 1e6);
  const Summary utm = run_trials(scene, relaxed_autoware(), "utm");
  const Summary zero = run_trials(scene, relaxed_autoware(), "zero", -scene.map.origin);
  for (int k = 0; k < kTrials; ++k) {
    const auto& a = utm.trials[static_cast<std::size_t>(k)];
    const auto& b = zero.trials[static_cast<std::size_t>(k)];
    const Eigen::Vector3d t_utm = a.result.transform.topRightCorner<3, 1>() - scene.map.origin;
    const Eigen::Vector3d t_zero = b.result.transform.topRightCorner<3, 1>();
    CAPTURE(k, t_utm.transpose(), t_zero.transpose());
    CHECK(a.result.iterations == b.result.iterations);
    CHECK((t_utm - t_zero).norm() < 1e-6);
    CHECK(rotation_error(a.result.transform, b.result.transform) < 1e-9);
  }
}

// PCL's preset (resolution 1, More-Thuente, PCL's stopping rule) on the same scenes, for
// comparison. With its tutorial epsilon 0.01 the rule (squared translation of the last step
// <= epsilon) stops after the first iteration, whose step is at most 0.1: the guess is
// barely moved (measured 0/20 within the bound on both scenes). Reported, and the one-
// iteration stop checked; with epsilon 1e-6 it iterates (printed for comparison).
TEST_CASE("Simulator scenes: PCL's preset stops after one iteration (report)", "[unit][accuracy][sim]") {
  for (const SimScene& scene : scenes()) {
    const Summary s = run_trials(scene, pcl_preset(), "pcl");
    for (const auto& t : s.trials) {
      CHECK(t.result.iterations == 1);
      CHECK(t.result.converged);
    }
    AlignSettings iterating = pcl_preset();
    iterating.epsilon = 1e-6;
    run_trials(scene, iterating, "pcl-eps1e-6");
  }
}
