// Accuracy of the CPU backend on the simulator's scenes, where the truth is exact (issue 4):
// "Autoware mode from guesses up to 1.5 m and 5 deg off lands within 2 cm and 0.1 deg of the
// truth in at least 19 of 20 seeded trials per scene." It holds on both scenes: hdl32-utm
// 19/20, os1-64 20/20.
//
// Scenes (built with ndtcu::sim, nothing read from disk), each the simulator's default
// 200 m world (`ndtcu simulate` without --world-size: a street grid of 70-100 m blocks):
//   hdl32-utm: world seed 5, HDL-32E (2 cm range noise), scene origin (680000, 3900000, 40);
//              20 buildings, 401 trees, 46 poles, 87 vehicles, 13 walls
//   os1-64:    world seed 11, Ouster OS1-64 (1 cm range noise), origin zero; 32 buildings,
//              151 trees, 69 poles, 179 vehicles, 6 walls
// Scans: frames 0, 10, 20 and 30 of a drive (trajectory seed: world seed + 100; one second
// apart), voxel-downsampled at 0.5 m (6.5-8 k points). Truth:
// T_world_sensor = world_from_scene * scene_from_sensor.
// Map: made the way a mapping run makes one. A survey drives every street of the road
// network end to end in both directions (right-hand lane), a scan every 2 m (504 and 594
// scans, the scene's own sensor with its own noise draws), each put into the world frame
// at its exact pose (a perfect pose graph), accumulated pass by pass and voxel-filtered at
// 0.1 m (4.0-4.3 M points). It holds only surfaces seen from the streets, from both sides
// and at many ranges.
//
// Trials: 20 per scene, trial k on frame k mod 4. Each guess is truth * delta (applied in
// the sensor frame), delta drawn from std::mt19937(7): translation direction uniform on the
// sphere (rejection sampling in the unit ball), length uniform in [0, 1.5] m; rotation axis
// uniform on the sphere, angle uniform in [0, 5] deg.
//
// Autoware mode here: Autoware's score (resolution 2, covariance (S + I)/(n - 1), radius
// search), its fixed step (no line search) and its convergence rule (|dp| < epsilon), with
// step 0.05, epsilon 1e-3 and 150 iterations instead of the preset's 0.1, 0.01 and 30:
// - 30 steps of at most 0.1 (|dp| over all six entries) do not cover the bent path from
//   1.5 m and 5 deg: the preset gets 11/20 on hdl32-utm and 17/20 on os1-64 (trials run
//   out of iterations up to 97 cm from the truth).
// - Epsilon 0.01 lets trials stop short; with 1e-3 every converged trial ends within
//   0.4 mm and 0.003 deg of the optimum.
// - The step: near the optimum the Hessian can have a positive eigenvalue (the score is
//   convex along one direction there, e.g. translation along x mixed with pitch); PCL's and
//   Autoware's Newton direction then heads for a saddle, and the fixed step goes back and
//   forth at full length between two poses until the iterations run out (what Autoware
//   counts as oscillation). 0.05 did this least over ten map variants of the earlier 120 m
//   scenes (step 0.1: 20 of 400 trials; 0.05: 6); 0.2 is worse, 0.03 and 0.02 leave trials
//   short after 250-300 iterations. 150 iterations: 0.05 per step needs at least 32 for
//   1.5 m and 5 deg in a straight line, and the paths bend (up to 126 measured).
//
// Result (measured; the tests print it): the optimum lies, on frames 0/10/20/30, 0.5, 0.5,
// 0.2, 0.4 cm from the truth on hdl32-utm and 0.9, 0.6, 0.9, 0.8 cm on os1-64 (rotation
// under 0.011 deg). Every os1-64 trial converges to it; 19 hdl32-utm trials do and one
// (frame 30) goes back and forth 2.2 cm and 0.25 deg from the truth.
//
// How robust that is: with the map's voxel lattice shifted by six sub-voxel offsets
// (points moved by (0.5, 0, 0), (0, 0.5, 0), (0, 0, 0.5), (0.5, 0.5, 0.5), (1, 0.3, 0.7),
// (0.25, 1.25, 0.1) m against the map origin; same world), os1-64 gets 20/20 every time and
// hdl32-utm 18, 17, 20, 19, 18, 20: every miss is a trial going back and forth (9 of the
// 140 hdl32-utm trials), never the optimum's place. So the requirement holds on both
// scenes as built here, on hdl32-utm without margin against that behaviour of the fixed
// step. NewtonDirection::SaddleFree (eigenvalues -|lambda|, an ascent direction where the
// Hessian is indefinite) keeps Autoware's score and step and halves the iterations; over
// the same seven lattices it leaves 3 of 140 hdl32-utm trials going back and forth (19,
// 18, 20, 20, 20, 20, 20) and none of os1-64's.
//
// The scenes were 120 m worlds before (the same seeds). At 120 m the grid degenerates to
// one block whose four streets run along the world's edge; the lots around the block are
// too narrow for anything but pocket parks, and hdl32-utm's block is a park too (no
// buildings, 150 trees, 30 poles), so the drive sees poles, trunks and vehicles on one
// side and nothing beyond the edge. There Autoware's score itself has its optimum 2.8 cm
// from the truth on frame 0 (1.1 cm forward, 2.6 cm to the left; the test below pins it),
// and hdl32-utm got 14/20. Splitting the score's gradient at the truth by the primitive
// nearest each voxel: voxels on poles and tree trunks give 1.9 cm of the 2.6. The largest
// single term: a voxel boundary cuts a pole 14 m to the left, leaving in the next voxel a
// sliver of its back (which the scan cannot see) of 87 points, whose covariance across the
// pole is mostly I/(n - 1): a blob about 11 cm thick, centred behind the pole, that pulls
// the scan's points on the pole's front across the boundary. With PCL's covariance S/(n - 1)
// such voxels are thin and the offset halves (1.4 cm). What was measured on the 120 m
// scenes (optimum's offset from the truth in cm on frames 0/10/20/30; trials within the
// bound out of 20):
//   map (scans at 0.5 m)                        hdl32-utm         os1-64
//   sample_map, every surface, 0.2 m            4.8 3.0 1.3 2.2   5   1.4 1.2 1.0 0.6  20
//   sample_map, 0.1 m                           3.2 1.8 0.7 1.6  15   1.1 0.9 0.5 0.4  19
//   4 random 30 s drives, a scan per s, 0.1 m   2.9 1.3 0.6 1.4  15   1.2 0.3 0.3 0.1  20
//     the same, other route seeds               6.4 3.7 1.7 1.8  10   1.0 0.3 0.4 0.1  20
//   survey, 0.2 m                               4.2 2.2 0.8 1.7   9   1.3 0.5 0.8 0.4  19
//   survey, 0.1 m                               2.8 1.3 0.3 1.1  14   1.0 0.4 0.3 0.1  19
//   survey, 0.05 m                              2.2 1.1 0.3 1.0  15   1.0 0.4 0.3 0.1  20
//   survey, 0.02 m (next to unfiltered)         2.1 1.0 0.5 1.2  15   1.0 0.4 0.2 0.1  20
//   survey every 1 m / 4 m                      2.7 / 2.9 on frame 0, 15 / 14; os1-64 19 / 19
//   scans at 0.3 / 0.2 / 1.0 m                  2.7 / 2.6 / 3.3 on frame 0, 15 / 14 / 14; 20
//   scans cropped at 60 / 40 m                  2.4 / 2.8 on frame 0, 15 / 15; os1-64 20 / 20
//   survey 0.05 m, scans cropped at 60 m        1.8 0.9 0.1 0.8  20   1.0 0.4 0.3 0.2  20
//   survey 0.1 m, lattice shifted (4 offsets)   2.7-3.4 on frame 0, 5-15; os1-64 19-20
//   survey 0.1 m, PCL's covariance S/(n - 1)    1.4 0.9 0.4 0.5  19   1.1 0.5 0.3 0.1  20
// Autoware's score is thus biased by a few cm on a scene whose lateral structure is poles
// and trunks on one side; that is the score, not the optimizer or the truth.
//
// The truth itself is consistent: a point-to-plane fit of the raw scans against a 0.05 m
// sample_map (measured once, not repeated here: an 11 M point map takes 15 s) moves less
// than 1 mm and 0.001 deg from it, scans without range noise give the same offsets (within
// 1 mm, random-drive map), and a UTM-sized origin changes no result (checked below).
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
#include <utility>
#include <vector>

