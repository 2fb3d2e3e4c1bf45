// Predictions from outside the localizer (a stack's filter, odometry): localize() with a
// prediction and its covariance, the Mahalanobis gate that sends a large correction to a
// search for confirmation, the prediction as the alignment's prior, and the interpolation
// an odometry file is read with.
#include "../support/test_support.hpp"
#include "localizer_settings.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizability.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Cholesky>
#include <Eigen/Geometry>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

using Matrix6d = Eigen::Matrix<double, 6, 6>;

Matrix6d isotropic(double metres, double radians) {
  Matrix6d c = Matrix6d::Zero();
  c.diagonal() << metres * metres, metres * metres, metres * metres, radians * radians, radians * radians,
      radians * radians;
  return c;
}

struct Sample {
  std::vector<ScanEntry> scans = list_scans((kSample / "scans").string());
  Trajectory truth = read_trajectory((kSample / "poses_tum.txt").string());
  PointCloud map = read_point_cloud((kSample / "map.pcd").string());
};

// A localizer on the sample map that has tracked its first three frames.
Localizer tracking(const Sample& d, LocalizerSettings s) {
  Localizer localizer(s, test::on_cpu(2));
  localizer.set_map(d.map);
  localizer.set_initial_pose(d.truth[0].pose.matrix());
  for (int k = 0; k < 3; ++k) REQUIRE(localizer.localize(read_point_cloud(d.scans[k].path), d.scans[k].time).valid);
  return localizer;
}

}  // namespace

TEST_CASE("a caller's prediction replaces the motion model, and the gate sends a large jump to a search",
          "[unit]") {
  const Sample d;
  const PointCloud scan = read_point_cloud(d.scans[3].path);
  const double time = d.scans[3].time;
  Eigen::Matrix4d off = d.truth[3].pose.matrix();
  off(0, 3) += 0.6;  // the prediction misses by 0.6 m

  {  // A covariance that allows it: tracked from the prediction, d' C^-1 d about 0.36.
    Localizer localizer = tracking(d, test::cpu_localizer_settings());
    const LocalizationResult r = localizer.localize(scan, time, off, isotropic(1.0, 0.1));
    CAPTURE(to_string(r.status), to_string(r.stage), r.mahalanobis2, to_string(r.decided_by));
    CHECK(r.status == FrameStatus::Tracked);
    CHECK(r.valid);
    CHECK(r.decided_by == FrameCheck::Passed);
    CHECK(r.prediction.isApprox(off));
    CHECK(r.prediction_covariance.isApprox(isotropic(1.0, 0.1)));
    CHECK(r.mahalanobis2 == Approx(0.36).margin(0.05));
    CHECK((r.pose.topRightCorner<3, 1>() - d.truth[3].pose.translation()).norm() < 0.04);
  }
  {  // A covariance of 2 cm: the 0.6 m correction is 30 sigma; a search must confirm it.
    Localizer localizer = tracking(d, test::cpu_localizer_settings());
    const LocalizationResult r = localizer.localize(scan, time, off, isotropic(0.02, 0.01));
    CAPTURE(to_string(r.status), to_string(r.stage), r.mahalanobis2, to_string(r.decided_by), r.attempts);
    CHECK(r.status == FrameStatus::Recovered);
    CHECK(r.valid);
    CHECK(r.attempts > 1);
    CHECK(r.stage != FrameStage::Prediction);
    CHECK(r.mahalanobis2 > 500.0);
    CHECK((r.pose.topRightCorner<3, 1>() - d.truth[3].pose.translation()).norm() < 0.04);
  }
  {  // Without recovery nothing can confirm it: lost, and the gate is what decided.
    LocalizerSettings s = test::cpu_localizer_settings();
    s.recovery = Recovery::None;
    Localizer localizer = tracking(d, s);
    const LocalizationResult r = localizer.localize(scan, time, off, isotropic(0.02, 0.01));
    CAPTURE(to_string(r.status), r.mahalanobis2);
    CHECK(r.status == FrameStatus::Lost);
    CHECK(r.decided_by == FrameCheck::MahalanobisGate);
    // The gate off: the same frame is tracked.
    s.gate_chi2 = 0.0;
    Localizer ungated = tracking(d, s);
    CHECK(ungated.localize(scan, time, off, isotropic(0.02, 0.01)).status == FrameStatus::Tracked);
  }
  {  // The motion model's own covariance: the last pose's (its calibrated covariance, a few
     // cm^2 here, most of it along the scene's weakest direction) plus growth with the time
     // since it.
    LocalizerSettings s = test::cpu_localizer_settings();
    Localizer localizer = tracking(d, s);
    const LocalizationResult r = localizer.localize(scan, time);
    const double dt = d.scans[3].time - d.scans[2].time;
    CHECK(r.prediction_covariance(0, 0) == Approx(std::pow(s.motion_translation_sigma * dt, 2)).margin(3e-3));
    CHECK(r.prediction_covariance(5, 5) == Approx(std::pow(s.motion_rotation_sigma * dt, 2)).margin(1e-5));
    CHECK(r.prediction_covariance(0, 0) > std::pow(s.motion_translation_sigma * dt, 2));
    CHECK(r.mahalanobis2 < 1.0);
  }
}

