// Degenerate places (sim::Place: a tunnel, a road between flat walls, an open lot), where a
// scan cannot pin every direction of its pose, localized with the default settings on the
// CPU backend against their exact truth: every alignment says which directions it did not
// hold (AlignResult::localizability), and the weakest is the place's axis.
#include "../support/test_support.hpp"
#include "localizer_settings.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/localizability.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

using namespace ndtcu;

namespace {

struct PlaceRun {
  sim::Scene scene;
  std::vector<Eigen::Isometry3d> truth;  // T_world_sensor per frame
  std::vector<double> times;
  std::vector<PointCloud> scans;
  PointCloud map;
};

// A place, its drive (`frames` at `rate` Hz) and its scans from `sensor` with 360 columns,
// and a map sampled at 0.2 m.
PlaceRun make_place(sim::Place place, int frames, double rate, const std::string& sensor) {
  sim::PlaceSettings ps;
  ps.place = place;
  ps.length = 200.0;
  ps.origin = Eigen::Vector3d(1000.0, -2000.0, 30.0);
  PlaceRun out;
  const sim::World world(sim::generate_place(ps));
  out.scene = world.scene();
  sim::MapSettings ms;
  ms.voxel = 0.2;
  ms.threads = 2;
  out.map = sim::sample_map(world, ms);
  sim::LidarModel lidar = sim::lidar_preset(sensor);
  lidar.columns = 360;
  const Eigen::Isometry3d world_from_scene = sim::world_from_scene(out.scene);
  for (const sim::TrajectorySample& t : sim::place_drive(ps, frames, rate)) {
    out.scans.push_back(sim::cast_scan(world, lidar, t.scene_from_sensor, 7, out.scans.size(), 2).cloud);
    out.truth.push_back(world_from_scene * t.scene_from_sensor);
    out.times.push_back(t.time);
  }
  return out;
}

LocalizerSettings cpu_settings() { return test::cpu_localizer_settings(); }

}  // namespace

// Each place at 10 Hz with a speed that swings between 2 and 8 m/s, so the constant-velocity
// prediction misses along the axis by up to 0.6 m a frame. Before the degeneracy probe, the
// walled road's frames were all accepted ("tracked") at NVTL 3.19 while drifting 20 m along
// the road in 3 s, and the tunnel's 10 m: the scan cannot see the motion along them, and
// the NDT score gives no hint (the Hessian holds the road's axis at 0.03 of its strongest
// direction, the tunnel's at 0.15, while correct Livox Avia alignments reach down to 0.009).
TEST_CASE("degenerate places: no wrong pose is accepted, every frame is flagged, the weak direction is the axis",
          "[unit][sim]") {
  for (sim::Place place : {sim::Place::Corridor, sim::Place::WalledRoad, sim::Place::OpenLot}) {
    const PlaceRun run = make_place(place, 30, 10.0, "hdl32");
    const Eigen::Vector3d axis = sim::place_axis(run.scene);
    Localizer localizer(cpu_settings(), test::on_cpu(2));
    localizer.set_map(run.map);
    localizer.set_initial_pose(run.truth.front().matrix());
    int degenerate = 0;
    double worst_drift = 0.0;
    for (std::size_t k = 0; k < run.scans.size(); ++k) {
      const LocalizationResult r = localizer.localize(run.scans[k], run.times[k]);
      const Localizability& l = r.alignment.localizability;
      const Eigen::Vector3d err = r.pose.topRightCorner<3, 1>() - run.truth[k].translation();
      const double probe_along = std::abs(r.weakest_direction.head<3>().normalized().dot(axis));
      CAPTURE(sim::to_string(place), k, to_string(r.status), err.norm(), r.alignment.nvtl, r.probe_nvtl_drop,
              r.degenerate_directions, probe_along, l.weakest_ratio);
      REQUIRE(l.valid);
      // The worst outcome: a pose accepted as valid that is not where the sensor is.
      if (r.valid) CHECK(err.norm() < 0.10);
      degenerate += r.status == FrameStatus::Degenerate;
      // Across the axis the remapped pose keeps what the scan holds: near the truth sideways
      // and in height, whatever it drifted along. The tunnel is 4 m by 3 m and a 2 m voxel
      // holds a wall and the floor or ceiling at once: there NDT itself ends 0.17 m off
      // (from the exact pose, its first frame), so 0.25 m; 10 cm on the walled road.
      const Eigen::Vector3d across = err - err.dot(axis) * axis;
      if (place != sim::Place::OpenLot) CHECK(across.norm() < (place == sim::Place::Corridor ? 0.25 : 0.10));
      worst_drift = std::max(worst_drift, std::abs(err.dot(axis)));
      if (r.status != FrameStatus::Degenerate) continue;
      // The degenerate frame's covariance is widened along the weak directions: at least
      // the probe's 2 m step (1.5 x 2 m) along the probe's least-held direction.
      const Eigen::Matrix<double, 6, 1> d = r.weakest_direction;
      CHECK(d.dot(r.covariance * d) / d.squaredNorm() >= 4.0);
      if (place == sim::Place::OpenLot) {
        // A plane holds height, roll and pitch: x, y and yaw are free.
        CHECK(r.degenerate_directions >= 3);
        CHECK(std::abs(r.weakest_direction(2)) < 0.1);  // not the height
      } else {
        // The least-held direction is the tunnel's or road's axis.
        CHECK(probe_along > 0.95);
      }
    }
    std::printf("%s: %d of %zu frames degenerate, drift along the axis up to %.2f m (the prediction's)\n",
                sim::to_string(place), degenerate, run.scans.size(), worst_drift);
    // A frame the probe lets through must still be right (checked above); nearly all are flagged.
    CHECK(degenerate >= 28);
  }
}