using namespace ndtcu;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;

// Issue 4's bound against the truth.
constexpr double kMaxTranslation = 0.02;       // m
constexpr double kMaxRotation = 0.1 * kDeg;    // rad
// How close an alignment must come to the score's optimum to count as having reached it:
// half the bound.
constexpr double kNearOptimumTranslation = 0.01;      // m
constexpr double kNearOptimumRotation = 0.05 * kDeg;  // rad
constexpr int kTrials = 20;
constexpr int kRequired = 19;

// The map: a survey pass every kSurveySpacing metres, voxel-filtered at kMapVoxel.
constexpr double kSurveySpacing = 2.0;  // m
constexpr double kMapVoxel = 0.1;       // m
// The scans: voxel-downsampled at kScanLeaf.
constexpr double kScanLeaf = 0.5;  // m
// The car the survey poses are set on, as sim::generate_trajectory's.
constexpr double kHalfWheelbase = 1.4;  // m
constexpr double kHalfTrack = 0.8;      // m

struct Frame {
  PointCloud scan;                                        // sensor frame, kScanLeaf voxel centroids
  Eigen::Matrix4d truth = Eigen::Matrix4d::Identity();    // T_world_sensor
  Eigen::Matrix4d optimum = Eigen::Matrix4d::Identity();  // Autoware score's optimum near the truth
};