TEST_CASE("a caller's prediction is checked: rigid, and a symmetric positive semi-definite covariance",
          "[unit]") {
  const Sample d;
  Localizer localizer = tracking(d, test::cpu_localizer_settings());
  const PointCloud scan = read_point_cloud(d.scans[3].path);
  Eigen::Matrix4d sheared = d.truth[3].pose.matrix();
  sheared(0, 1) += 0.2;
  CHECK_THROWS_WITH(localizer.localize(scan, 1.0, sheared, isotropic(1, 1)), Catch::Matchers::Contains("prediction"));
  Matrix6d c = isotropic(1, 1);
  c(0, 1) = 0.5;
  CHECK_THROWS_WITH(localizer.localize(scan, 1.0, d.truth[3].pose.matrix(), c), Catch::Matchers::Contains("symmetric"));
  c = isotropic(1, 1);
  c(2, 2) = -1.0;
  CHECK_THROWS_WITH(localizer.localize(scan, 1.0, d.truth[3].pose.matrix(), c),
                    Catch::Matchers::Contains("positive semi-definite"));
  c(2, 2) = std::nan("");
  CHECK_THROWS_WITH(localizer.localize(scan, 1.0, d.truth[3].pose.matrix(), c), Catch::Matchers::Contains("finite"));
  LocalizerSettings bad = test::cpu_localizer_settings();
  bad.align.prior.information.setIdentity();
  CHECK_THROWS_WITH(Localizer(bad, test::on_cpu(2)), Catch::Matchers::Contains("align.prior"));
  bad = test::cpu_localizer_settings();
  bad.gate_chi2 = -1.0;
  CHECK_THROWS_WITH(Localizer(bad, test::on_cpu(2)), Catch::Matchers::Contains("gate_chi2"));
}

// A 200 m tunnel (the simulator's corridor place), its map at 0.2 m and `frames` scans of
// an HDL-32 (360 columns) driving along it at 10 Hz, with their truth.
struct Tunnel {
  PointCloud map;
  std::vector<PointCloud> scans;
  std::vector<Eigen::Isometry3d> truth;
  std::vector<double> times;
  Eigen::Vector3d axis;
};

Tunnel make_tunnel(int frames) {
  sim::PlaceSettings ps;
  ps.place = sim::Place::Corridor;
  ps.length = 200.0;
  const sim::World world(sim::generate_place(ps));
  sim::MapSettings ms;
  ms.voxel = 0.2;
  ms.threads = 2;
  Tunnel t;
  t.map = sim::sample_map(world, ms);
  sim::LidarModel lidar = sim::lidar_preset("hdl32");
  lidar.columns = 360;
  const Eigen::Isometry3d from_scene = sim::world_from_scene(world.scene());
  t.axis = sim::place_axis(world.scene());
  for (const sim::TrajectorySample& d : sim::place_drive(ps, frames, 10.0)) {
    t.scans.push_back(sim::cast_scan(world, lidar, d.scene_from_sensor, 7, t.scans.size(), 2).cloud);
    t.truth.push_back(from_scene * d.scene_from_sensor);
    t.times.push_back(d.time);
  }
  return t;
}

