// De-skew: the math (kernels/deskew.hpp) against the simulator's exact motion, and the
// Localizer's de-skew on the simulator's fast drive with a 0.1 s sweep (HDL-32 and VLP-16),
// off against constant velocity and odometry; with no sweep, the same bits as off.
#include "../support/test_support.hpp"
#include "localizer_settings.hpp"

#include "deskew.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

// The twist that moves by `delta` in `dt` seconds (the localizer's own conversion).
math::Twist twist_of(const Eigen::Isometry3d& delta, double dt) {
  const Eigen::AngleAxisd aa(delta.linear());
  const Eigen::Vector3d phi = aa.angle() * aa.axis();
  const Eigen::Vector3d trans = delta.translation();
  return math::twist_from_motion(phi.data(), trans.data(), dt);
}

Eigen::Vector3d deskewed(const math::Twist& xi, float t, const Eigen::Vector3f& p) {
  float x = p.x(), y = p.y(), z = p.z();
  math::deskew_point(xi, t, x, y, z);
  return Eigen::Vector3d(x, y, z);
}

// A localizer on `map` from the identity (CPU, one thread).
Localizer grid_localizer(const PointCloud& map) {
  Localizer localizer(test::cpu_localizer_settings(), test::on_cpu(1));
  localizer.set_map(map);
  localizer.set_initial_pose(Eigen::Matrix4d::Identity());
  return localizer;
}

}  // namespace

TEST_CASE("de-skew: exp of the twist reproduces the motion it was taken from, and t = 0 changes no bit",
          "[unit][localization]") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int k = 0; k < 200; ++k) {
    // Motions up to 2.5 m and 0.5 rad (beyond a 0.1 s sweep at 25 m/s and 280 deg/s), and
    // tiny ones (the series branch).
    const double scale = k % 4 == 0 ? 1e-6 : 1.0;
    Eigen::Isometry3d delta = Eigen::Isometry3d::Identity();
    const Eigen::Vector3d axis = Eigen::Vector3d(u(rng), u(rng), u(rng)).normalized();
    delta.linear() = Eigen::AngleAxisd(scale * 0.5 * std::abs(u(rng)), axis).toRotationMatrix();
    delta.translation() = scale * 2.5 * Eigen::Vector3d(u(rng), u(rng), u(rng));
    const math::Twist xi = twist_of(delta, 0.1);
    for (int j = 0; j < 5; ++j) {
      const Eigen::Vector3d p(20.0 * u(rng), 20.0 * u(rng), 5.0 * u(rng));
      double q[3];
      math::apply_twist(xi, 0.1, p.data(), q);
      CAPTURE(k, j);
      // Double rounding through the logarithm and back: far below a float's 2 um at 20 m.
      CHECK((Eigen::Vector3d(q[0], q[1], q[2]) - delta * p).norm() < 1e-9);
    }
  }
  math::Twist xi;
  xi.v[0] = 22.5;
  xi.w[2] = 1.9;
  // The cost: 100k points (a 64-ring scan) over a 0.1 s sweep, best of 5 (printed for the
  // docs; not a timed check).
  std::vector<Eigen::Vector3f> cloud(100000);
  std::vector<float> times(cloud.size());
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    cloud[i] = Eigen::Vector3f(20.0f * u(rng), 20.0f * u(rng), 2.0f * u(rng));
    times[i] = static_cast<float>(0.1 * i / cloud.size());
  }
  double best_ms = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<Eigen::Vector3f> moved = cloud;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < moved.size(); ++i) math::deskew_point(xi, times[i], moved[i].x(), moved[i].y(), moved[i].z());
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    CHECK(moved[cloud.size() - 1] != cloud[cloud.size() - 1]);
  }
  std::printf("de-skew of 100,000 points on one CPU thread: %.2f ms\n", best_ms);
  for (const float c : {1.5f, -0.0f, 0.0f, 1e-30f, -7.25e3f}) {
    float x = c, y = -c, z = 0.5f * c;
    math::deskew_point(xi, 0.0f, x, y, z);
    CHECK(std::signbit(x) == std::signbit(c));
    CHECK((x == c && y == -c && z == 0.5f * c));
  }
}