struct SimScene {
  std::string name;
  sim::World world;
  sim::LidarModel lidar;
  std::uint64_t seed = 0;
  std::size_t survey_scans = 0;
  PointCloud map;  // the survey map, world frame: origin = the scene's origin
  std::vector<Frame> frames;
};

struct SceneSpec {
  const char* name;
  std::uint64_t seed;
  const char* sensor;
  Eigen::Vector3d origin;
  double size = sim::WorldSettings{}.size;  // side of the world (m); the simulator's default
};

// How the aligners of these tests run: the CPU backend with 2 threads.
const ExecutionOptions kCpu = test::on_cpu(2);

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Poses of a mapping survey (T_scene_sensor), one pass per street and direction: every
// street of the scene's road network driven end to end in both directions, in the
// right-hand lane like the test drive, one pose every `spacing` metres, the car set on the ground as sim::generate_trajectory sets
// it (height and pitch from the front and rear wheels, roll from the left and right
// ones, the sensor 1.8 m above the contact point along the body's z).
std::vector<std::vector<Eigen::Isometry3d>> survey_passes(const sim::World& world, double spacing) {
  const sim::RoadNetwork& roads = world.scene().roads;
  const double sensor_height = sim::TrajectorySettings{}.sensor_height;
  std::vector<std::vector<Eigen::Isometry3d>> passes;
  for (const auto& [from, to] : roads.edges) {
    for (int direction = 0; direction < 2; ++direction) {
      std::vector<Eigen::Isometry3d>& poses = passes.emplace_back();
      Eigen::Vector2d a = roads.nodes[static_cast<std::size_t>(from)], b = roads.nodes[static_cast<std::size_t>(to)];
      if (direction == 1) std::swap(a, b);
      const double length = (b - a).norm();
      const Eigen::Vector2d forward = (b - a) / length, left(-forward.y(), forward.x());
      const double yaw = std::atan2(forward.y(), forward.x());
      for (double s = 0.0; s <= length; s += spacing) {
        const Eigen::Vector2d p = a + s * forward - roads.lane_offset * left;
        auto ground = [&world](const Eigen::Vector2d& q) { return world.ground_height(q.x(), q.y()); };
        const double front = ground(p + kHalfWheelbase * forward), rear = ground(p - kHalfWheelbase * forward);
        const double left_h = ground(p + kHalfTrack * left), right_h = ground(p - kHalfTrack * left);
        if (!std::isfinite(front + rear + left_h + right_h)) continue;  // off the ground grid
        const double pitch = std::atan2(rear - front, 2.0 * kHalfWheelbase);
        const double roll = std::atan2(left_h - right_h, 2.0 * kHalfTrack);
        Eigen::Isometry3d pose = Eigen::Isometry3d::Identity();
        pose.linear() = (Eigen::AngleAxisd(yaw, Eigen::Vector3d::UnitZ()) * Eigen::AngleAxisd(pitch, Eigen::Vector3d::UnitY()) *
                         Eigen::AngleAxisd(roll, Eigen::Vector3d::UnitX()))
                            .toRotationMatrix();
        const double z = 0.25 * (front + rear + left_h + right_h);
        pose.translation() = Eigen::Vector3d(p.x(), p.y(), z) + pose.linear() * Eigen::Vector3d(0.0, 0.0, sensor_height);
        poses.push_back(pose);
      }
    }
  }
  return passes;
}