Pose6 wrapped_difference(const Pose6& a, const Pose6& b) {
  Pose6 d = a - b;
  for (int i = 3; i < 6; ++i) d(i) = std::remainder(d(i), 2.0 * M_PI);
  return d;
}

// Along its axis the tunnel's scan holds nothing, so with the prediction as a prior the
// alignment stays at the prediction there (and the frame is still found degenerate), while
// across it the scan corrects the prediction.
TEST_CASE("the prediction as a prior holds the alignment along a tunnel's axis", "[unit][sim]") {
  const Tunnel t = make_tunnel(3);
  const Eigen::Isometry3d& truth = t.truth[2];
  // The prediction: 0.5 m along the axis and 0.2 m across it.
  const Eigen::Vector3d across = t.axis.cross(Eigen::Vector3d::UnitZ()).normalized();
  Eigen::Matrix4d predicted = truth.matrix();
  predicted.topRightCorner<3, 1>() += 0.5 * t.axis + 0.2 * across;
  for (bool prior : {false, true}) {
    LocalizerSettings s = test::cpu_localizer_settings();
    s.prediction_prior = prior;
    Localizer localizer(s, test::on_cpu(2));
    localizer.set_map(t.map);
    localizer.set_initial_pose(truth.matrix());
    const LocalizationResult r = localizer.localize(t.scans[2], t.times[2], predicted, isotropic(0.05, 0.01));
    const Eigen::Vector3d err = r.alignment.transform.topRightCorner<3, 1>() - truth.translation();
    CAPTURE(prior, to_string(r.status), err.dot(t.axis), err.dot(across), to_string(r.decided_by));
    CHECK(std::abs(err.dot(across)) < 0.1);  // the scan holds it either way
    if (prior) {
      CHECK(err.dot(t.axis) == Approx(0.5).margin(0.05));  // the prior holds it
      CHECK(r.alignment.localizability.weakest_ratio > 0.0);
    }
    // Either way the frame is not a valid pose: the probe finds the axis unpinned.
    CHECK_FALSE(r.valid);
    CHECK(r.status == FrameStatus::Degenerate);
  }
}

// Trials of a degenerate frame in the tunnel: each of 200 predictions drawn from its stated
// covariance (an odometry's: 0.3 m in x-y, 5 cm in z, 0.3 deg in roll and pitch, 1.1 deg in
// yaw), one frame localized from it on its own, the error against the exact truth. The
// trials take 50 places of a 10 Hz drive through the tunnel in turn (4 predictions each):
// a frame's error along the directions its scan holds is mostly its voxels' bias, which all
// the trials of one place share, so trials over a few places (there were 4) are not
// independent: one place whose 2 m alignment ended 0.78 m off sideways decided a quarter
// of them.
struct TunnelTrials {
  int trials = 0, degenerate = 0, refined = 0, wrong_valid = 0;
  std::map<std::string, int> other;  // the other verdicts
  double weak_nees = 0.0;   // mean NEES along the weakest direction (1 degree of freedom)
  double full_nees = 0.0;   // mean NEES over all six
  double held_rms = 0.0;    // RMS error (m) across the axis and in height, degenerate frames
  double refined_held_rms = 0.0;  // the same over the refined ones
};