// Refined against 1 m voxels (refine_ratio 0.5), the same drives' degenerate frames lose
// the 2 m voxels' bias across the axis and in height, which the test above allows up to
// 0.25 m in the tunnel. Measured (CPU): the tunnel's error across the axis, RMS over its 30
// frames, 15.3 cm unrefined, 2.9 cm refined (worst 19.9 and 9.5 cm); the walled road's
// 2.6 and 2.0 cm. Along the axis the pose stays the prediction's either way.
TEST_CASE("degenerate places refined: every degenerate frame refined and within 10 cm across the axis",
          "[unit][sim]") {
  for (sim::Place place : {sim::Place::Corridor, sim::Place::WalledRoad}) {
    const PlaceRun run = make_place(place, 30, 10.0, "hdl32");
    const Eigen::Vector3d axis = sim::place_axis(run.scene);
    LocalizerSettings s = cpu_settings();
    s.refine_ratio = 0.5;
    Localizer localizer(s, test::on_cpu(2));
    localizer.set_map(run.map);
    localizer.set_initial_pose(run.truth.front().matrix());
    double sum_sq = 0.0;
    int refined = 0, degenerate = 0;
    for (std::size_t k = 0; k < run.scans.size(); ++k) {
      const LocalizationResult r = localizer.localize(run.scans[k], run.times[k]);
      const Eigen::Vector3d err = r.pose.topRightCorner<3, 1>() - run.truth[k].translation();
      const Eigen::Vector3d across = err - err.dot(axis) * axis;
      CAPTURE(sim::to_string(place), k, to_string(r.status), r.refined, r.refinement_m, across.norm());
      if (r.valid) CHECK(err.norm() < 0.10);
      if (r.status != FrameStatus::Degenerate) continue;
      ++degenerate;
      refined += r.refined ? 1 : 0;
      CHECK(across.norm() < 0.10);
      sum_sq += across.squaredNorm();
    }
    std::printf("%s, refined: %d of %d degenerate frames refined, RMS error across the axis %.3f m\n",
                sim::to_string(place), refined, degenerate, std::sqrt(sum_sq / std::max(degenerate, 1)));
    CHECK(degenerate >= 28);
    CHECK(refined == degenerate);
  }
}