// The map a mapping run makes from a survey: every scan cast from its pose (its own
// range noise), put into the world frame at that pose (exact, as if from a perfect pose
// graph), accumulated pass by pass (each pass filtered at `voxel`), the passes merged
// and filtered at `voxel` again. World frame like sample_map: origin = the scene's origin.
PointCloud survey_map(const sim::World& world, const sim::LidarModel& lidar,
                      const std::vector<std::vector<Eigen::Isometry3d>>& passes, std::uint64_t seed, double voxel) {
  const Eigen::Isometry3d world_from_scene = sim::world_from_scene(world.scene());
  const Eigen::Isometry3d rotation(world_from_scene.linear());  // world minus origin
  PointCloud map;
  map.origin = world_from_scene.translation();
  std::uint64_t frame = 0;  // the scans' noise draws: one frame index per scan
  for (const auto& poses : passes) {
    PointCloud pass;
    pass.origin = map.origin;
    for (const Eigen::Isometry3d& pose : poses) {
      const sim::Scan scan = sim::cast_scan(world, lidar, pose, seed, frame++, 2);
      const Eigen::Isometry3d to_map = rotation * pose;
      for (const Eigen::Vector3f& p : scan.cloud.points) pass.points.push_back((to_map * p.cast<double>()).cast<float>());
    }
    const PointCloud filtered = voxel_downsample(pass, voxel);
    map.points.insert(map.points.end(), filtered.points.begin(), filtered.points.end());
  }
  PointCloud out = voxel_downsample(map, voxel);
  out.intensity.clear();
  return out;
}

// Autoware mode as this file runs it for guesses up to 1.5 m and 5 deg off: Autoware's
// score (resolution 2, covariance (S + I)/(n - 1), radius search), its fixed step and
// its convergence rule, with a step of 0.05, epsilon 1e-3 and 150 iterations (see the
// file comment for why).
AlignSettings autoware_mode() {
  AlignSettings s = autoware_preset();
  s.step_size = 0.05;
  s.epsilon = 1e-3;
  s.max_iterations = 150;
  return s;
}

// The optimum of `settings`' score near each frame's truth: Newton from the truth until
// the step is below 1e-5 (a few iterations).
std::vector<Eigen::Matrix4d> optima(const PointCloud& map, const std::vector<Frame>& frames, AlignSettings settings) {
  settings.epsilon = 1e-5;
  settings.max_iterations = 100;
  Aligner aligner(settings, kCpu);
  aligner.set_target(map);
  std::vector<Eigen::Matrix4d> out;
  for (const Frame& frame : frames) {
    const AlignResult r = aligner.align(frame.scan, frame.truth);
    REQUIRE(r.converged);
    out.push_back(r.transform);
  }
  return out;
}