TunnelTrials tunnel_trials(const LocalizerSettings& settings) {
  const int kFrames = 50, kTrials = 200;
  const Tunnel t = make_tunnel(kFrames);
  const Eigen::Vector3d across = t.axis.cross(Eigen::Vector3d::UnitZ()).normalized();
  Matrix6d c = Matrix6d::Zero();
  c.diagonal() << 0.09, 0.09, 0.0025, 2.5e-5, 2.5e-5, 4e-4;
  const Matrix6d l = c.llt().matrixL();
  Localizer localizer(settings, test::on_cpu(2));
  localizer.set_map(t.map);
  std::vector<PointMoments> moments;
  for (const PointCloud& scan : t.scans) {
    const PointCloud f = localizer.preprocess(scan);
    moments.push_back(point_moments(f.points.data(), f.size()));
  }
  std::mt19937 rng(17);
  std::normal_distribution<double> normal(0.0, 1.0);
  TunnelTrials out;
  double held_sq = 0.0, refined_sq = 0.0;
  for (int trial = 0; trial < kTrials; ++trial, ++out.trials) {
    const std::size_t k = static_cast<std::size_t>(trial % kFrames);
    const Pose6 truth = matrix_to_pose(t.truth[k].matrix());
    Pose6 z;
    for (int i = 0; i < 6; ++i) z(i) = normal(rng);
    localizer.set_initial_pose(t.truth[k].matrix());  // each trial on its own
    const LocalizationResult r = localizer.localize(t.scans[k], t.times[k], pose_to_matrix(truth + l * z), c);
    const double miss = (r.pose.topRightCorner<3, 1>() - t.truth[k].translation()).norm();
    if (r.valid && miss >= 0.10) ++out.wrong_valid;  // a frame taken as valid must not be a wrong pose
    if (r.status != FrameStatus::Degenerate) {
      ++out.other[to_string(r.status)];
      continue;
    }
    ++out.degenerate;
    out.refined += r.refined ? 1 : 0;
    const Pose6 err = wrapped_difference(matrix_to_pose(r.pose), truth);
    const Matrix6d g = displacement_metric(matrix_to_pose(r.pose), moments[k]);
    const Eigen::Matrix<double, 6, 1> b = r.weakest_direction / std::sqrt(r.weakest_direction.dot(g * r.weakest_direction));
    const double along = b.dot(g * err), variance = b.dot(g * r.covariance * g * b);
    out.weak_nees += along * along / variance;
    out.full_nees += err.dot(r.covariance.ldlt().solve(err));
    const double held = std::pow(err.head<3>().dot(across), 2) + err(2) * err(2);
    held_sq += held;
    refined_sq += r.refined ? held : 0.0;
  }
  out.weak_nees /= out.degenerate;
  out.full_nees /= out.degenerate;
  out.held_rms = std::sqrt(held_sq / out.degenerate);
  out.refined_held_rms = out.refined ? std::sqrt(refined_sq / out.refined) : 0.0;
  std::printf("tunnel (%s covariance, refine %.1f): %d of %d trials degenerate (%d tracked, %d recovered, %d lost), "
              "%d refined; NEES along the weakest direction %.3f (95%% bounds %.3f-%.3f), over all six %.2f "
              "(95%% bounds %.2f-%.2f); RMS error across and in height %.3f m (refined frames: %.3f m)\n",
              to_string(settings.align.pose_covariance), settings.refine_ratio, out.degenerate, out.trials,
              out.other["tracked"], out.other["recovered"], out.other["lost"], out.refined, out.weak_nees,
              1.0 - 1.96 * std::sqrt(2.0 / out.degenerate), 1.0 + 1.96 * std::sqrt(2.0 / out.degenerate), out.full_nees,
              6.0 - 1.96 * std::sqrt(12.0 / out.degenerate), 6.0 + 1.96 * std::sqrt(12.0 / out.degenerate),
              out.held_rms, out.refined_held_rms);
  return out;
}

// A degenerate frame's pose is the prediction's along its weak directions, and so is its
// covariance there: the true error along the weakest direction, against the reported
// covariance, gives a chi-square of one degree of freedom, the mean NEES within its 95%
// bounds (1 +- 1.96 sqrt(2 / N)). Along the held directions the covariance is the
// alignment's Laplace estimate, and the pose is the 2 m voxels' optimum, 12 cm RMS off
// across the tunnel and in height (the test below): over all six the NEES is about 54
// (honest: 6), printed, not held to the bound.
// [heavy]: 200 localizations (about 5 s here, a minute or more under the sanitizers).
TEST_CASE("a degenerate frame's covariance covers its error along the weak direction: NEES over 200 trials",
          "[unit][sim][heavy]") {
  // Unrefined (refine_ratio 0; the defaults refine, as the test below does).
  LocalizerSettings s = test::cpu_localizer_settings();
  s.refine_ratio = 0.0;
  const TunnelTrials r = tunnel_trials(s);
  CHECK(r.wrong_valid == 0);
  CHECK(r.degenerate >= 180);
  const double bound = 1.96 * std::sqrt(2.0 / r.degenerate);
  CHECK(r.weak_nees > 1.0 - bound);
  CHECK(r.weak_nees < 1.0 + bound);
}