TEST_CASE("the localizability of an alignment: the displacement metric and the Hessian's weak directions",
          "[unit]") {
  // Points on a sphere of radius 10 about the origin: E[x] = 0, E[x x'] = 100/3 I. At the
  // zero pose a turn about any axis moves them sqrt(2/3) x 10 m RMS.
  PointCloud ring;
  for (int i = 0; i < 2000; ++i) {
    const double z = -1.0 + (2.0 * i + 1.0) / 2000.0, phi = i * 2.399963229728653;  // Fibonacci sphere
    const double rho = std::sqrt(1.0 - z * z);
    ring.points.emplace_back(static_cast<float>(10.0 * rho * std::cos(phi)),
                             static_cast<float>(10.0 * rho * std::sin(phi)), static_cast<float>(10.0 * z));
  }
  const PointMoments m = point_moments(ring.points.data(), ring.points.size());
  CHECK(m.mean.norm() < 0.05);
  CHECK(m.second(0, 0) == Approx(100.0 / 3.0).epsilon(0.01));
  const Eigen::Matrix<double, 6, 6> g = displacement_metric(Eigen::Matrix<double, 6, 1>::Zero(), m);
  CHECK(g.topLeftCorner<3, 3>().isIdentity(0.0));
  for (int k = 3; k < 6; ++k) CHECK(g(k, k) == Approx(200.0 / 3.0).epsilon(0.01));
  // The same metric from the mean of |J(x) d|^2 over the points, J from the shared
  // derivative terms, for a turned pose and a random direction.
  Eigen::Matrix<double, 6, 1> pose, d;
  pose << 1.0, -2.0, 0.5, 0.3, -0.2, 1.1;
  d << 0.2, -0.1, 0.3, 0.05, -0.02, 0.07;
  const Eigen::Matrix<double, 6, 6> gp = displacement_metric(pose, m);
  double mean_sq = 0.0;
  for (const Eigen::Vector3f& p : ring.points) {
    // Finite difference of T(x) along d: its first-order term is J(x) d.
    const double h = 1e-6;
    const Eigen::Vector4d x(p.x(), p.y(), p.z(), 1.0);
    const Eigen::Vector4d moved = pose_to_matrix(pose + h * d) * x, back = pose_to_matrix(pose - h * d) * x;
    mean_sq += ((moved - back).head<3>() / (2.0 * h)).squaredNorm();
  }
  mean_sq /= static_cast<double>(ring.points.size());
  CHECK(d.dot(gp * d) == Approx(mean_sq).epsilon(1e-6));

  // A Hessian with one soft direction: the information along x is 1e-3 of the rest (in
  // metric units), so x is the one weak direction, named as a unit pose change along x.
  Eigen::Matrix<double, 6, 6> h = -1000.0 * g;
  h(0, 0) = -1.0;
  for (int k = 1; k < 6; ++k) h(0, k) = h(k, 0) = 0.0;
  const Localizability l = analyze_localizability(h, g);
  REQUIRE(l.valid);
  CHECK(l.degenerate);
  CHECK(l.weak == 1);
  CHECK(l.eigenvalues(0) == Approx(1.0));
  CHECK(l.weakest_ratio == Approx(1e-3).epsilon(1e-6));
  CHECK(std::abs(l.directions(0, 0)) == Approx(1.0));
  CHECK(l.directions.col(0).tail<5>().norm() < 1e-9);
  // The directions are G-orthonormal: each moves the points by 1 m RMS.
  CHECK((l.directions.transpose() * g * l.directions).isIdentity(1e-9));
  // The same with every direction held equally: not degenerate, condition 1.
  const Localizability even = analyze_localizability(-5.0 * g, g);
  CHECK_FALSE(even.degenerate);
  CHECK(even.condition == Approx(1.0));
  // A saddle (one direction where the score rises) is weak whatever the ratio; no Hessian
  // is no analysis.
  Eigen::Matrix<double, 6, 6> saddle = -1000.0 * g;
  saddle(5, 5) = -saddle(5, 5);
  CHECK(analyze_localizability(saddle, g).weak >= 1);
  CHECK(std::isinf(analyze_localizability(saddle, g).condition));
  CHECK_FALSE(analyze_localizability(Eigen::Matrix<double, 6, 6>::Zero(), g).valid);
  Eigen::Matrix<double, 6, 6> bad = h;
  bad(2, 2) = std::numeric_limits<double>::quiet_NaN();
  CHECK_FALSE(analyze_localizability(bad, g).valid);
  // One point at the origin: no turn moves it (G singular); the analysis still runs.
  const Eigen::Vector3f origin = Eigen::Vector3f::Zero();
  const Eigen::Matrix<double, 6, 6> g1 = displacement_metric(pose, point_moments(&origin, 1));
  CHECK(analyze_localizability(-1000.0 * Eigen::Matrix<double, 6, 6>::Identity(), g1).valid);
}