TEST_CASE("de-skew: a sweep path in parts follows its twists, continuous, the identity at t = 0; one part is the twist",
          "[unit][localization]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  math::Twist base;
  base.v[0] = 18.0;
  base.v[1] = -0.4;
  base.w[2] = 0.6;
  // One part: deskew_point with the twist, bit for bit, and the path's pose the twist's.
  const math::SweepPath one = math::constant_path(base);
  for (int i = 0; i < 100; ++i) {
    const float t = static_cast<float>(0.05 * (u(rng) + 1.0));
    double r[9], o[3], r1[9], o1[3];
    math::path_motion(one, t, r, o);
    math::detail_deskew::twist_motion(base, t, r1, o1);
    CHECK(std::equal(r, r + 9, r1));
    CHECK(std::equal(o, o + 3, o1));
    float x = static_cast<float>(20 * u(rng)), y = static_cast<float>(20 * u(rng)), z = static_cast<float>(u(rng));
    float a = x, b = y, c = z;
    math::deskew_point(one, t, x, y, z);
    math::deskew_point(base, t, a, b, c);
    CHECK((x == a && y == b && z == c));
  }
  // Six parts over a 0.1 s sweep, their rates a turn's onset (yaw 0 to 1.3 rad/s) with some
  // roll and pitch, the translation `base`'s; the reference time inside the sweep, before
  // it, and at its end (times all negative).
  for (const double start : {-0.04, 0.01, -0.1}) {
    INFO("sweep from " << start << " s");
    math::SweepPath path;
    path.segments = 6;
    const double rates[6][3] = {{0.0, 0.0, 0.0},  {0.02, 0.0, 0.1},   {0.05, -0.03, 0.6},
                                {0.1, -0.05, 1.1}, {0.08, -0.02, 1.3}, {0.0, 0.0, 1.3}};
    for (int k = 0; k < 6; ++k) {
      path.begin[k] = start + 0.1 * k / 6.0;
      path.twist[k] = base;
      for (int i = 0; i < 3; ++i) path.twist[k].w[i] = rates[k][i];
    }
    math::anchor_path(path);
    // The reference: the sensor's pose integrated from t = 0 in steps of at most 5 us, each
    // within one part (cut at the parts' starts) and of its constant twist: rotation by the
    // step's angle, translation by the midpoint rotation.
    const auto part_of = [&path](double t) {
      int k = 0;
      while (k + 1 < path.segments && t >= path.begin[k + 1]) ++k;
      return k;
    };
    const auto integrated = [&](double t) {
      Eigen::Isometry3d pose = Eigen::Isometry3d::Identity();
      const double dir = t >= 0.0 ? 1.0 : -1.0;
      double now = 0.0;
      while (dir * (t - now) > 0.0) {
        const int k = part_of(now + dir * 1e-12);  // the part the step runs in
        double limit = t;
        if (dir > 0 && k + 1 < path.segments) limit = std::min(limit, path.begin[k + 1]);
        if (dir < 0 && k > 0) limit = std::max(limit, path.begin[k]);
        const double dt = dir * std::min(5e-6, dir * (limit - now));
        const math::Twist& xi = path.twist[k];
        const Eigen::Vector3d w(xi.w[0], xi.w[1], xi.w[2]), v(xi.v[0], xi.v[1], xi.v[2]);
        const double angle = w.norm() * dt;
        const Eigen::Matrix3d half = w.norm() > 0 ? Eigen::AngleAxisd(0.5 * angle, w.normalized()).toRotationMatrix()
                                                  : Eigen::Matrix3d::Identity();
        pose.translation() += pose.linear() * half * v * dt;
        pose.linear() = pose.linear() * half * half;
        now = std::abs(limit - now) <= 5e-6 ? limit : now + dt;
      }
      return pose;
    };
    for (const double f : {0.0, 0.09, 0.166, 0.234, 0.4, 0.5, 0.666, 0.8, 0.833, 1.0, 1.1}) {
      for (const double t : {start + 0.1 * f, 0.0}) {
        CAPTURE(t);
        const Eigen::Isometry3d pose = integrated(t);
        const Eigen::Vector3f p(static_cast<float>(30 * u(rng)), static_cast<float>(30 * u(rng)),
                                static_cast<float>(3 * u(rng)));
        float x = p.x(), y = p.y(), z = p.z();
        math::deskew_point(path, static_cast<float>(t), x, y, z);
        // The steps' midpoint rule (at most 1e-6 m measured) and the float time's rounding
        // (t in float: 1e-9 s at 18 m/s), and the float point's (2 um at 30 m).
        CHECK((Eigen::Vector3d(x, y, z) - pose * p.cast<double>()).norm() < 5e-6);
        // The path's pose at t is the one the points are moved by.
        double r[9], o[3];
        math::path_motion(path, t, r, o);
        CHECK((Eigen::Map<const Eigen::Matrix<double, 3, 3, Eigen::RowMajor>>(r) - pose.linear()).norm() < 1e-6);
        CHECK((Eigen::Vector3d(o[0], o[1], o[2]) - pose.translation()).norm() < 1e-6);
        if (t == 0.0) CHECK((x == p.x() && y == p.y() && z == p.z()));
      }
    }
    // Continuous at each part's start: points taken a float's step before it and at it (under
    // 10 ns apart) land within 0.1 mm, where the rates' steps would part them by millimetres
    // by the sweep's end.
    for (int k = 1; k < path.segments; ++k) {
      CAPTURE(k);
      const float at = static_cast<float>(path.begin[k]);
      const float before = std::nextafter(at, -1.0f);
      float x0 = 25.0f, y0 = 10.0f, z0 = 1.0f, x1 = x0, y1 = y0, z1 = z0;
      math::deskew_point(path, before, x0, y0, z0);
      math::deskew_point(path, at, x1, y1, z1);
      CHECK(Eigen::Vector3d(x1 - x0, y1 - y0, z1 - z0).norm() < 1e-4);
    }
    CHECK(math::moves(path));
  }
  CHECK_FALSE(math::moves(math::constant_path(math::Twist{})));
  // The cost along 16 parts: 100k points over the sweep, best of 5 (printed for the docs;
  // not a timed check). Each point finds its part and takes one more rotation.
  math::SweepPath sixteen;
  sixteen.segments = math::SweepPath::kMaxSegments;
  for (int k = 0; k < sixteen.segments; ++k) {
    sixteen.begin[k] = 0.1 * k / sixteen.segments;
    sixteen.twist[k] = base;
    sixteen.twist[k].w[2] = 1.3 * k / sixteen.segments;
  }
  math::anchor_path(sixteen);
  std::vector<Eigen::Vector3f> cloud(100000);
  std::vector<float> times(cloud.size());
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    cloud[i] = Eigen::Vector3f(static_cast<float>(20 * u(rng)), static_cast<float>(20 * u(rng)),
                               static_cast<float>(2 * u(rng)));
    times[i] = static_cast<float>(0.1 * i / cloud.size());
  }
  double best_ms[2] = {1e9, 1e9};
  for (int rep = 0; rep < 5; ++rep) {
    for (int j = 0; j < 2; ++j) {
      const math::SweepPath& along = j == 0 ? one : sixteen;
      std::vector<Eigen::Vector3f> moved = cloud;
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < moved.size(); ++i) {
        math::deskew_point(along, times[i], moved[i].x(), moved[i].y(), moved[i].z());
      }
      best_ms[j] = std::min(best_ms[j], std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      CHECK(moved.back() != cloud.back());
    }
  }
  std::printf("de-skew of 100,000 points on one CPU thread: %.2f ms along one twist, %.2f ms along 16 parts\n",
              best_ms[0], best_ms[1]);
}