SimScene build_scene(const SceneSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  sim::WorldSettings ws;
  ws.seed = spec.seed;
  ws.size = spec.size;
  ws.origin = spec.origin;
  SimScene scene{spec.name, sim::World(sim::generate_scene(ws)), sim::lidar_preset(spec.sensor), spec.seed, 0, {}, {}};
  const sim::World& world = scene.world;
  sim::TrajectorySettings ts;
  ts.seed = spec.seed + 100;
  ts.frames = 31;
  const auto drive = sim::generate_trajectory(world, ts);

  const auto passes = survey_passes(world, kSurveySpacing);
  for (const auto& pass : passes) scene.survey_scans += pass.size();
  scene.map = survey_map(world, scene.lidar, passes, spec.seed + 400, kMapVoxel);
  const double map_seconds = seconds_since(t0);

  const Eigen::Isometry3d world_from_scene = sim::world_from_scene(world.scene());
  for (int f : {0, 10, 20, 30}) {
    const sim::TrajectorySample& pose = drive[static_cast<std::size_t>(f)];
    const sim::Scan scan = sim::cast_scan(world, scene.lidar, pose.scene_from_sensor, spec.seed + 300,
                                          static_cast<std::uint64_t>(f), 2);
    Frame frame;
    frame.scan = voxel_downsample(scan.cloud, kScanLeaf);
    frame.scan.intensity.clear();
    frame.truth = (world_from_scene * pose.scene_from_sensor).matrix();
    scene.frames.push_back(std::move(frame));
  }
  const auto optimum = optima(scene.map, scene.frames, autoware_preset());
  for (std::size_t f = 0; f < scene.frames.size(); ++f) scene.frames[f].optimum = optimum[f];
  const sim::SceneContents& c = world.scene().contents;
  std::printf("scene %s: %.0f m world, %zu buildings, %zu trees, %zu poles, %zu vehicles, %zu walls\n", spec.name,
              spec.size, c.buildings, c.trees, c.poles, c.vehicles, c.walls);
  std::printf("scene %s: survey of %zu scans, map %zu points (%.2f s), scans %zu-%zu points, built in %.2f s\n",
              spec.name, scene.survey_scans, scene.map.size(), map_seconds, scene.frames.front().scan.size(),
              scene.frames.back().scan.size(), seconds_since(t0));
  return scene;
}

const Eigen::Vector3d kUtmOrigin(680000, 3900000, 40);

// Both scenes, built once for every test case of this file.
const std::vector<SimScene>& scenes() {
  static const std::vector<SimScene> all = [] {
    std::vector<SimScene> v;
    v.push_back(build_scene({"hdl32-utm", 5, "hdl32", kUtmOrigin}));
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
  double dt = 0, da = 0;                  // from the truth
  double dt_optimum = 0, da_optimum = 0;  // from the score's optimum
};

struct Summary {
  int within_bound = 0;  // issue 4's bound against the truth
  int at_optimum = 0;    // within kNearOptimum* of the score's optimum
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
  Aligner aligner(settings, kCpu);
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
    std::printf("%s %s %2d (frame %2zu): guess %.2f m %.2f deg -> %3d it %-14s osc %2d dt %.4f m da %.4f deg", label,
                scene.name.c_str(), k, t.frame * 10, delta.topRightCorner<3, 1>().norm(),
                rotation_error(delta, Eigen::Matrix4d::Identity()) / kDeg, t.result.iterations,
                to_string(t.result.reason), t.result.oscillation_count, t.dt, t.da / kDeg);
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
              median(it), *std::max_element(it.begin(), it.end()), seconds_since(t0));
  return s;
}

// The trials of scene `i` with autoware_mode(), run once for the test cases that read them.
const Summary& mode_trials(std::size_t i) {
  static std::vector<Summary> cache = [] {
    std::vector<Summary> v;
    for (const SimScene& scene : scenes()) v.push_back(run_trials(scene, autoware_mode(), "autoware-mode"));
    return v;
  }();
  return cache[i];
}

std::size_t scene_index(const std::string& name) {
  for (std::size_t i = 0; i < scenes().size(); ++i) {
    if (scenes()[i].name == name) return i;
  }
  FAIL("no scene " << name);
  return 0;
}

// Distances of `optimum` from each frame's truth, printed with `label`.
std::vector<double> optimum_offsets(const SimScene& scene, const std::vector<Eigen::Matrix4d>& optimum, const char* label) {
  std::vector<double> out;
  std::printf("%s %s: optimum from the truth", label, scene.name.c_str());
  for (std::size_t f = 0; f < scene.frames.size(); ++f) {
    out.push_back(translation_error(optimum[f], scene.frames[f].truth));
    std::printf(" %.4f m %.4f deg%s", out.back(), rotation_error(optimum[f], scene.frames[f].truth) / kDeg,
                f + 1 < scene.frames.size() ? "," : "\n");
  }
  return out;
}

}  // namespace