// Also refined (refine_ratio 0.5), where a degenerate frame is refined along its held
// directions: the same verdicts, the same frames refined, the same poses. The localizability
// is compared unrefined only: refined, the frames after a degenerate one start from
// predictions a few millimetres apart on the two backends, and the 2 m alignment, flat
// along the corridor, ends a little apart along it, where the scene's Hessian differs
// (measured on an H200: eigenvalues up to 7% apart on 2 of the corridor's 12 frames).
TEST_CASE("degenerate places on CUDA: the CPU's verdicts, and the same localizability", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  int refined = 0;  // frames refined with refine_ratio 0.5 (the CPU's)
  for (sim::Place place : {sim::Place::WalledRoad, sim::Place::OpenLot, sim::Place::Corridor}) {
    const PlaceRun run = make_place(place, 12, 10.0, "hdl32");
    for (const double refine : {0.0, 0.5}) {
      LocalizerSettings s = cpu_settings();
      s.refine_ratio = refine;
      ExecutionOptions e = test::on_cpu(2);
      Localizer cpu(s, e);
      e.backend = Backend::Cuda;
      Localizer gpu(s, e);
      for (Localizer* l : {&cpu, &gpu}) {
        l->set_map(run.map);
        l->set_initial_pose(run.truth.front().matrix());
      }
      double cpu_ms = 0.0, gpu_ms = 0.0;  // the frames' localize() time on each backend
      int degenerate = 0, lost = 0, valid = 0, wrong = 0;  // the GPU's verdicts; wrong: valid, > 0.3 m off
      for (std::size_t k = 0; k < run.scans.size(); ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        const LocalizationResult a = cpu.localize(run.scans[k], run.times[k]);
        const auto t1 = std::chrono::steady_clock::now();
        const LocalizationResult b = gpu.localize(run.scans[k], run.times[k]);
        const auto t2 = std::chrono::steady_clock::now();
        cpu_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
        gpu_ms += std::chrono::duration<double, std::milli>(t2 - t1).count();
        degenerate += b.status == FrameStatus::Degenerate;
        lost += b.status == FrameStatus::Lost;
        valid += b.valid;
        wrong += b.valid && (b.pose.topRightCorner<3, 1>() - run.truth[k].translation()).norm() > 0.3;
        CAPTURE(refine, sim::to_string(place), k, to_string(a.status), to_string(b.status), a.probe_nvtl_drop,
                b.probe_nvtl_drop, a.refined, b.refined);
        CHECK(a.status == b.status);
        CHECK(a.refined == b.refined);
        refined += a.refined ? 1 : 0;
        CHECK(a.degenerate_directions == b.degenerate_directions);
        CHECK((a.pose.topRightCorner<3, 1>() - b.pose.topRightCorner<3, 1>()).norm() < 0.01);
        // The same alignment to rounding (the GPU sums a point's pairs in another order), so
        // the same analysis of its Hessian: eigenvalues to 1e-3, weakest direction parallel.
        if (refine > 0.0) continue;
        const Localizability& la = a.alignment.localizability;
        const Localizability& lb = b.alignment.localizability;
        REQUIRE(la.valid);
        REQUIRE(lb.valid);
        for (int i = 0; i < 6; ++i) CHECK(lb.eigenvalues(i) == Approx(la.eigenvalues(i)).epsilon(1e-3));
        CHECK(std::abs(la.directions.col(0).normalized().dot(lb.directions.col(0).normalized())) > 0.999);
      }
      CHECK(wrong == 0);
      const double frames = static_cast<double>(run.scans.size());
      std::printf("degenerate places, %s, refine %.1f, on CUDA: %zu frames, %d valid, %d degenerate, %d lost, "
                  "%d accepted more than 0.3 m off; %.1f frames/s (CPU, 2 threads: %.1f)\n",
                  sim::to_string(place), refine, run.scans.size(), valid, degenerate, lost, wrong,
                  frames / (gpu_ms / 1000.0), frames / (cpu_ms / 1000.0));
    }
  }
  std::printf("degenerate places, refined: %d of 36 frames refined on both backends\n", refined);
  CHECK(refined > 0);
}