TEST_CASE("de-skew: the simulator's fast drive, points moved to the sweep's start 26 times closer",
          "[unit][localization][sim]") {
  sim::SimulationSettings s;
  s.world.seed = 1;
  s.trajectory.frames = 60;
  sim::apply_scenario(s, sim::Scenario::Fast);
  const sim::World world(sim::generate_scene(s.world));
  const sim::Drive drive(world, s.trajectory);
  const double sweep = 0.1;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  // RMS over every point, and the worst, of: the raw points, exp of this sweep's twist, of
  // the frame before's (the constant-velocity model), and the first-order form.
  double sq[4] = {0, 0, 0, 0}, worst[4] = {0, 0, 0, 0};
  std::size_t count = 0;
  for (int f = 1; f < s.trajectory.frames; ++f) {
    const Eigen::Isometry3d start = drive.at(f, 0.0).scene_from_sensor;
    // The motion over this sweep (the best a constant twist can do), and over the frame
    // before (what the constant-velocity model has).
    const math::Twist xi = twist_of(start.inverse() * drive.at(f, sweep).scene_from_sensor, sweep);
    const Eigen::Isometry3d before = drive.at(f - 1, 0.0).scene_from_sensor;
    const double gap = 1.0 / s.trajectory.rate_hz;
    const math::Twist previous = twist_of(before.inverse() * start, gap);
    for (int j = 0; j < 50; ++j) {
      const float t = static_cast<float>(sweep * (j + 0.5) / 50.0);
      // A point at 10-30 m, as the sensor saw it at t.
      const Eigen::Vector3d dir = Eigen::Vector3d(u(rng), u(rng), 0.2 * u(rng)).normalized();
      const Eigen::Vector3f p = (dir * (20.0 + 10.0 * u(rng))).cast<float>();
      const Eigen::Vector3d truth = start.inverse() * drive.at(f, t).scene_from_sensor * p.cast<double>();
      // The first-order form p + t (w x p + v), for the record.
      const Eigen::Vector3d w(xi.w[0], xi.w[1], xi.w[2]), v(xi.v[0], xi.v[1], xi.v[2]);
      const Eigen::Vector3d first = p.cast<double>() + t * (w.cross(p.cast<double>()) + v);
      const double e[4] = {(p.cast<double>() - truth).norm(), (deskewed(xi, t, p) - truth).norm(),
                           (deskewed(previous, t, p) - truth).norm(), (first - truth).norm()};
      for (int i = 0; i < 4; ++i) {
        sq[i] += e[i] * e[i];
        worst[i] = std::max(worst[i], e[i]);
      }
      ++count;
    }
  }
  double rms[4];
  for (int i = 0; i < 4; ++i) rms[i] = std::sqrt(sq[i] / static_cast<double>(count));
  std::printf("de-skew on the fast drive, points at 10-30 m, RMS (worst): raw %.4f (%.3f) m, exp of this sweep's "
              "twist %.4f (%.3f) m, of the frame before's %.4f (%.3f) m, first order %.4f (%.3f) m\n",
              rms[0], worst[0], rms[1], worst[1], rms[2], worst[2], rms[3], worst[3]);
  CHECK(rms[0] > 0.5);  // the sweep moves points by metres: a check that can fail
  // The drive brakes into 4 m turns and accelerates out of them, so within a sweep its twist
  // is not constant (a yaw rate from 0 to 1.5 rad/s): no constant twist is exact.
  CHECK(rms[1] < 0.1 * rms[0]);
  CHECK(rms[2] < 0.25 * rms[0]);
  CHECK(rms[3] > rms[1]);
}

namespace {

struct DeskewSequence {
  std::vector<ScanEntry> scans;
  Trajectory truth;
  PointCloud map;
  // The sensor turned on the vehicle by this rotation (mounted): each scan's points, as read,
  // are turned by its inverse, and `truth` is the turned sensor's (mounted_across).
  Eigen::Matrix3d mount = Eigen::Matrix3d::Identity();
};

// `seq` with its sensor turned by `yaw` (rad) about its z axis on the vehicle: the same world
// points, seen along other axes, and a truth that moves sideways where `seq`'s moved forward.
DeskewSequence mounted_across(DeskewSequence seq, double yaw) {
  seq.mount = Eigen::AngleAxisd(yaw, Eigen::Vector3d::UnitZ()).toRotationMatrix();
  for (StampedPose& p : seq.truth) p.pose.linear() = p.pose.linear() * seq.mount;
  return seq;
}

// The fast drive (up to 25 m/s and 109 deg/s) in the simulator's default world (200 m),
// `frames` scans of `preset` (its own columns; the map at 0.2 m) with a sweep of `sweep`
// seconds. Coarser scans (360 columns) and a coarser map (0.5 m) localize 6.6 cm RMS from
// the truth with no sweep at all, too coarse to tell a de-skew error from the floor.
DeskewSequence make_fast(const std::string& preset, double sweep, int frames, std::uint64_t seed = 1,
                         sim::Scenario scenario = sim::Scenario::Fast) {
  const std::string name = scenario == sim::Scenario::Fast ? "" : "_" + std::string(sim::to_string(scenario));
  const fs::path dir = test::temp_dir("deskew_" + preset + "_" + std::to_string(static_cast<int>(sweep * 1000)) + "_" +
                                      std::to_string(frames) + (seed == 1 ? "" : "_seed" + std::to_string(seed)) + name);
  sim::SimulationSettings s;
  s.world.seed = seed;
  s.lidar = sim::lidar_preset(preset);
  s.trajectory.frames = frames;
  sim::apply_scenario(s, scenario);
  s.sweep_time = sweep;
  s.threads = 2;
  s.map.threads = 2;
  sim::simulate(s, dir.string());
  DeskewSequence out;
  out.scans = list_scans((dir / "scans").string(), 1.0 / s.trajectory.rate_hz);  // at the scenario's own period
  out.truth = read_trajectory((dir / "poses_tum.txt").string());
  out.map = read_point_cloud((dir / "map.pcd").string());
  REQUIRE(out.scans.size() == static_cast<std::size_t>(frames));
  return out;
}

struct DeskewRun {
  std::vector<LocalizationResult> results;
  AteStats ate;       // every valid frame
  AteStats ate_from;  // the valid frames from `from` on (those a motion is known for)
  std::size_t lost = 0, wrong = 0, wrong_from = 0, deskewed = 0, passes = 0;
  std::size_t given = 0;  // frames given their sweep's motion
  double deskew_ms = 0.0;  // preprocess time per frame
  bool times_disagree = false;  // Localizer::frame_times_disagree at the end
};

// Localizes `seq` from its true first pose on the CPU (2 threads); with `odometry`, each
// frame predicted from the truth's motion since the frame before (a perfect odometry).
// With `zero_times`, every scan is given a time of 0 per point (the de-skew then runs and
// must move nothing). With `sweep`, each frame is given the truth's motion over its own
// sweep (SweepMotion, from its first to its last point time) where the truth covers it,
// the first frame too.
DeskewRun run(const DeskewSequence& seq, Deskew mode, bool odometry, const char* label, bool zero_times = false,
              std::size_t from = 0, int passes = 0, bool sweep = false, bool forward = true) {
  LocalizerSettings settings = test::cpu_localizer_settings();
  settings.deskew = mode;
  settings.deskew_passes = passes;
  settings.deskew_forward = forward;
  // The defaults refine at 1 m (refine_ratio) only a sweep the de-skew moved by at most
  // half a finer voxel: none of this drive's after its first frame.
  Localizer localizer(settings, test::on_cpu(2));
  localizer.set_map(seq.map);
  localizer.set_initial_pose(seq.truth.front().pose.matrix());
  DeskewRun out;
  Trajectory estimate, estimate_from;
  const Eigen::Matrix<double, 6, 6> cov = Eigen::Matrix<double, 6, 6>::Identity() * 0.01;
  Eigen::Matrix4d last = seq.truth.front().pose.matrix();
  for (std::size_t k = 0; k < seq.scans.size(); ++k) {
    PointCloud scan = read_point_cloud(seq.scans[k].path);
    if (!seq.mount.isIdentity()) {
      const Eigen::Matrix3f turn = seq.mount.transpose().cast<float>();
      for (Eigen::Vector3f& p : scan.points) p = turn * p;
    }
    if (zero_times) scan.time.assign(scan.size(), 0.0f);
    std::optional<SweepMotion> motion;
    if (sweep) {
      motion = test::truth_sweep_motion(seq.truth, scan, seq.scans[k].time);
      out.given += motion.has_value();
    }
    LocalizationResult r;
    if (odometry && k > 0) {
      const Eigen::Matrix4d step = (seq.truth[k - 1].pose.inverse() * seq.truth[k].pose).matrix();
      r = motion ? localizer.localize(scan, seq.scans[k].time, last * step, cov, *motion)
                 : localizer.localize(scan, seq.scans[k].time, last * step, cov);
    } else {
      r = motion ? localizer.localize(scan, seq.scans[k].time, *motion) : localizer.localize(scan, seq.scans[k].time);
    }
    const double err = (r.pose.topRightCorner<3, 1>() - seq.truth[k].pose.translation()).norm();
    out.lost += r.status == FrameStatus::Lost;
    out.wrong += r.valid && err > 0.3;
    out.wrong_from += k >= from && r.valid && err > 0.3;
    out.deskewed += r.deskewed;
    out.passes += static_cast<std::size_t>(r.deskew_passes);
    out.deskew_ms += r.preprocess_ms;
    if (r.status != FrameStatus::Lost) last = r.pose;
    if (r.valid) estimate.push_back({seq.scans[k].time, Eigen::Isometry3d(r.pose)});
    if (r.valid && k >= from) estimate_from.push_back({seq.scans[k].time, Eigen::Isometry3d(r.pose)});
    out.results.push_back(std::move(r));
  }
  out.deskew_ms /= static_cast<double>(seq.scans.size());
  out.times_disagree = localizer.frame_times_disagree();
  out.ate = absolute_trajectory_error(estimate, seq.truth);
  out.ate_from = absolute_trajectory_error(estimate_from, seq.truth);
  std::printf("%s: %zu frames, %zu lost, %zu accepted > 0.3 m off (%zu from frame %zu), %zu de-skewed, %zu re-de-skew "
              "passes, ATE %.4f m (%.4f m from frame %zu), preprocess %.2f ms\n",
              label, seq.scans.size(), out.lost, out.wrong, out.wrong_from, from, out.deskewed, out.passes,
              out.ate.rmse_m, out.ate_from.rmse_m, from, out.deskew_ms);
  return out;
}

}  // namespace

