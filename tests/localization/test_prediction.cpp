// Predictions from outside the localizer (a stack's filter, odometry): localize() with a
// prediction and its covariance, the Mahalanobis gate that sends a large correction to a
// search for confirmation, the prediction as the alignment's prior, and the interpolation
// an odometry file is read with.
#include "../support/test_support.hpp"
#include "localizer_settings.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/simulator.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Geometry>

#include <cmath>
#include <string>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

const fs::path kSample = fs::path(NDTCU_SOURCE_DIR) / "data" / "sample";

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
  Localizer localizer(s);
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
    CAPTURE(to_string(r.status), r.stage, r.mahalanobis2, r.decided_by);
    CHECK(r.status == FrameStatus::Tracked);
    CHECK(r.valid);
    CHECK(std::string(r.decided_by) == "passed");
    CHECK(r.prediction.isApprox(off));
    CHECK(r.prediction_covariance.isApprox(isotropic(1.0, 0.1)));
    CHECK(r.mahalanobis2 == Approx(0.36).margin(0.05));
    CHECK((r.pose.topRightCorner<3, 1>() - d.truth[3].pose.translation()).norm() < 0.04);
  }
  {  // A covariance of 2 cm: the 0.6 m correction is 30 sigma; a search must confirm it.
    Localizer localizer = tracking(d, test::cpu_localizer_settings());
    const LocalizationResult r = localizer.localize(scan, time, off, isotropic(0.02, 0.01));
    CAPTURE(to_string(r.status), r.stage, r.mahalanobis2, r.decided_by, r.attempts);
    CHECK(r.status == FrameStatus::Recovered);
    CHECK(r.valid);
    CHECK(r.attempts > 1);
    CHECK(std::string(r.stage) != "prediction");
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
    CHECK(std::string(r.decided_by) == "mahalanobis gate");
    // The gate off: the same frame is tracked.
    s.gate_chi2 = 0.0;
    Localizer ungated = tracking(d, s);
    CHECK(ungated.localize(scan, time, off, isotropic(0.02, 0.01)).status == FrameStatus::Tracked);
  }
  {  // The motion model's own covariance grows with the time since the last good pose.
    LocalizerSettings s = test::cpu_localizer_settings();
    Localizer localizer = tracking(d, s);
    const LocalizationResult r = localizer.localize(scan, time);
    const double dt = d.scans[3].time - d.scans[2].time;
    CHECK(r.prediction_covariance(0, 0) == Approx(std::pow(s.motion_translation_sigma * dt, 2)));
    CHECK(r.prediction_covariance(5, 5) == Approx(std::pow(s.motion_rotation_sigma * dt, 2)));
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
  CHECK_THROWS_WITH(Localizer(bad), Catch::Matchers::Contains("align.prior"));
  bad = test::cpu_localizer_settings();
  bad.gate_chi2 = -1.0;
  CHECK_THROWS_WITH(Localizer(bad), Catch::Matchers::Contains("gate_chi2"));
}

// A tunnel: along its axis the scan holds nothing, so with the prediction as a prior the
// alignment stays at the prediction there (and the frame is still found degenerate), while
// across it the scan corrects the prediction.
TEST_CASE("the prediction as a prior holds the alignment along a tunnel's axis", "[unit][sim]") {
  sim::PlaceSettings ps;
  ps.place = sim::Place::Corridor;
  ps.length = 200.0;
  const sim::World world(sim::generate_place(ps));
  sim::MapSettings ms;
  ms.voxel = 0.2;
  ms.threads = 2;
  const PointCloud map = sim::sample_map(world, ms);
  sim::LidarModel lidar = sim::lidar_preset("hdl32");
  lidar.columns = 360;
  const std::vector<sim::TrajectorySample> drive = sim::place_drive(ps, 3, 10.0);
  const Eigen::Isometry3d from_scene = sim::world_from_scene(world.scene());
  const Eigen::Vector3d axis = sim::place_axis(world.scene());
  const Eigen::Isometry3d truth = from_scene * drive[2].scene_from_sensor;
  const PointCloud scan = sim::cast_scan(world, lidar, drive[2].scene_from_sensor, 7, 2, 2).cloud;
  // The prediction: 0.5 m along the axis and 0.2 m across it.
  const Eigen::Vector3d across = axis.cross(Eigen::Vector3d::UnitZ()).normalized();
  Eigen::Matrix4d predicted = truth.matrix();
  predicted.topRightCorner<3, 1>() += 0.5 * axis + 0.2 * across;
  for (bool prior : {false, true}) {
    LocalizerSettings s = test::cpu_localizer_settings();
    s.prediction_prior = prior;
    Localizer localizer(s);
    localizer.set_map(map);
    localizer.set_initial_pose(truth.matrix());
    const LocalizationResult r = localizer.localize(scan, drive[2].time, predicted, isotropic(0.05, 0.01));
    const Eigen::Vector3d err = r.alignment.transform.topRightCorner<3, 1>() - truth.translation();
    CAPTURE(prior, to_string(r.status), err.dot(axis), err.dot(across), r.decided_by);
    CHECK(std::abs(err.dot(across)) < 0.1);  // the scan holds it either way
    if (prior) {
      CHECK(err.dot(axis) == Approx(0.5).margin(0.05));  // the prior holds it
      CHECK(r.alignment.localizability.weakest_ratio > 0.0);
    }
    // Either way the frame is not a valid pose: the probe finds the axis unpinned.
    CHECK_FALSE(r.valid);
    CHECK(r.status == FrameStatus::Degenerate);
  }
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
}