TEST_CASE("the scan filter shrinks its leaf for a sparse scan until min_scan_points survive, bounded", "[unit]") {
  // A VLP-16 scan in the walled road: sparse rings, a few thousand returns.
  sim::PlaceSettings ps;
  ps.place = sim::Place::WalledRoad;
  const sim::World world(sim::generate_place(ps));
  sim::LidarModel lidar = sim::lidar_preset("vlp16");
  lidar.columns = 450;
  const PointCloud scan =
      sim::cast_scan(world, lidar, sim::place_drive(ps, 1, 10.0).front().scene_from_sensor, 3, 0, 2).cloud;
  LocalizerSettings s = cpu_settings();
  s.gpu_preprocess = false;
  const std::size_t fixed = Localizer(s, test::on_cpu(2)).preprocess(scan).size();
  s.min_scan_points = fixed * 2;
  const PointCloud adapted = Localizer(s, test::on_cpu(2)).preprocess(scan);
  CAPTURE(scan.size(), fixed, adapted.size());
  CHECK(adapted.size() >= s.min_scan_points);
  // The leaf it took is one of 1 x 0.7^k, k <= 4: the same points as the fixed filter at it.
  bool matched = false;
  for (int k = 1; k <= 4 && !matched; ++k) {
    LocalizerSettings f = cpu_settings();
    f.gpu_preprocess = false;
    f.voxel_leaf = std::pow(0.7, k);
    matched = Localizer(f, test::on_cpu(2)).preprocess(scan).points == adapted.points;
  }
  CHECK(matched);
  // Never below 0.24 x the leaf, whatever it asks for; and 0 keeps the fixed leaf.
  s.min_scan_points = 10000000;
  LocalizerSettings floor = cpu_settings();
  floor.gpu_preprocess = false;
  floor.voxel_leaf = std::pow(0.7, 4);
  CHECK(Localizer(s, test::on_cpu(2)).preprocess(scan).points == Localizer(floor, test::on_cpu(2)).preprocess(scan).points);
  s.min_scan_points = 0;
  CHECK(Localizer(s, test::on_cpu(2)).preprocess(scan).size() == fixed);
}

namespace {

// BALM's OS0-64 scan with a sparser sensor's view: `rings` of its 64 rings (every
// 64 / rings-th, the ring taken from the point's elevation: the OS0 spreads its 64 beams
// evenly over +-45 deg) and then every `every`-th point left.
PointCloud reduced_scan(const PointCloud& scan, int rings, int every) {
  PointCloud out;
  out.origin = scan.origin;
  const int keep_ring = 64 / rings;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < scan.size(); ++i) {
    const Eigen::Vector3d p = scan.world(i) - scan.origin;
    const double elevation = std::atan2(p.z(), std::hypot(p.x(), p.y())) * 180.0 / M_PI;
    const int ring = std::clamp(static_cast<int>(std::floor((elevation + 45.0) / (90.0 / 64.0))), 0, 63);
    if (ring % keep_ring != 0) continue;
    if (kept++ % static_cast<std::size_t>(every) != 0) continue;
    out.points.push_back(scan.points[i]);
  }
  return out;
}

// BALM's 30 odd scans at 1 Hz (turns of up to 41 deg between scans), each reduced to 16
// of its 64 rings and then to every third point, about 6k of 73k points before the scan
// filter, localized on `backend`: how many valid frames are within 10 cm and how many are
// accepted further off (the failure that counts; a frame it cannot place must be lost or
// degenerate instead).
struct ReducedBalmRun {
  int within = 0, wrong = 0, lost = 0, degenerate = 0;
};