TEST_CASE("de-skew: the fast drive with a 0.1 s sweep, HDL-32 and VLP-16: constant velocity, re-de-skew and odometry",
          "[unit][localization][sim][heavy]") {
  // Without passes a frame is de-skewed once a motion is known: from frame 2 with constant
  // velocity (two good poses), from frame 1 with odometry (the last good pose and the
  // prediction); the frames before are used as read, as off uses every frame: the bounds
  // hold from there. With the passes (the default) the first frame takes its sweep's own
  // motion (its halves aligned apart) and the second the same motion: every frame is
  // de-skewed. Measured with 2 passes: HDL-32 2.25 cm over all 20 frames (2.10 from frame
  // 2, frame 0 4.1 cm off where it was 35 cm), VLP-16 1.81 cm (1.76); without passes, from
  // frame 2, 4.13 and 3.91 cm. The motion comes from the poses at the sweeps' mean times
  // (Impl::last_mid), which a wrong motion hardly moves; from the poses at the scans' times,
  // as before, 3.77 cm (2.99) and 3.21 cm (2.53), and with at most 3 passes on the first
  // frame (before 2026-12-05) 4.20 and 3.54 cm. Frame 0 has only its own sweep, which hardly
  // holds its sideways velocity: let free (LocalizerSettings::deskew_forward false) its
  // halves settle 1.6 m/s sideways there and frame 0 is 9.8 cm off, 3.03 cm over the 20
  // frames (VLP-16 8.0 and 2.48).
  for (const std::string preset : {"hdl32", "vlp16"}) {
    INFO(preset);
    const DeskewSequence seq = make_fast(preset, 0.1, 20);
    const DeskewRun off = run(seq, Deskew::Off, false, (preset + " off").c_str(), false, 2);
    const DeskewRun cv = run(seq, Deskew::ConstantVelocity, false, (preset + " constant-velocity").c_str(), false, 2);
    const DeskewRun odo = run(seq, Deskew::Odometry, true, (preset + " odometry").c_str(), false, 1);
    // Re-de-skew (deskew_passes): each frame's own aligned motion, from frame 1 on.
    const DeskewRun again =
        run(seq, Deskew::ConstantVelocity, false, (preset + " constant-velocity, 2 passes").c_str(), false, 2, 2);
    CHECK(again.lost == 0);
    CHECK(again.wrong == 0);  // the first frame too
    CHECK(!again.times_disagree);
    CHECK(again.deskewed == seq.scans.size());
    CHECK(again.passes >= seq.scans.size());  // every frame at least once, the first three times
    CHECK(again.results[0].deskew_passes >= 3);  // the sweep's own motion, until it settles
    CHECK(again.results[0].deskew_passes <= 8);
    const auto first_error = [&seq](const DeskewRun& r) {
      return (r.results[0].pose.topRightCorner<3, 1>() - seq.truth[0].pose.translation()).norm();
    };
    std::printf("%s: the first frame %.4f m off without de-skew, %.4f m with 2 passes\n", preset.c_str(),
                first_error(off), first_error(again));
    CHECK(first_error(off) > 0.3);
    CHECK(first_error(again) < 0.06);
    CHECK(again.ate.rmse_m <= off.ate.rmse_m / 3.0);
    CHECK(again.ate.rmse_m <= 0.03);
    CHECK(again.ate_from.rmse_m <= off.ate.rmse_m / 3.0);
    CHECK(again.ate_from.rmse_m <= 0.025);
    CHECK(again.ate_from.rmse_m < cv.ate_from.rmse_m);
    CHECK(off.deskewed == 0);
    CHECK(cv.deskewed == seq.scans.size() - 2);
    CHECK(odo.deskewed == seq.scans.size() - 1);
    CHECK(off.ate.rmse_m > 0.2);  // the sweep's distortion, for the bounds below to mean something
    for (const DeskewRun* r : {&cv, &odo}) {
      CHECK(r->lost == 0);
      CHECK(r->wrong_from == 0);
      CHECK(r->ate_from.rmse_m <= off.ate.rmse_m / 3.0);
    }
    CHECK(odo.ate_from.rmse_m <= 0.035);
    CHECK(cv.ate_from.rmse_m <= 0.05);
    // The odometry's motion over each sweep itself (SweepMotion), from the first frame on
    // (the truth covers every sweep but the last, whose end is past its last pose): no pass
    // replaces it. Measured: HDL-32 2.05 cm over every frame, VLP-16 1.72 cm, where the
    // odometry's motion between frames leaves 8.4 and 6.8 cm without passes (3.2 and 3.0 cm
    // from frame 1: it is the frame before's, half a frame late, and frame 0 has none).
    const DeskewRun swept =
        run(seq, Deskew::Odometry, true, (preset + " odometry over the sweep").c_str(), false, 0, 2, true);
    CHECK(swept.given == seq.scans.size() - 1);
    CHECK(swept.lost == 0);
    CHECK(swept.wrong == 0);
    CHECK(swept.deskewed == seq.scans.size());
    for (std::size_t k = 0; k + 1 < seq.scans.size(); ++k) CHECK(swept.results[k].deskew_passes == 0);
    CHECK(first_error(swept) < 0.05);
    CHECK(swept.ate.rmse_m <= off.ate.rmse_m / 3.0);
    CHECK(swept.ate.rmse_m <= 0.03);
  }
}