// Issue 4's requirement on os1-64: it holds (20/20; see the file comment).
TEST_CASE("Simulator scenes: Autoware mode lands within 2 cm and 0.1 deg in 19 of 20 trials on os1-64 (issue 4)",
          "[unit][accuracy][sim][heavy]") {
  const Summary& s = mode_trials(scene_index("os1-64"));
  INFO("os1-64: " << s.within_bound << "/" << kTrials);
  CHECK(s.within_bound >= kRequired);
}

// Issue 4's requirement on hdl32-utm: it holds (19/20; one trial goes back and forth near
// the optimum, see the file comment).
TEST_CASE("Simulator scenes: Autoware mode lands within 2 cm and 0.1 deg in 19 of 20 trials on hdl32-utm (issue 4)",
          "[unit][accuracy][sim][heavy]") {
  const Summary& s = mode_trials(scene_index("hdl32-utm"));
  INFO("hdl32-utm: " << s.within_bound << "/" << kTrials);
  CHECK(s.within_bound >= kRequired);
}

// Where the trials end. Each either converges to the score's optimum (within 1 cm and
// 0.05 deg; measured 0.4 mm and 0.003 deg) or runs out of iterations going back and forth
// near it: the fixed step alternates at full length (what Autoware counts as
// oscillation), within 15 cm and 1 deg of the optimum. One hdl32-utm trial does the latter
// (measured). Every trial outside issue 4's bound is one of those or on a frame whose
// optimum is itself outside the bound (none here; the 120 m park block had one).
TEST_CASE("Simulator scenes: Autoware mode reaches the optimum or goes back and forth near it",
          "[unit][accuracy][sim]") {
  const double step = autoware_mode().step_size;
  for (std::size_t i = 0; i < scenes().size(); ++i) {
    const SimScene& scene = scenes()[i];
    const Summary& s = mode_trials(i);
    int cycling = 0;
    for (const auto& t : s.trials) {
      const auto& trace = t.result.trace;
      CAPTURE(scene.name, t.frame, t.dt_optimum, t.da_optimum / kDeg, t.result.oscillation_count);
      bool cycled = false;
      if (t.result.converged) {
        CHECK(t.dt_optimum < kNearOptimumTranslation);
        CHECK(t.da_optimum < kNearOptimumRotation);
      } else {
        CHECK(t.result.reason == StopReason::MaxIterations);
        REQUIRE(trace.size() >= 10);
        for (std::size_t k = trace.size() - 10; k < trace.size(); ++k) CHECK(trace[k].step_length == step);
        CHECK(t.result.oscillation_count >= 10);
        CHECK(t.dt_optimum < 0.15);
        CHECK(t.da_optimum < 1.0 * kDeg);
        cycled = true;
        ++cycling;
      }
      if (t.dt < kMaxTranslation && t.da < kMaxRotation) continue;
      const Frame& frame = scene.frames[t.frame];
      CHECK((cycled || translation_error(frame.optimum, frame.truth) > 0.9 * kMaxTranslation));
    }
    INFO(scene.name << ": " << s.at_optimum << "/" << kTrials << " at the optimum, " << cycling << " going back and forth");
    CHECK(cycling <= 1);
    CHECK(s.at_optimum >= kRequired);
  }
}

// Where the score's optimum lies with the survey map: within 1.5 cm of the truth on every
// frame (measured 0.2-0.9 cm), rotations within 0.05 deg (measured under 0.011). A
// regression in the score, the map or the scans would move them.
TEST_CASE("Simulator scenes: where the Autoware score's optimum lies on the survey map", "[unit][accuracy][sim]") {
  for (const SimScene& scene : scenes()) {
    const double bound = 0.015;
    for (std::size_t f = 0; f < scene.frames.size(); ++f) {
      const Frame& frame = scene.frames[f];
      const double dt = translation_error(frame.optimum, frame.truth), da = rotation_error(frame.optimum, frame.truth);
      std::printf("optimum %s frame %zu: %.4f m, %.4f deg from the truth\n", scene.name.c_str(), f * 10, dt, da / kDeg);
      CAPTURE(scene.name, f, dt, da / kDeg);
      CHECK(dt < bound);
      CHECK(da < 0.05 * kDeg);
    }
  }
}