ReducedBalmRun localize_reduced_balm(const std::filesystem::path& dir, Backend backend) {
  const std::filesystem::path balm = dir / "balm_os0";
  std::vector<ScanEntry> scans = list_scans((balm / "odd_scans_1hz.txt").string());
  REQUIRE(scans.size() == 30);
  const Trajectory reference = read_trajectory((balm / "poses_tum.txt").string());
  const auto match = match_to_reference(scans, reference);
  ExecutionOptions e = test::on_cpu(2);
  e.backend = backend;
  Localizer localizer(cpu_settings(), e);
  localizer.set_map(read_point_cloud((balm / "map_even_frames_0-58_voxel0.1.pcd").string()));
  localizer.set_initial_pose(reference[1].pose.matrix());
  ReducedBalmRun run;
  std::size_t points = 0;
  double ms = 0.0;  // the frames' localize() time
  for (std::size_t k = 0; k < scans.size(); ++k) {
    const PointCloud scan = reduced_scan(read_point_cloud(scans[k].path), 16, 3);
    points += scan.size();
    const auto t0 = std::chrono::steady_clock::now();
    const LocalizationResult r = localizer.localize(scan, scans[k].time);
    ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(match[k]);
    const double err = (r.pose.topRightCorner<3, 1>() - reference[*match[k]].pose.translation()).norm();
    CAPTURE(k, to_string(r.status), err, r.alignment.nvtl, r.points_used, to_string(r.decided_by));
    run.lost += r.status == FrameStatus::Lost;
    run.degenerate += r.status == FrameStatus::Degenerate;
    if (r.valid) {
      run.within += err <= 0.10;
      run.wrong += err > 0.10;
      CHECK(err <= 0.10);  // no frame more than 10 cm off is accepted
    }
  }
  std::printf("balm_os0 1 Hz, 16 rings, every 3rd point (%.0f points a scan, %s): %d of 30 within 10 cm, %d lost, "
              "%d degenerate, %d accepted more than 10 cm off; %.1f frames/s\n",
              static_cast<double>(points) / 30.0, to_string(backend), run.within, run.lost, run.degenerate, run.wrong,
              30.0 / (ms / 1000.0));
  return run;
}

}  // namespace

TEST_CASE("BALM at 1 Hz with 16 of 64 rings and every third point: no wrong pose accepted, 28 of 30 within 10 cm",
          "[data]") {
  NDTCU_REQUIRE_DATA(dir, "balm_os0");
  const ReducedBalmRun run = localize_reduced_balm(dir, Backend::Cpu);
  CHECK(run.wrong == 0);
  CHECK(run.within >= 28);
}

TEST_CASE("BALM at 1 Hz with 16 of 64 rings and every third point on CUDA: no wrong pose accepted, 28 of 30",
          "[gpu]") {
  NDTCU_REQUIRE_GPU();
  NDTCU_REQUIRE_DATA(dir, "balm_os0");
  const ReducedBalmRun run = localize_reduced_balm(dir, Backend::Cuda);
  CHECK(run.wrong == 0);
  CHECK(run.within >= 28);
}

namespace {

// The Livox Avia set (`livox_avia_hku_mb`): the 114 keyframes k % 4 == 1, 2 s apart, in the
// map of the keyframes k % 4 == 3, from the first reference pose, with the default settings
// (the final pose refined at 1 m: refine_ratio 0.5, where the finer voxels hold
// refine_min_support of the points) on `backend`. The reference is the odometry's own,
// loop-closed (a GICP alignment to the map moves its query poses by up to 6.7 cm).
struct LivoxRun {
  std::vector<LocalizationResult> results;
  std::vector<double> errors;  // position error per frame (m)
  int within = 0, lost = 0, degenerate = 0;
  int wrong = 0;               // valid frames more than 0.3 m off
  double worst_valid = 0.0;    // the largest error of a valid frame (m)
};

LivoxRun localize_livox(const std::filesystem::path& data, Backend backend) {
  const std::filesystem::path livox = data / "livox_avia_hku_mb";
  std::vector<ScanEntry> scans = list_scans((livox / "queries_2s.txt").string());
  REQUIRE(scans.size() == 114);
  const Trajectory reference = read_trajectory((livox / "poses_tum.txt").string());
  const auto match = match_to_reference(scans, reference);
  ExecutionOptions e = test::on_cpu(2);
  e.backend = backend;
  Localizer localizer(cpu_settings(), e);
  localizer.set_map(read_point_cloud((livox / "map_keyframes_3mod4_voxel0.05.pcd").string()));
  REQUIRE(localizer.refines());  // the defaults refine
  REQUIRE(match[0]);
  localizer.set_initial_pose(reference[*match[0]].pose.matrix());
  LivoxRun run;
  int refined = 0;
  for (std::size_t k = 0; k < scans.size(); ++k) {
    LocalizationResult r = localizer.localize(read_point_cloud(scans[k].path), scans[k].time);
    REQUIRE(match[k]);
    const double err = (r.pose.topRightCorner<3, 1>() - reference[*match[k]].pose.translation()).norm();
    run.lost += r.status == FrameStatus::Lost;
    run.degenerate += r.status == FrameStatus::Degenerate;
    if (r.valid) {
      run.within += err <= 0.10;
      run.wrong += err > 0.30;
      run.worst_valid = std::max(run.worst_valid, err);
    }
    run.errors.push_back(err);
    refined += r.refined;
    // A refinement is a polish: it moves a valid pose by centimetres, never half a voxel.
    if (r.refined) CHECK(r.refinement_m <= 0.5);
    if (!r.valid) CHECK(!r.refined);
    run.results.push_back(std::move(r));
  }
  CHECK(refined >= 100);  // nearly every valid frame's refinement converges within its bounds
  std::printf("livox_avia_hku_mb at 2 s (%s): %d of 114 within 10 cm, %d lost, %d degenerate, %d accepted more than "
              "0.3 m off, worst valid frame %.3f m, %d refined\n",
              to_string(backend), run.within, run.lost, run.degenerate, run.wrong, run.worst_valid, refined);
  return run;
}

}  // namespace