TEST_CASE("de-skew: a sensor mounted across the way it moves keeps its sweep's sideways motion",
          "[unit][localization][sim][heavy]") {
  // The fast drive's VLP-16 turned on the vehicle about its z axis: its sweeps move 24 m/s
  // along its y axis (90 deg) or partly (-30 deg, 12 m/s). LocalizerSettings::deskew_forward
  // holds a sweep's own sideways velocity at 0 only while the halves find it at most 3 m/s or
  // a quarter of the forward speed. Measured: 90 deg 2.52 cm over the 20 frames, the first
  // 8.0 cm off, as with the sideways velocity free (2.44, 7.9) and as the sensor facing
  // forward with it free (2.48, 8.0); -30 deg 2.58 cm, +30 2.50, +20 2.65. A sensor turned 10 deg
  // is taken as facing forward (4.2 m/s sideways, under the quarter): its first frame 15 cm
  // off, 3.84 cm over the frames, where free leaves 8.5 cm and 2.55 (docs/library.md).
  const DeskewSequence ahead = make_fast("vlp16", 0.1, 20);
  const DeskewSequence across = mounted_across(ahead, M_PI / 2);
  const DeskewRun free = run(across, Deskew::ConstantVelocity, false, "vlp16 at 90 deg, free", false, 2, 2, false, false);
  const auto first_error = [](const DeskewSequence& seq, const DeskewRun& r) {
    return (r.results[0].pose.topRightCorner<3, 1>() - seq.truth[0].pose.translation()).norm();
  };
  CHECK(free.lost == 0);
  CHECK(free.wrong == 0);
  for (const double yaw : {M_PI / 2, -M_PI / 6}) {
    INFO("mounted at " << yaw << " rad");
    const DeskewSequence turned = mounted_across(ahead, yaw);
    const DeskewRun forward = run(turned, Deskew::ConstantVelocity, false, "vlp16 turned, forward", false, 2, 2);
    std::printf("first frame %.4f m off\n", first_error(turned, forward));
    CHECK(forward.lost == 0);
    CHECK(forward.wrong == 0);
    CHECK(forward.deskewed == turned.scans.size());
    CHECK(first_error(turned, forward) < 0.12);
    CHECK(forward.ate.rmse_m <= 0.03);
    CHECK(forward.ate.rmse_m <= 1.2 * free.ate.rmse_m);
  }
}

TEST_CASE("de-skew: a forward-looking pattern's halves set its sideways motion themselves",
          "[unit][localization][sim][heavy]") {
  // The simulator's Avia sweeps its 70 deg rosette over the whole view twice within a 0.1 s
  // scan: both halves look ahead and see the sideways velocity whole, so
  // LocalizerSettings::deskew_forward leaves it to them, bit for bit as with it false. Held
  // at 0 the fast drive's Avia lost 17 of 20 frames (seed 1) and 6 (seed 2); free, none.
  const DeskewSequence seq = make_fast("avia", 0.1, 6);
  const DeskewRun held = run(seq, Deskew::ConstantVelocity, false, "avia, forward", false, 2, 2);
  const DeskewRun free = run(seq, Deskew::ConstantVelocity, false, "avia, sideways free", false, 2, 2, false, false);
  CHECK(held.lost == 0);
  CHECK(held.wrong == 0);
  CHECK(held.results[0].deskew_passes >= 3);  // the first frame took its sweep's own motion
  REQUIRE(held.results.size() == free.results.size());
  for (std::size_t k = 0; k < held.results.size(); ++k) {
    CAPTURE(k);
    CHECK(held.results[k].pose == free.results[k].pose);
  }
}