// How the map is made moves the optimum. sample_map (every surface of the scene, also those
// never seen from a street, 0.2 m filter) puts it further from the truth than the survey
// (0.8-1.1 cm on hdl32-utm, 1.5-2.4 cm on os1-64, against 0.2-0.9 cm); on the survey map
// PCL's covariance S/(n - 1) at the same resolution also keeps it within 2 cm on every
// frame (0.4-0.8 cm).
TEST_CASE("Simulator scenes: the survey map beats sample_map; PCL's covariance puts the optimum within 2 cm",
          "[unit][accuracy][sim][heavy]") {
  for (const SimScene& scene : scenes()) {
    sim::MapSettings ms;
    ms.seed = scene.seed + 200;
    ms.voxel = 0.2;
    ms.threads = 2;
    const PointCloud sampled = sim::sample_map(scene.world, ms);
    std::vector<Eigen::Matrix4d> survey;
    for (const Frame& frame : scene.frames) survey.push_back(frame.optimum);
    const auto on_survey = optimum_offsets(scene, survey, "survey-map");
    const auto on_sampled = optimum_offsets(scene, optima(sampled, scene.frames, autoware_preset()), "sample-map");
    AlignSettings pcl_covariance = autoware_preset();
    pcl_covariance.covariance = CovarianceMode::Pcl;
    const auto with_pcl = optimum_offsets(scene, optima(scene.map, scene.frames, pcl_covariance), "survey-map-pcl-cov");
    CAPTURE(scene.name);
    CHECK(median(on_survey) < median(on_sampled));
    CHECK(*std::max_element(on_survey.begin(), on_survey.end()) < *std::max_element(on_sampled.begin(), on_sampled.end()));
    CHECK(*std::max_element(with_pcl.begin(), with_pcl.end()) < kMaxTranslation);
  }
}

// Why Autoware's preset misses more: 30 steps of at most 0.1 (|dp| over all six entries)
// do not cover the bent path from a guess 1.5 m and 5 deg off, and epsilon 0.01 lets a
// trial stop where the step first drops below it. On hdl32-utm 9 preset trials run out of
// iterations 4-20 cm from the truth (11/20 within the bound); on os1-64 4 do, one of them
// 97 cm off (17/20) (measured).
TEST_CASE("Simulator scenes: Autoware's preset runs out of iterations from 1.5 m and 5 deg",
          "[unit][accuracy][sim]") {
  for (const SimScene& scene : scenes()) {
    const Summary s = run_trials(scene, autoware_preset(), "autoware-preset");
    int out_of_iterations = 0, converged_near = 0;
    for (const auto& t : s.trials) {
      if (t.result.reason == StopReason::MaxIterations) {
        ++out_of_iterations;
        continue;
      }
      CHECK(t.result.reason == StopReason::Converged);
      converged_near += t.dt_optimum < kNearOptimumTranslation && t.da_optimum < 0.1 * kDeg;
    }
    INFO(scene.name << ": " << out_of_iterations << " out of iterations, " << converged_near
                    << " converged within 1 cm and 0.1 deg of the optimum");
    CHECK(converged_near >= kTrials - out_of_iterations - 1);
    if (scene.name == "hdl32-utm") {
      CHECK(out_of_iterations >= 3);
      CHECK(s.within_bound < kRequired);
    }
  }
}

// The map origin is only a change of coordinates: the same hdl32 scene with its origin at
// zero instead of UTM gives the same poses (to 1e-6 m and 1e-8 rad: the subtraction of a
// 4e6 m offset in double leaves about 5e-10 m, which up to 150 iterations carry to at
// most 3e-9 rad, measured).
TEST_CASE("Simulator scenes: a UTM-sized origin gives the same alignments as origin zero", "[unit][accuracy][sim]") {
  const std::size_t i = scene_index("hdl32-utm");
  const SimScene& scene = scenes()[i];
  REQUIRE(scene.map.origin.norm() > 1e6);
  const Summary& utm = mode_trials(i);
  const Summary zero = run_trials(scene, autoware_mode(), "zero", -scene.map.origin);
  for (int k = 0; k < kTrials; ++k) {
    const auto& a = utm.trials[static_cast<std::size_t>(k)];
    const auto& b = zero.trials[static_cast<std::size_t>(k)];
    const Eigen::Vector3d t_utm = a.result.transform.topRightCorner<3, 1>() - scene.map.origin;
    const Eigen::Vector3d t_zero = b.result.transform.topRightCorner<3, 1>();
    CAPTURE(k, t_utm.transpose(), t_zero.transpose());
    CHECK(a.result.iterations == b.result.iterations);
    CHECK((t_utm - t_zero).norm() < 1e-6);
    CHECK(rotation_error(a.result.transform, b.result.transform) < 1e-8);
  }
}