// Refined against 1 m voxels (refine_ratio 0.5), a degenerate frame loses the 2 m voxels'
// bias along the directions its scan holds, and with the default (Laplace) covariance its
// error over all six directions is about as large as reported: measured 5.96 (95% bounds for
// 200 trials 5.52-6.48; the sandwich 4.40, too wide; without the refinement 53.9 with
// Laplace and 32.3 with the sandwich). Over other draws and places (seed 5; 100 and 200
// places) Laplace gave 4.89-5.83, a little on the wide side, the sandwich 3.3-4.3: held here
// to 4.5-7. Along the weak direction it stays the prediction's.
// [heavy]: 200 localizations, each with its refinement.
TEST_CASE("a degenerate frame refined against finer voxels: the held directions' bias gone, NEES near six",
          "[unit][sim][heavy]") {
  LocalizerSettings s = test::cpu_localizer_settings();
  s.refine_ratio = 0.5;
  const TunnelTrials r = tunnel_trials(s);
  CHECK(r.wrong_valid == 0);
  CHECK(r.degenerate >= 180);
  CHECK(r.refined >= r.degenerate - 5);
  CHECK(r.refined_held_rms < 0.03);  // 0.12 m without the refinement
  const double bound = 1.96 * std::sqrt(2.0 / r.degenerate);
  CHECK(r.weak_nees > 1.0 - bound);
  CHECK(r.weak_nees < 1.0 + bound);
  CHECK(r.full_nees > 4.5);
  CHECK(r.full_nees < 7.0);
}

TEST_CASE("interpolate_pose: linear in position, slerp in rotation, nothing outside the span or across a gap",
          "[unit]") {
  Trajectory t(3);
  t[0].time = 1.0;
  t[1].time = 2.0;
  t[1].pose.translation() << 2.0, 0.0, 0.0;
  t[1].pose.linear() = Eigen::AngleAxisd(0.4, Eigen::Vector3d::UnitZ()).toRotationMatrix();
  t[2].time = 10.0;
  const auto mid = interpolate_pose(t, 1.25);
  REQUIRE(mid);
  CHECK(mid->translation().isApprox(Eigen::Vector3d(0.5, 0.0, 0.0)));
  CHECK(Eigen::AngleAxisd(mid->rotation()).angle() == Approx(0.1));
  REQUIRE(interpolate_pose(t, 2.0));
  CHECK(interpolate_pose(t, 2.0)->isApprox(t[1].pose));
  CHECK_FALSE(interpolate_pose(t, 0.5));
  CHECK_FALSE(interpolate_pose(t, 10.5));
  CHECK_FALSE(interpolate_pose(t, std::nan("")));
  CHECK_FALSE(interpolate_pose(Trajectory{}, 1.0));
  CHECK(interpolate_pose(t, 5.0));
  CHECK_FALSE(interpolate_pose(t, 5.0, 1.0));  // the 8 s gap is more than 1 s
  // A rounding past either end is that end (19 x 0.1 against a stamp written 1.900000);
  // further out is outside.
  t[2].time = 1.900000;
  t[1].time = 1.5;
  REQUIRE(19 * 0.1 > t[2].time);
  REQUIRE(interpolate_pose(t, 19 * 0.1));
  CHECK(interpolate_pose(t, 19 * 0.1)->isApprox(t[2].pose));
  REQUIRE(interpolate_pose(t, 1.0 - 0.5 * kStampTolerance));
  CHECK(interpolate_pose(t, 1.0 - 0.5 * kStampTolerance)->isApprox(t[0].pose));
  CHECK_FALSE(interpolate_pose(t, 1.9 + 2.0 * kStampTolerance));
  CHECK_FALSE(interpolate_pose(t, 1.0 - 2.0 * kStampTolerance));
}