TEST_CASE("de-skew: a turn begun within a sweep is found on the sweep's own motion, not lost through the corner",
          "[unit][localization][sim][heavy]") {
  // The fast drive's corner: at frame 33-34 (t = 3.4 s) the yaw rate steps from 0 to 1.3 rad/s
  // within the sweep. Constant velocity's motion (no turn) bends that scan 9 deg the wrong
  // way; every attempt, the wide search too, is refused. Before, the frame was lost, and
  // with it every frame of the turn (de-skewed with nothing after a lost frame): 12 of 60
  // lost on both sensors. Now the lost frame's halves, aligned apart from the prediction,
  // give its own motion, and the frame found on it de-skews the next.
  for (const std::string preset : {"hdl32", "vlp16"}) {
    INFO(preset);
    const DeskewSequence seq = make_fast(preset, 0.1, 40);
    const DeskewRun cv = run(seq, Deskew::ConstantVelocity, false, (preset + " constant-velocity, corner").c_str(),
                             false, 0, 2);
    CHECK(cv.lost == 0);
    CHECK(cv.wrong == 0);
    // The corner's first frame (33 on this map's sampling) is the one found on its own motion.
    std::size_t found = 0, corner = 0;
    for (std::size_t k = 0; k < seq.scans.size(); ++k) {
      if (cv.results[k].stage != FrameStage::SweepMotion) continue;
      found += 1;
      corner = k;
      CHECK(cv.results[k].status == FrameStatus::Recovered);
      CHECK(cv.results[k].deskew_passes >= 1);
    }
    CHECK(found == 1);
    CHECK(corner >= 32);
    CHECK(corner <= 35);
    for (std::size_t k = corner + 1; k < seq.scans.size(); ++k) {
      INFO("frame " << k);
      CHECK(cv.results[k].valid);
      CHECK(cv.results[k].deskewed);
    }
    // Measured: HDL-32 2.60 cm, VLP-16 2.11 cm (3.70 and 3.08 cm with the motion from the
    // poses at the scans' times rather than at the sweeps' mean times).
    CHECK(cv.ate.rmse_m <= 0.035);
  }
}

TEST_CASE("de-skew: a turn the halves take for a sideways motion is found among candidate turns, as loosely as they "
          "disagree",
          "[unit][localization][sim][heavy]") {
  // Seed 3's corner: at frame 32 (t = 3.2 s) the yaw rate steps from 0 to 1.28 rad/s within
  // the sweep at 7 m/s. The frame's halves read the turn as 3-8 m/s sideways, a motion the
  // one before cannot reach (plausible_change), so before the candidate turns it stayed lost,
  // and so did every frame of the turn after it: 8 of these 40 (13 of 60). Now one of the
  // candidate turns finds it, and the poses the others found widen its covariance.
  const DeskewSequence seq = make_fast("vlp16", 0.1, 40, 3);
  const DeskewRun cv = run(seq, Deskew::ConstantVelocity, false, "vlp16 seed 3, constant-velocity, corner", false, 0, 2);
  CHECK(cv.lost == 0);
  CHECK(cv.wrong == 0);
  std::size_t found = 0;
  for (std::size_t k = 0; k < seq.scans.size(); ++k) {
    const LocalizationResult& r = cv.results[k];
    INFO("frame " << k);
    CHECK(r.status != FrameStatus::Uncertain);
    if (r.stage == FrameStage::SweepMotion && k > 0) {
      found += 1;
      CHECK(k >= 31);
      CHECK(k <= 34);
    }
    // No frame more than 10 cm off reports less than 3 cm along its error.
    const Eigen::Vector3d error = r.pose.topRightCorner<3, 1>() - seq.truth[k].pose.translation();
    if (r.valid && error.norm() > 0.1) {
      const double along = std::sqrt(error.dot(r.covariance.topLeftCorner<3, 3>() * error)) / error.norm();
      CHECK(along >= 0.03);
    }
  }
  CHECK(found >= 1);
  // Measured: 2.81 cm over the 40 frames (3.22 cm before the best candidate was refined).
  CHECK(cv.ate.rmse_m <= 0.03);
}

TEST_CASE("de-skew: a candidate turn is refined between the grid's points, and the frames after it turn at its rate",
          "[unit][localization][sim][heavy]") {
  // Seed 2's corner: at frame 55 (t = 5.5 s) the yaw rate steps from 0 to 1.9 rad/s two
  // thirds into the sweep, braking from 5 m/s. The grid's best candidate (0.5 rad/s more from
  // half the sweep on) scored NVTL 3.07, where the true motion scores 3.22: the frame was
  // 26-28 cm off, and the frames after it, de-skewed with the rate between the sweeps' mean
  // times (the turn's averaged with the straight before it), 15-17 cm. ATE over the 60
  // frames: HDL-32 4.22 cm, VLP-16 4.98 cm.
  for (const std::string preset : {"hdl32", "vlp16"}) {
    INFO(preset);
    const DeskewSequence seq = make_fast(preset, 0.1, 60, 2);
    const DeskewRun cv = run(seq, Deskew::ConstantVelocity, false, (preset + " seed 2, constant-velocity").c_str(),
                             false, 0, 2);
    CHECK(cv.lost == 0);
    CHECK(cv.wrong == 0);
    std::size_t found = 0;
    for (std::size_t k = 1; k < seq.scans.size(); ++k) {
      const LocalizationResult& r = cv.results[k];
      const double error = (r.pose.topRightCorner<3, 1>() - seq.truth[k].pose.translation()).norm();
      INFO("frame " << k << ": " << to_string(r.stage) << ", " << error << " m off");
      CHECK(r.valid);
      if (r.stage == FrameStage::SweepMotion) {
        found += 1;
        CHECK(k >= 54);
        CHECK(k <= 56);
      }
      if (k >= 54 && k <= 58) {
        std::printf("  %s seed 2 frame %zu: %s, %.3f m off\n", preset.c_str(), k, to_string(r.stage), error);
        CHECK(error < 0.15);
      }
    }
    CHECK(found >= 1);
    // Measured: HDL-32 2.91 cm, VLP-16 2.68 cm.
    CHECK(cv.ate.rmse_m <= 0.03);
  }
}

TEST_CASE("de-skew: at 1 Hz, a search's winner that ran out of iterations goes on before it is judged",
          "[unit][localization][sim][heavy]") {
  // The 1 Hz stop-and-go drive (seed 3: from rest, 3.5 m/s^2 up to 9.6 m/s, braking at 6):
  // frames 14-16 are lost, and the next one's wide search ends on a winner that ran out of
  // iterations (NVTL 2.98, 120 iterations), still closing in on the pose. Judged there, it
  // failed convergence, and so the frame and the two after it were lost too: 6 of 20. It
  // now goes on from where it stopped (NVTL 3.26, 2.5 cm off), and the frames after it
  // follow. Frames 14-16 were lost to the turn (0.49 rad/s, begun after frame 13): the
  // prediction 1 m and 12 deg off, every candidate turn run from it stopped at the iteration
  // limit, while the searches had found the place on a scan the turn bent below the NVTL the
  // checks ask for. The candidate turns now run once more from the searches' best place:
  // none lost, frame 14 26.9 cm off reporting 7.2 cm, 17-18 15-17 cm (ATE 9.7 cm over 20
  // frames, where it was 6.4 cm over the 17 found).
  const DeskewSequence seq = make_fast("hdl32", 0.1, 20, 3, sim::Scenario::StopAndGo);
  const DeskewRun cv = run(seq, Deskew::ConstantVelocity, false, "hdl32 stop-and-go 1 Hz, constant-velocity", false, 0, 2);
  CHECK(cv.lost == 0);
  CHECK(cv.wrong == 0);
  CHECK(cv.ate.rmse_m <= 0.12);
  CHECK(!cv.times_disagree);  // from rest to 9.6 m/s and back: the frames' times are right
  for (std::size_t k = 17; k < seq.scans.size(); ++k) {
    INFO("frame " << k);
    CHECK(cv.results[k].valid);
  }
}