// A narrow (70 deg) hand-held sensor 2 s between scans: the constant-velocity prediction is
// 5-55 deg off in rotation, and most frames are found by a retry or the rotation search.
// Without the refinement (refine_ratio 0) 110 of 114 are within 10 cm, frames 56-77
// 10.8-12.2 cm off along x, where an independent point-to-plane ICP of the raw scans agrees
// with the reference to 1-2 cm; with the defaults (refined at 1 m), every frame is within 10
// cm. [heavy]: 114 frames, about 11 s on 2 cores.
TEST_CASE("the Livox Avia set at 2 s with the defaults: no wrong pose accepted, none lost, every frame within 10 cm",
          "[data][heavy]") {
  NDTCU_REQUIRE_DATA(dir, "livox_avia_hku_mb");
  const LivoxRun run = localize_livox(dir, Backend::Cpu);
  for (std::size_t k = 0; k < run.results.size(); ++k) {
    CAPTURE(k, to_string(run.results[k].status), run.errors[k], to_string(run.results[k].decided_by));
    if (run.results[k].valid) CHECK(run.errors[k] < 0.15);
  }
  CHECK(run.lost == 0);
  CHECK(run.wrong == 0);
  CHECK(run.within == 114);
}

TEST_CASE("the Livox Avia set on CUDA: the CPU's verdict on every frame, poses within 1 cm", "[gpu]") {
  NDTCU_REQUIRE_GPU();
  NDTCU_REQUIRE_DATA(dir, "livox_avia_hku_mb");
  const LivoxRun cpu = localize_livox(dir, Backend::Cpu);
  const LivoxRun gpu = localize_livox(dir, Backend::Cuda);
  for (std::size_t k = 0; k < cpu.results.size(); ++k) {
    const LocalizationResult &c = cpu.results[k], &g = gpu.results[k];
    CAPTURE(k, to_string(c.status), to_string(g.status), cpu.errors[k], gpu.errors[k]);
    // The verdict: valid, degenerate or lost. Tracked and recovered may trade places (a first
    // attempt that meets the convergence rule on its 30th iteration in one backend's rounding
    // is continued in the other's; on the H200 two frames of 114 did).
    CHECK(c.valid == g.valid);
    CHECK((c.status == FrameStatus::Lost) == (g.status == FrameStatus::Lost));
    CHECK((c.status == FrameStatus::Degenerate) == (g.status == FrameStatus::Degenerate));
    if (c.valid && g.valid) CHECK((c.pose.topRightCorner<3, 1>() - g.pose.topRightCorner<3, 1>()).norm() < 0.01);
    if (g.valid) CHECK(gpu.errors[k] < 0.15);
  }
  CHECK(gpu.lost == 0);
}