// PCL's preset (resolution 1, More-Thuente, PCL's stopping rule) on the same scenes, for
// comparison. With its tutorial epsilon 0.01 the rule (squared translation of the last step
// <= epsilon) stops after the first iteration, whose step is at most 0.1: the guess is
// barely moved. Reported, and the one-iteration stop checked; with epsilon 1e-6 it
// iterates (printed for comparison).
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


// NewtonDirection::SaddleFree with the same score, step, epsilon and iterations: where
// the Hessian is not negative definite it steps uphill instead of heading for a saddle.
// The trials need about half the iterations (hdl32-utm median 22 against 40, os1-64 20
// against 40) and go back and forth less often (see the file comment for the counts over
// lattice shifts), but not never: hdl32-utm keeps one such trial here.
TEST_CASE("Simulator scenes: Autoware's score with saddle-free Newton steps needs fewer iterations",
          "[unit][accuracy][sim]") {
  AlignSettings s = autoware_mode();
  s.newton_direction = NewtonDirection::SaddleFree;
  for (std::size_t i = 0; i < scenes().size(); ++i) {
    const SimScene& scene = scenes()[i];
    const Summary saddle_free = run_trials(scene, s, "saddle-free");
    const Summary& autoware = mode_trials(i);
    std::vector<double> it_saddle_free, it_autoware;
    for (const auto& t : saddle_free.trials) it_saddle_free.push_back(t.result.iterations);
    for (const auto& t : autoware.trials) it_autoware.push_back(t.result.iterations);
    INFO(scene.name << ": " << saddle_free.within_bound << "/" << kTrials << " within the bound, "
                    << saddle_free.at_optimum << " at the optimum; median iterations " << median(it_saddle_free)
                    << " against " << median(it_autoware));
    CHECK(saddle_free.within_bound >= kRequired);
    CHECK(saddle_free.at_optimum >= kRequired);
    CHECK(median(it_saddle_free) < median(it_autoware));
  }
}

// Why the scenes are the simulator's default 200 m worlds and not 120 m ones: in a 120 m
// world the street grid is one block with its four streets along the world's edge, the
// lots around it are too narrow for anything but pocket parks, and hdl32-utm's block is a
// park as well, so the drive sees poles, trunks and vehicles on one side and nothing
// beyond the edge. There the optimum of Autoware's score itself lies 2.8 cm from the
// truth on frame 0 (PCL's covariance: 1.4 cm), which no step rule can undo: a property of
// the score on that scene, pinned here (see the file comment).
TEST_CASE("Simulator scenes: on a 120 m park block Autoware's score puts the optimum over 2 cm from the truth",
          "[unit][accuracy][sim][heavy]") {
  const SimScene park = build_scene({"hdl32-utm-120", 5, "hdl32", kUtmOrigin, 120.0});
  REQUIRE(park.world.scene().contents.buildings == 0);
  std::vector<Eigen::Matrix4d> autoware;
  for (const Frame& frame : park.frames) autoware.push_back(frame.optimum);
  const auto with_autoware = optimum_offsets(park, autoware, "park-block");
  AlignSettings pcl_covariance = autoware_preset();
  pcl_covariance.covariance = CovarianceMode::Pcl;
  const auto with_pcl = optimum_offsets(park, optima(park.map, park.frames, pcl_covariance), "park-block-pcl-cov");
  CHECK(with_autoware[0] > kMaxTranslation);
  CHECK(with_autoware[0] < 0.04);
  CHECK(with_pcl[0] < kMaxTranslation);
  CHECK(with_pcl[0] < 0.6 * with_autoware[0]);
}