TEST_CASE("de-skew: scans numbered at a tenth of their period are found out by their sweeps' own motion",
          "[unit][localization][sim][heavy]") {
  // The 1 Hz stop-and-go drive (seed 3, VLP-16) with every time a tenth of its own, as scans
  // numbered at --period 0.1 are: the motion between two poses reads ten times too fast, and
  // de-skewed with it (`ndtcu localize --period 0.1`) 11 of 20 frames were lost and frame 2
  // was accepted 52 cm off. The first frame, from rest, takes its sweep's own motion (its
  // points' times are right: 1.4 m/s); the second is 1.9 m on, 19 m/s by the frames' times:
  // they disagree (Localizer::frame_times_disagree), and every sweep from there takes its
  // own motion. Measured: 6 lost, none wrong, 12.0 cm (the frames at rest 10-15 cm off,
  // reporting about 12 cm: each sweep's halves, not the motion between frames).
  DeskewSequence seq = make_fast("vlp16", 0.1, 20, 3, sim::Scenario::StopAndGo);
  for (ScanEntry& scan : seq.scans) scan.time *= 0.1;
  for (auto& pose : seq.truth) pose.time *= 0.1;
  const DeskewRun cv =
      run(seq, Deskew::ConstantVelocity, false, "vlp16 stop-and-go 1 Hz numbered at 0.1 s, constant-velocity", false, 0, 2);
  CHECK(cv.times_disagree);
  CHECK(cv.wrong == 0);
  CHECK(cv.lost <= 6);
}

TEST_CASE("de-skew: a sweep's motion given with the scan is checked, and sweep_motion_between inverts the motion",
          "[unit][localization]") {
  // A turn of 0.3 rad about z while moving 2 m along x, in 0.1 s.
  Eigen::Isometry3d to = Eigen::Isometry3d::Identity();
  to.linear() = Eigen::AngleAxisd(0.3, Eigen::Vector3d::UnitZ()).toRotationMatrix();
  to.translation() << 2.0, 0.1, 0.0;
  const Eigen::Matrix4d from = Eigen::Matrix4d::Identity();
  const SweepMotion m = sweep_motion_between(from, to.matrix(), 0.1);
  CHECK(m.angular.isApprox(Eigen::Vector3d(0.0, 0.0, 3.0), 1e-12));
  // Its exponential over the 0.1 s is the motion it was taken from.
  math::Twist xi;
  for (int i = 0; i < 3; ++i) {
    xi.v[i] = m.linear[i];
    xi.w[i] = m.angular[i];
  }
  const double origin[3] = {0.0, 0.0, 0.0};
  double q[3];
  math::apply_twist(xi, 0.1, origin, q);
  CHECK((Eigen::Vector3d(q[0], q[1], q[2]) - to.translation()).norm() < 1e-9);
  CHECK_THROWS_WITH(sweep_motion_between(from, to.matrix(), 0.0), Catch::Contains("dt must be positive"));
  Eigen::Matrix4d sheared = from;
  sheared(0, 1) = 0.5;
  CHECK_THROWS_WITH(sweep_motion_between(sheared, to.matrix(), 0.1), Catch::Contains("`from`"));

  // The localizer refuses a non-finite motion, naming the entry, and changes nothing.
  const PointCloud map = test::flat_grid();
  Localizer localizer = grid_localizer(map);
  SweepMotion bad;
  bad.angular.y() = std::nan("");
  CHECK_THROWS_WITH(localizer.localize(map, 0.0, bad), Catch::Contains("angular.y is nan"));
  bad = SweepMotion{};
  bad.linear.x() = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(localizer.localize(map, 0.0, Eigen::Matrix4d::Identity(),
                                       Eigen::Matrix<double, 6, 6>::Identity(), bad),
                    Catch::Contains("linear.x is inf"));
  CHECK(localizer.consecutive_lost() == 0);
}

TEST_CASE("de-skew: a sweep's motion in parts, from odometry poses inside the sweep, checked and de-skewed along",
          "[unit][localization]") {
  // Poses along one constant twist: every part between them is that twist.
  math::Twist xi;
  xi.v[0] = 20.0;
  xi.v[1] = 0.3;
  xi.w[2] = 1.2;
  const auto pose_at = [&xi](double t) {
    Eigen::Matrix4d m = Eigen::Matrix4d::Identity();
    double r[9], o[3];
    math::detail_deskew::twist_motion(xi, t, r, o);
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m(i, j) = r[3 * i + j];
      m(i, 3) = o[i];
    }
    return m;
  };
  std::vector<double> times;
  std::vector<Eigen::Matrix4d> poses;
  for (int k = 0; k <= 5; ++k) {
    times.push_back(10.0 + 0.02 * k);
    poses.push_back(pose_at(0.02 * k));
  }
  const SweepMotionParts parts = sweep_motion_parts(times, poses, 10.0);
  REQUIRE(parts.motion.size() == 5);
  REQUIRE(parts.begin.size() == 5);
  CHECK(parts.begin.front() == Approx(0.0).margin(1e-12));
  CHECK(parts.begin[3] == Approx(0.06).margin(1e-12));
  CHECK(parts.end == Approx(0.1).margin(1e-12));
  for (const SweepMotion& m : parts.motion) {
    CHECK((m.linear - Eigen::Vector3d(xi.v[0], xi.v[1], xi.v[2])).norm() < 1e-9);
    CHECK((m.angular - Eigen::Vector3d(xi.w[0], xi.w[1], xi.w[2])).norm() < 1e-9);
  }
  // More poses than parts: thinned evenly to 17 poses, the first and last kept.
  std::vector<double> many_times;
  std::vector<Eigen::Matrix4d> many;
  for (int k = 0; k <= 40; ++k) {
    many_times.push_back(0.0025 * k);
    many.push_back(pose_at(0.0025 * k));
  }
  const SweepMotionParts thinned = sweep_motion_parts(many_times, many, 0.05);
  CHECK(thinned.motion.size() == SweepMotionParts::kMaxParts);
  CHECK(thinned.begin.front() == Approx(-0.05));
  CHECK(thinned.end == Approx(0.05));
  // Bad input, named.
  CHECK_THROWS_WITH(sweep_motion_parts({0.0}, {poses[0]}, 0.0), Catch::Contains("1 poses (at least 2)"));
  CHECK_THROWS_WITH(sweep_motion_parts({0.0, 0.1}, poses, 0.0), Catch::Contains("2 times for 6 poses"));
  std::vector<double> repeated = times;
  repeated[2] = repeated[1];
  CHECK_THROWS_WITH(sweep_motion_parts(repeated, poses, 10.0), Catch::Contains("time 2"));
  std::vector<Eigen::Matrix4d> sheared = poses;
  sheared[1](0, 1) = 0.5;
  CHECK_THROWS_WITH(sweep_motion_parts(times, sheared, 10.0), Catch::Contains("pose 1"));

  // From a trajectory: an odometry at 100 Hz over a sweep from 10.005 to 10.095 s has nine
  // poses inside it: ten parts, from the sweep's ends.
  Trajectory odometry;
  for (int k = 0; k <= 20; ++k) odometry.push_back({10.0 + 0.01 * k, Eigen::Isometry3d(pose_at(0.01 * k))});
  const std::optional<SweepMotionParts> sweep = odometry_sweep_motion(odometry, 10.0, 10.005, 10.095);
  REQUIRE(sweep);
  CHECK(sweep->motion.size() == 10);
  CHECK(sweep->begin.front() == Approx(0.005));
  CHECK(sweep->begin[1] == Approx(0.01));
  CHECK(sweep->end == Approx(0.095));
  CHECK((sweep->motion[4].angular - Eigen::Vector3d(0.0, 0.0, 1.2)).norm() < 1e-6);
  // One part where no pose lies inside; none beyond the odometry or for an empty sweep.
  CHECK(odometry_sweep_motion(odometry, 10.0, 10.011, 10.019)->motion.size() == 1);
  CHECK_FALSE(odometry_sweep_motion(odometry, 10.0, 10.15, 10.25));
  CHECK_FALSE(odometry_sweep_motion(odometry, 10.0, 10.05, 10.05));

  // The localizer checks the parts, naming what is wrong, and de-skews along good ones.
  const PointCloud map = test::flat_grid();
  Localizer localizer = grid_localizer(map);
  PointCloud scan = map;
  scan.time.assign(scan.size(), 0.05f);
  SweepMotionParts bad = parts;
  bad.motion[2].angular.z() = std::nan("");
  CHECK_THROWS_WITH(localizer.localize(scan, 0.0, bad), Catch::Contains("(part 2): angular.z is nan"));
  bad = parts;
  bad.begin[3] = bad.begin[2];
  CHECK_THROWS_WITH(localizer.localize(scan, 0.0, bad), Catch::Contains("(part 2)") && Catch::Contains("follow each other"));
  bad = parts;
  bad.begin.pop_back();
  CHECK_THROWS_WITH(localizer.localize(scan, 0.0, bad), Catch::Contains("4 begins for 5 parts"));
  bad = thinned;
  bad.begin.push_back(bad.end);
  bad.motion.push_back(bad.motion.back());
  bad.end += 0.01;
  CHECK_THROWS_WITH(localizer.localize(scan, 0.0, bad), Catch::Contains("17 parts (1 to 16)"));
  CHECK(localizer.consecutive_lost() == 0);
  const LocalizationResult r = localizer.localize(scan, 0.0, parts);
  CHECK(r.deskewed);
  CHECK(r.deskew_motion == Deskew::Odometry);
  CHECK(r.deskew_passes == 0);  // the motion was given: no pass estimates it
  // One part (SweepMotionParts::whole) is what a SweepMotion gives, pose for pose.
  const SweepMotionParts one = SweepMotionParts::whole(parts.motion[1]);
  CHECK(one.begin == std::vector<double>{0.0});
  REQUIRE(one.motion.size() == 1);
  CHECK(one.motion[0].linear == parts.motion[1].linear);
  CHECK(one.motion[0].angular == parts.motion[1].angular);
  Localizer by_motion = grid_localizer(map), by_part = grid_localizer(map);
  const LocalizationResult a = by_motion.localize(scan, 0.0, parts.motion[1]);
  const LocalizationResult b = by_part.localize(scan, 0.0, one);
  CHECK(a.deskewed);
  CHECK(b.deskewed);
  CHECK(a.pose == b.pose);
}

TEST_CASE("de-skew: with no sweep the poses are off's bit for bit", "[unit][localization][sim]") {
  const DeskewSequence seq = make_fast("vlp16", 0.0, 8);
  const DeskewRun off = run(seq, Deskew::Off, false, "vlp16 no sweep, off");
  const DeskewRun cv = run(seq, Deskew::Auto, false, "vlp16 no sweep, auto");
  // Times of zero: the de-skew runs on every frame with a velocity and moves no point.
  const DeskewRun zero = run(seq, Deskew::ConstantVelocity, false, "vlp16 no sweep, times 0", true);
  CHECK(zero.deskewed >= seq.scans.size() - 2);
  // ... and re-de-skew runs no pass on them (nothing to move: the same bits again).
  const DeskewRun again = run(seq, Deskew::ConstantVelocity, false, "vlp16 no sweep, times 0, 2 passes", true, 0, 2);
  CHECK(again.passes == 0);
  REQUIRE(off.results.size() == cv.results.size());
  for (std::size_t k = 0; k < off.results.size(); ++k) {
    CAPTURE(k);
    CHECK(off.results[k].pose == cv.results[k].pose);
    CHECK(off.results[k].pose == zero.results[k].pose);
    CHECK(off.results[k].pose == again.results[k].pose);
    CHECK(off.results[k].status == cv.results[k].status);
    CHECK(off.results[k].alignment.nvtl == zero.results[k].alignment.nvtl);
    CHECK_FALSE(cv.results[k].deskewed);
  }
}
