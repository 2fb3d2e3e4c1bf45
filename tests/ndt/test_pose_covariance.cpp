// Pose covariance (Autoware's Laplace, MULTI_NDT and MULTI_NDT_SCORE): each mode against
// its formula recomputed here from align() and evaluate() calls, the offsets' rotation by
// the result's heading, no estimate for None, the localizer's covariance, and bad input.
#include "../support/test_support.hpp"
#include "synthetic.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/fields.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/pose_covariance.hpp>

#include <Eigen/Geometry>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace ndtcu;

namespace {

using Matrix6d = Eigen::Matrix<double, 6, 6>;
constexpr double kPi = 3.14159265358979323846;

Pose6 make_pose(double x, double y, double z, double r, double p, double w) {
  Pose6 v;
  v << x, y, z, r, p, w;
  return v;
}

// An alignment with the pose covariance its aligner's settings ask for, as the callers of
// Aligner::align_from_pose attach it.
AlignResult aligned_with_covariance(Aligner& aligner, PointCloudView source, const Pose6& guess) {
  AlignResult r = aligner.align_from_pose(source, guess);
  attach_pose_covariance(aligner, source, r);
  return r;
}

AlignSettings settings_with(PoseCovariance mode) {
  AlignSettings s = autoware_preset();
  s.pose_covariance = mode;
  return s;
}

// How the aligners of these tests run: the CPU backend with 2 threads.
const ExecutionOptions kCpu = test::on_cpu(2);

// The yard of synthetic.hpp as the map, and a second sampling of it moved by `truth` as the
// scan (about 12 points per 2 m voxel face: every direction constrained).
struct Case {
  PointCloud target = test::synthetic_scene(41, 40000);
  Pose6 truth;
  PointCloud source;
  Pose6 guess;
  explicit Case(const Pose6& t = make_pose(0.3, -0.2, 0.02, 0.01, -0.01, 0.05))
      : truth(t), source(test::moved_by_inverse(test::synthetic_scene(42, 12000), t)) {
    guess = truth;
    guess(0) -= 0.15;
    guess(1) += 0.1;
  }
};

// The case aligned from its guess on `aligner` (its map set here), with the covariance of
// the aligner's settings attached: required converged, of that mode and valid.
AlignResult aligned_case(Aligner& aligner, const Case& c) {
  aligner.set_target(c.target);
  AlignResult r = aligned_with_covariance(aligner, c.source, c.guess);
  REQUIRE(r.converged);
  REQUIRE(r.covariance_mode == aligner.settings().pose_covariance);
  REQUIRE(r.covariance_valid);
  return r;
}

// Largest entry of |a - b| relative to the largest entry of |b|.
double relative_gap(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) {
  return (a - b).cwiseAbs().maxCoeff() / b.cwiseAbs().maxCoeff();
}

// The start poses of Autoware's offset model, recomputed here: the offsets turned by the
// first two columns of the pose's rotation (its x and y axes) restricted to the map's x-y.
std::vector<Pose6> expected_starts(const Pose6& pose) {
  const Eigen::Matrix3d r = (Eigen::AngleAxisd(pose(3), Eigen::Vector3d::UnitX()) *
                             Eigen::AngleAxisd(pose(4), Eigen::Vector3d::UnitY()) *
                             Eigen::AngleAxisd(pose(5), Eigen::Vector3d::UnitZ()))
                                .toRotationMatrix();
  const double ox[6] = {0.0, 0.0, 0.5, -0.5, 1.0, -1.0};
  const double oy[6] = {0.5, -0.5, 0.0, 0.0, 0.0, 0.0};
  std::vector<Pose6> out;
  for (int k = 0; k < 6; ++k) {
    Pose6 p = pose;
    p(0) += r(0, 0) * ox[k] + r(0, 1) * oy[k];
    p(1) += r(1, 0) * ox[k] + r(1, 1) * oy[k];
    out.push_back(p);
  }
  return out;
}

}  // namespace

TEST_CASE("Pose covariance names parse and print; a bad one is a clear error", "[unit][pose_covariance]") {
  for (PoseCovariance m : {PoseCovariance::None, PoseCovariance::Laplace, PoseCovariance::MultiNdt,
                           PoseCovariance::MultiNdtScore, PoseCovariance::Sandwich, PoseCovariance::Calibrated}) {
    CHECK(pose_covariance_from_string(to_string(m)) == m);
  }
  CHECK(std::string(to_string(PoseCovariance::Calibrated)) == "calibrated");
  CHECK(std::string(to_string(PoseCovariance::MultiNdtScore)) == "multi-ndt-score");
  try {
    (void)pose_covariance_from_string("multi_ndt");
    FAIL("no error for 'multi_ndt'");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("pose covariance 'multi_ndt'") != std::string::npos);
    CHECK(what.find("none, laplace, multi-ndt, multi-ndt-score, sandwich, calibrated") != std::string::npos);
  }
  AlignSettings s;
  CHECK(s.pose_covariance == PoseCovariance::None);
  s.pose_covariance = static_cast<PoseCovariance>(7);
  CHECK_THROWS_WITH(validate(s), Catch::Contains("pose_covariance"));
  CHECK_THROWS_AS(Aligner(s), Error);
}

TEST_CASE("None leaves the covariance zero", "[unit][pose_covariance]") {
  const Case c;
  Aligner aligner(settings_with(PoseCovariance::None), kCpu);
  aligner.set_target(c.target);
  const AlignResult r = aligned_with_covariance(aligner, c.source, c.guess);
  REQUIRE(r.converged);
  CHECK(r.covariance_mode == PoseCovariance::None);
  CHECK_FALSE(r.covariance_valid);
  CHECK(r.covariance.isZero(0.0));
  CHECK(r.covariance_xy.isZero(0.0));
  CHECK(r.timings.covariance_ms == 0.0);
  const PoseCovarianceResult e = estimate_pose_covariance(aligner, c.source, r, PoseCovariance::None);
  CHECK_FALSE(e.valid);
  CHECK(e.covariance.isZero(0.0));
  CHECK(e.alignments + e.evaluations == 0);
}

TEST_CASE("Laplace: (-H)^-1 of the returned Hessian, and Autoware's -(H_xy)^-1", "[unit][pose_covariance]") {
  const Case c;
  Aligner aligner(settings_with(PoseCovariance::Laplace), kCpu);
  aligner.set_target(c.target);
  const AlignResult r = aligned_with_covariance(aligner, c.source, c.guess);
  REQUIRE(r.converged);
  REQUIRE(r.covariance_mode == PoseCovariance::Laplace);
  REQUIRE(r.covariance_valid);
  const Matrix6d expected = (-r.hessian).inverse();  // LU here, Cholesky in the library
  INFO("covariance\n" << r.covariance << "\nexpected\n" << expected);
  // Tolerance: two factorizations of a 6x6 matrix whose condition number is below 1e6 here
  // agree to far better than 1e-9 relative.
  CHECK(relative_gap(r.covariance, expected) < 1e-9);
  CHECK(r.covariance == r.covariance.transpose());
  const Eigen::Matrix2d hxy = r.hessian.topLeftCorner<2, 2>();
  CHECK(relative_gap(r.covariance_xy, -hxy.inverse()) < 1e-12);
  // -(H_xy)^-1 holds the other four entries fixed, so it is no larger than the x-y block of
  // (-H)^-1 (their difference is positive semi-definite), and strictly smaller here, where
  // x-y correlates with the angles.
  const Eigen::Matrix2d marginal = r.covariance.topLeftCorner<2, 2>();
  const Eigen::SelfAdjointEigenSolver<Eigen::Matrix2d> gap(marginal - r.covariance_xy);
  CHECK(gap.eigenvalues().minCoeff() > -1e-12 * marginal.norm());
  CHECK(gap.eigenvalues().maxCoeff() > 0.0);
  CHECK(r.timings.covariance_ms > 0.0);

  // Where -H is not positive definite there is no Laplace covariance.
  AlignResult saddle = r;
  saddle.hessian(0, 0) = -saddle.hessian(0, 0);
  const PoseCovarianceResult e = estimate_pose_covariance(aligner, c.source, saddle, PoseCovariance::Laplace);
  CHECK_FALSE(e.valid);
  CHECK(e.covariance.isZero(0.0));
  CHECK(e.covariance_xy.isZero(0.0));
}

// The sandwich's two halves recomputed from evaluate() alone: A from the Hessian evaluate()
// returns, B from each point's gradient by central differences of its own score (a cloud of
// that one point evaluated at the pose moved by +-h along each entry).
TEST_CASE("Sandwich: A^-1 B A^-1 from the points' Hessian and the scatter of their gradients",
          "[unit][pose_covariance]") {
  const Case c;
  Aligner aligner(settings_with(PoseCovariance::Sandwich), kCpu);
  const AlignResult r = aligned_case(aligner, c);
  Matrix6d hessian, scatter;
  REQUIRE(aligner.score_scatter(c.source, r.transform, hessian, scatter));
  // The points' Hessian is evaluate()'s, summed in another order (point by point here, in
  // chunks of 256 there): equal to rounding.
  CHECK(relative_gap(hessian, aligner.evaluate(c.source, r.transform).hessian) < 1e-10);
  const Matrix6d a_inverse = (-hessian).inverse();
  CHECK(relative_gap(r.covariance, a_inverse * scatter * a_inverse) < 1e-8);
  CHECK(r.covariance_xy == r.covariance.topLeftCorner<2, 2>());

  // B by finite differences, over every 600th point (20 of them).
  PointCloud few;
  for (std::size_t i = 0; i < c.source.size(); i += 600) few.points.push_back(c.source.points[i]);
  Matrix6d expected = Matrix6d::Zero();
  const double h = 1e-3;
  for (const Eigen::Vector3f& p : few.points) {
    PointCloud one;
    one.points.push_back(p);
    Eigen::Matrix<double, 6, 1> g;
    for (int j = 0; j < 6; ++j) {
      Pose6 plus = r.pose, minus = r.pose;
      plus(j) += h;
      minus(j) -= h;
      g(j) = (aligner.evaluate(one, pose_to_matrix(plus)).score - aligner.evaluate(one, pose_to_matrix(minus)).score) /
             (2.0 * h);
    }
    expected += g * g.transpose();
  }
  Matrix6d few_hessian, few_scatter;
  REQUIRE(aligner.score_scatter(few, r.transform, few_hessian, few_scatter));
  INFO("scatter\n" << few_scatter << "\nby differences\n" << expected);
  // Tolerance: central differences at h = 1e-3 (truncation about h^2) of a point
  // transformed in float (PCL's transform: about 1e-6 m at 10 m, against steps of 1e-2 m).
  CHECK(relative_gap(few_scatter, expected) < 2e-3);
  CHECK(few_scatter.trace() > 0.0);

  // A prior enters both halves as its information.
  PosePrior prior;
  prior.pose = r.pose;
  prior.information = Matrix6d::Identity() * 50.0;
  aligner.set_prior(prior);
  const PoseCovarianceResult with_prior = estimate_pose_covariance(aligner, c.source, r, PoseCovariance::Sandwich);
  REQUIRE(with_prior.valid);
  const Matrix6d ap = (-hessian + prior.information).inverse();
  CHECK(relative_gap(with_prior.covariance, ap * (scatter + prior.information) * ap) < 1e-8);
  aligner.set_prior(PosePrior{});

  // Where the points' -A is not positive definite (a scan that meets no voxel) there is none.
  PointCloud far;
  far.points.push_back(Eigen::Vector3f(1e4f, 1e4f, 1e4f));
  AlignResult nowhere = r;
  const PoseCovarianceResult none = estimate_pose_covariance(aligner, far, nowhere, PoseCovariance::Sandwich);
  CHECK_FALSE(none.valid);
  CHECK(none.covariance.isZero(0.0));
}

TEST_CASE("MULTI_NDT: six aligns from the turned offsets, Autoware's weighting of seven poses",
          "[unit][pose_covariance]") {
  const Case c;
  Aligner plain(settings_with(PoseCovariance::None), kCpu);
  plain.set_target(c.target);
  Aligner multi(settings_with(PoseCovariance::MultiNdt), kCpu);
  multi.set_target(c.target);

  const AlignResult r = aligned_with_covariance(multi, c.source, c.guess);
  const AlignResult r0 = plain.align_from_pose(c.source, c.guess);
  REQUIRE(r0.converged);
  CHECK(r.pose == r0.pose);  // the estimate does not touch the alignment
  REQUIRE(r.covariance_mode == PoseCovariance::MultiNdt);
  REQUIRE(r.covariance_valid);

  const PoseCovarianceResult e = estimate_pose_covariance(plain, c.source, r0, PoseCovariance::MultiNdt);
  CHECK(e.alignments == 6);
  CHECK(e.covariance == r.covariance);
  CHECK(e.covariance_xy == r.covariance_xy);
  REQUIRE(e.start_poses.size() == 6);
  REQUIRE(e.end_poses.size() == 6);
  const auto starts = expected_starts(r0.pose);
  std::vector<Eigen::Vector2d> xy{r0.pose.head<2>()};
  for (std::size_t k = 0; k < 6; ++k) {
    CHECK((e.start_poses[k] - starts[k]).cwiseAbs().maxCoeff() < 1e-12);
    // align_batch promises align()'s bits for every hypothesis.
    const AlignResult one = plain.align_from_pose(c.source, e.start_poses[k]);
    CHECK(one.pose == e.end_poses[k]);
    xy.push_back(one.pose.head<2>());
  }
  // Autoware: weights 1/n over the result and the six ends, then times (n - 1)/n.
  const double n = 7.0;
  Eigen::Vector2d mean = Eigen::Vector2d::Zero();
  for (const auto& p : xy) mean += p / n;
  Eigen::Matrix2d cov = Eigen::Matrix2d::Zero();
  for (const auto& p : xy) cov += (p - mean) * (p - mean).transpose() / n;
  cov *= (n - 1.0) / n;
  INFO("covariance_xy\n" << r.covariance_xy << "\nexpected\n" << cov);
  // Tolerance: the library sums differences from the result (map coordinates never
  // squared), this sums absolute positions; both round at about 1e-16 of |x| ~ 0.3 m,
  // against covariance entries of 1e-6 m^2 and more.
  CHECK(relative_gap(r.covariance_xy, cov) < 1e-8);
  CHECK((e.mean_xy - mean).norm() < 1e-12);
  CHECK(r.covariance.topLeftCorner<2, 2>() == r.covariance_xy);
  for (double w : e.weights) CHECK(w == 1.0 / n);
  // The ends lie near the result: the six alignments found the same optimum again, so the
  // spread is small (sub-centimetre), yet not zero.
  CHECK(std::sqrt(cov.trace()) < 0.01);
  CHECK(cov.trace() > 0.0);
}

TEST_CASE("MULTI_NDT after align_batch: every hypothesis gets a covariance, none recursively",
          "[unit][pose_covariance]") {
  const Case c;
  Aligner multi(settings_with(PoseCovariance::MultiNdt), kCpu);
  multi.set_target(c.target);
  Pose6 other = c.guess;
  other(0) += 0.1;
  std::vector<AlignResult> batch = multi.align_batch(c.source, std::vector<Pose6>{c.guess, other});
  attach_pose_covariance(multi, c.source, batch);
  REQUIRE(batch.size() == 2);
  for (const AlignResult& r : batch) {
    CHECK(r.covariance_mode == PoseCovariance::MultiNdt);
    CHECK(r.covariance_valid);
    CHECK(r.timings.covariance_ms > 0.0);
  }
  CHECK(batch[0].covariance == aligned_with_covariance(multi, c.source, c.guess).covariance);
}

TEST_CASE("MULTI_NDT_SCORE: softmax of the NVTLs at the offsets (temperature 0.05)", "[unit][pose_covariance]") {
  const Case c;
  Aligner plain(settings_with(PoseCovariance::None), kCpu);
  plain.set_target(c.target);
  Aligner scored(settings_with(PoseCovariance::MultiNdtScore), kCpu);
  scored.set_target(c.target);
  const AlignResult r = aligned_with_covariance(scored, c.source, c.guess);
  const AlignResult r0 = plain.align_from_pose(c.source, c.guess);
  REQUIRE(r0.converged);
  REQUIRE(r.covariance_mode == PoseCovariance::MultiNdtScore);
  REQUIRE(r.covariance_valid);

  const PoseCovarianceResult e = estimate_pose_covariance(plain, c.source, r0, PoseCovariance::MultiNdtScore);
  CHECK(e.alignments == 0);
  CHECK(e.evaluations == 6);
  CHECK(e.covariance == r.covariance);
  REQUIRE(e.scores.size() == 7);
  REQUIRE(e.weights.size() == 7);
  std::vector<double> nvtl{r0.nvtl};
  std::vector<Eigen::Vector2d> xy{r0.pose.head<2>()};
  const auto starts = expected_starts(r0.pose);
  for (std::size_t k = 0; k < 6; ++k) {
    CHECK((e.start_poses[k] - starts[k]).cwiseAbs().maxCoeff() < 1e-12);
    CHECK(e.end_poses[k] == e.start_poses[k]);  // scored where they start, not aligned
    nvtl.push_back(plain.evaluate(c.source, pose_to_matrix(e.start_poses[k])).nvtl);
    xy.push_back(e.start_poses[k].head<2>());
  }
  double top = nvtl[0], sum = 0.0;
  for (double s : nvtl) top = std::max(top, s);
  std::vector<double> w;
  for (double s : nvtl) w.push_back(std::exp((s - top) / 0.05));
  for (double x : w) sum += x;
  double weight_sum = 0.0;
  for (std::size_t i = 0; i < 7; ++i) {
    CHECK(e.scores[i] == nvtl[i]);
    CHECK(std::fabs(e.weights[i] - w[i] / sum) < 1e-15);
    weight_sum += e.weights[i];
  }
  CHECK(std::fabs(weight_sum - 1.0) < 1e-12);
  // The result scores best (the offsets lie 0.5-1 m off the optimum), so it carries most weight.
  CHECK(e.weights[0] == *std::max_element(e.weights.begin(), e.weights.end()));
  Eigen::Vector2d mean = Eigen::Vector2d::Zero();
  for (std::size_t i = 0; i < 7; ++i) mean += e.weights[i] * xy[i];
  Eigen::Matrix2d cov = Eigen::Matrix2d::Zero();
  for (std::size_t i = 0; i < 7; ++i) cov += e.weights[i] * (xy[i] - mean) * (xy[i] - mean).transpose();
  INFO("covariance_xy\n" << r.covariance_xy << "\nexpected\n" << cov);
  CHECK(relative_gap(r.covariance_xy, cov) < 1e-9);  // differences from the result against absolute positions
  // Only x and y are estimated.
  CHECK(r.covariance.bottomRows<4>().isZero(0.0));
  CHECK(r.covariance.rightCols<4>().isZero(0.0));
}

TEST_CASE("The offsets are turned by the result's heading", "[unit][pose_covariance]") {
  const std::vector<double> ox = {0.0, 0.0, 0.5, -0.5, 1.0, -1.0}, oy = {0.5, -0.5, 0.0, 0.0, 0.0, 0.0};
  const Pose6 north = make_pose(10.0, 20.0, 1.0, 0.0, 0.0, kPi / 2);
  const auto turned = covariance_offset_poses(north, ox, oy);
  REQUIRE(turned.size() == 6);
  for (std::size_t k = 0; k < 6; ++k) {
    // Heading +90 deg: the vehicle's x is the map's y, its y the map's -x.
    CHECK(std::fabs(turned[k](0) - (10.0 - oy[k])) < 1e-12);
    CHECK(std::fabs(turned[k](1) - (20.0 + ox[k])) < 1e-12);
    CHECK(turned[k].tail<4>() == north.tail<4>());
  }
  const auto straight = covariance_offset_poses(make_pose(10.0, 20.0, 1.0, 0.0, 0.0, 0.0), ox, oy);
  for (std::size_t k = 0; k < 6; ++k) {
    CHECK(straight[k](0) == 10.0 + ox[k]);
    CHECK(straight[k](1) == 20.0 + oy[k]);
  }

  // End to end: a scan aligned at a heading of 90 deg gets its starts along the other axes.
  const Case c(make_pose(0.2, 0.1, 0.0, 0.0, 0.0, kPi / 2));
  Aligner aligner(settings_with(PoseCovariance::None), kCpu);
  aligner.set_target(c.target);
  const AlignResult r = aligner.align_from_pose(c.source, c.guess);
  REQUIRE(r.converged);
  REQUIRE(std::fabs(r.pose(5) - kPi / 2) < 0.01);
  const PoseCovarianceResult e = estimate_pose_covariance(aligner, c.source, r, PoseCovariance::MultiNdtScore);
  for (std::size_t k = 0; k < 6; ++k) {
    const Eigen::Vector2d d = e.start_poses[k].head<2>() - r.pose.head<2>();
    // Tolerance: the result's heading is 90 deg within 0.01 rad, which moves a 1 m offset by
    // at most 1 cm.
    CHECK((d - Eigen::Vector2d(-oy[k], ox[k])).norm() < 0.01);
  }

  CHECK_THROWS_WITH(covariance_offset_poses(north, {0.0, 1.0}, {0.0}),
                    Catch::Contains("offset_x has 2 entries but offset_y 1"));
  PoseCovarianceOptions cold;
  cold.temperature = 0.0;
  CHECK_THROWS_WITH(estimate_pose_covariance(aligner, c.source, r, PoseCovariance::MultiNdtScore, cold),
                    Catch::Contains("temperature must be > 0"));
  CHECK_THROWS_WITH(softmax_weights({1.0, std::nan("")}, 0.05), Catch::Contains("score 1 is not finite"));
}

TEST_CASE("Autoware's diagonal floor acts in the vehicle frame", "[unit][pose_covariance]") {
  // A covariance long along the map's x, for a vehicle heading along the map's y: in the
  // vehicle frame the long axis is its y, and only its x variance is raised.
  Eigen::Matrix2d c;
  c << 0.09, 0.0, 0.0, 0.0001;
  const Eigen::Matrix2d f = floor_xy_covariance(c, make_pose(0, 0, 0, 0, 0, kPi / 2), 0.0225, 0.0225);
  CHECK(std::fabs(f(0, 0) - 0.09) < 1e-15);
  CHECK(std::fabs(f(1, 1) - 0.0225) < 1e-15);
  CHECK(std::fabs(f(0, 1)) < 1e-15);
}

TEST_CASE("The localizer's covariance follows pose_covariance (Laplace by default)", "[unit][pose_covariance]") {
  const Case c;
  LocalizerSettings ls;
  ExecutionOptions execution;
  CHECK(ls.align.pose_covariance == PoseCovariance::Laplace);
  execution.backend = Backend::Cpu;
  execution.threads = 2;
  ls.voxel_leaf = 0.0;
  ls.nvtl_threshold = 0.1;  // the yard's sparse sampling scores below Autoware's 2.3
  // No refinement: the evidence below is the alignment's alone (a refined frame adds the gap
  // between the two resolutions, its disagreement term).
  ls.refine_ratio = 0.0;
  for (PoseCovariance mode :
       {PoseCovariance::Laplace, PoseCovariance::MultiNdtScore, PoseCovariance::None, PoseCovariance::Calibrated}) {
    ls.align.pose_covariance = mode;
    Localizer localizer(ls, execution);
    CHECK(localizer.aligner().settings().pose_covariance == mode);  // the aligner itself estimates none
    localizer.set_map(c.target);
    localizer.set_initial_pose(pose_to_matrix(c.guess));
    const LocalizationResult out = localizer.localize_preprocessed(c.source, 0.0);
    INFO(to_string(mode) << ": NVTL " << out.alignment.nvtl);
    REQUIRE(out.valid);
    // Calibrated: the frame attaches Laplace and calibrates that, once.
    const PoseCovariance attached = mode == PoseCovariance::Calibrated ? PoseCovariance::Laplace : mode;
    CHECK(out.alignment.covariance_mode == attached);
    // The frame's covariance is the alignment's estimate (kept unchanged there) calibrated
    // with the localizer's constants.
    CovarianceEvidence e;
    e.laplace = out.alignment.covariance;
    e.laplace_valid = out.alignment.covariance_valid;
    e.resolution = ls.align.resolution;
    e.outlier_ratio = ls.align.outlier_ratio;
    e.matched_points = out.alignment.matched_points;
    e.nvtl = out.alignment.nvtl;
    e.localizability = out.alignment.localizability;  // its weakest direction: the localizability term
    const CalibratedCovariance expected = calibrated_pose_covariance(e);
    if (attached == PoseCovariance::Laplace) {
      CHECK(relative_gap(out.alignment.covariance, (-out.alignment.hessian).inverse()) < 1e-9);
      CHECK(relative_gap(out.covariance, expected.covariance) < 1e-12);
      CHECK(out.covariance_term != CovarianceTerm::None);
    } else if (mode == PoseCovariance::None) {
      CHECK(out.covariance.isZero(0.0));
      CHECK(out.covariance_term == CovarianceTerm::None);
    } else {
      CHECK(out.alignment.covariance_xy(0, 0) > 0.0);
      CHECK(relative_gap(out.covariance, expected.covariance) < 1e-12);
    }
  }
}

TEST_CASE("Calibrated on an Aligner: Laplace with the terms of calibrated_pose_covariance for that alignment",
          "[unit][pose_covariance]") {
  const Case c;
  Aligner aligner(settings_with(PoseCovariance::Calibrated), kCpu);
  const AlignResult r = aligned_case(aligner, c);
  const PoseCovarianceResult laplace = estimate_pose_covariance(aligner, c.source, r, PoseCovariance::Laplace);
  REQUIRE(laplace.valid);
  // The evidence recomputed here: the alignment's fit, and the scan's spread about the
  // sensor (2/3 of the mean squared range).
  CovarianceEvidence e;
  e.laplace = laplace.covariance;
  e.laplace_valid = true;
  e.resolution = aligner.settings().resolution;
  e.outlier_ratio = aligner.settings().outlier_ratio;
  e.matched_points = r.matched_points;
  e.nvtl = r.nvtl;
  double r2 = 0.0;
  for (const Eigen::Vector3f& p : c.source.points) r2 += p.cast<double>().squaredNorm();
  e.rotation_arm2 = 2.0 / 3.0 * r2 / static_cast<double>(c.source.size());
  e.localizability = r.localizability;
  REQUIRE(r.localizability.valid);
  const CalibratedCovariance expected = calibrated_pose_covariance(e);
  CHECK(relative_gap(r.covariance, expected.covariance) < 1e-12);
  CHECK(relative_gap(r.covariance_xy, expected.covariance.topLeftCorner<2, 2>()) < 1e-12);
  // Wider than Laplace in every direction (the terms are positive semi-definite, the
  // residual one a positive multiple of Laplace itself).
  const Eigen::SelfAdjointEigenSolver<Matrix6d> wider(r.covariance - laplace.covariance);
  CHECK(wider.eigenvalues().minCoeff() > -1e-15);
  CHECK(r.covariance.trace() > 1.5 * laplace.covariance.trace());
  // The estimate names its dominant term, the one expected names.
  const PoseCovarianceResult full = estimate_pose_covariance(aligner, c.source, r, PoseCovariance::Calibrated);
  CHECK(full.dominant == expected.dominant);
  CHECK(full.dominant != CovarianceTerm::None);
  CHECK(estimate_pose_covariance(aligner, c.source, r, PoseCovariance::Laplace).dominant == CovarianceTerm::None);
  // With every term's constant at zero, Laplace itself.
  PoseCovarianceOptions bare;
  bare.calibrated.sparsity_rotation = 0.0;
  bare.calibrated.residual_scale = 0.0;
  bare.calibrated.weak_direction_sigma = 0.0;
  const PoseCovarianceResult plain = estimate_pose_covariance(aligner, c.source, r, PoseCovariance::Calibrated, bare);
  CHECK(relative_gap(plain.covariance, laplace.covariance) < 1e-15);
  CHECK(plain.dominant == CovarianceTerm::Laplace);
  // A bad constant is an error naming it.
  PoseCovarianceOptions bad;
  bad.calibrated.residual_scale = -1.0;
  CHECK_THROWS_WITH(estimate_pose_covariance(aligner, c.source, r, PoseCovariance::Calibrated, bad),
                    Catch::Contains("residual_scale"));
  // No estimate where -H is not positive definite (here the Hessian turned about).
  AlignResult nowhere = r;
  nowhere.hessian = -nowhere.hessian;
  const PoseCovarianceResult none = estimate_pose_covariance(aligner, c.source, nowhere, PoseCovariance::Calibrated);
  CHECK_FALSE(none.valid);
  CHECK(none.covariance.isZero(0.0));
}

namespace {

// A Laplace covariance of sigmas 1 cm in position and 1 mrad in the angles, and the
// evidence of a scan of `matched` points at NVTL `nvtl` in 2 m voxels.
CovarianceEvidence evidence(std::size_t matched, double nvtl) {
  CovarianceEvidence e;
  e.laplace.diagonal() << 1e-4, 1e-4, 1e-4, 1e-6, 1e-6, 1e-6;
  e.laplace(0, 1) = e.laplace(1, 0) = 2e-5;
  e.laplace_valid = true;
  e.resolution = 2.0;
  e.outlier_ratio = 0.55;
  e.matched_points = matched;
  e.nvtl = nvtl;
  e.rotation_arm2 = 100.0;  // points about 12 m from the sensor
  return e;
}

}  // namespace

TEST_CASE("Calibrated covariance: each term by its formula, their sum, the dominant one", "[unit][pose_covariance]") {
  CalibratedCovarianceSettings s;
  s.sparsity_translation = 0.3;
  s.sparsity_rotation = 0.03;
  s.residual_scale = 2.0;
  s.hypothesis_temperature = 0.05;
  // NVTL -d1 exp(-d2 m2 / 2) of m2 = 3 (r = 2: d1 = -4.196518, d2 = 0.248479, DESIGN.md).
  const double d1 = -4.196518, d2 = 0.248479;
  const double nvtl = -d1 * std::exp(-d2 * 3.0 / 2.0);
  CovarianceEvidence e = evidence(400, nvtl);
  SECTION("sparsity: diag((a r)^2 / N, b^2 / N)") {
    const CalibratedCovariance c = calibrated_pose_covariance(e, s);
    REQUIRE(c.valid);
    Matrix6d expected = Matrix6d::Zero();
    expected.diagonal() << 0.36 / 400, 0.36 / 400, 0.36 / 400, 9e-4 / 400, 9e-4 / 400, 9e-4 / 400;
    CHECK((c.sparsity - expected).cwiseAbs().maxCoeff() < 1e-15);
    CHECK(c.laplace == e.laplace);
  }
  SECTION("residual: scale x m2 x Laplace, m2 from the NVTL") {
    const CalibratedCovariance c = calibrated_pose_covariance(e, s);
    CHECK(c.mean_squared_mahalanobis == Approx(3.0).epsilon(1e-5));  // d1, d2 quoted to 6-7 digits
    CHECK(relative_gap(c.residual, 2.0 * 3.0 * e.laplace) < 1e-5);
    // A fit at or above -d1 (every point at its voxel's mean) has no residual term.
    e.nvtl = 4.2;
    CHECK(calibrated_pose_covariance(e, s).residual.isZero(0.0));
  }
  SECTION("disagreement: g g' / 4 between resolutions, w (1 - w) h h' for the rival") {
    e.has_resolution_gap = true;
    e.resolution_gap = make_pose(0.04, -0.02, 0.0, 0.0, 0.0, 0.002);
    e.has_rival = true;
    e.rival_gap = make_pose(3.0, 1.0, 0.0, 0.0, 0.0, 0.1);
    e.rival_nvtl_drop = 0.4;
    const double w = 1.0 / (1.0 + std::exp(0.4 / 0.05));
    const Matrix6d expected = 0.25 * e.resolution_gap * e.resolution_gap.transpose() +
                              w * (1.0 - w) * e.rival_gap * e.rival_gap.transpose();
    const CalibratedCovariance c = calibrated_pose_covariance(e, s);
    CHECK(relative_gap(c.disagreement, expected) < 1e-12);
    // The rival left out at temperature 0.
    s.hypothesis_temperature = 0.0;
    const CalibratedCovariance without = calibrated_pose_covariance(e, s);
    CHECK(relative_gap(without.disagreement, 0.25 * e.resolution_gap * e.resolution_gap.transpose()) < 1e-12);
  }
  SECTION("disagreement: the weighted spread of the pose, the rival and the alternatives") {
    // A rival alone and the same pose as an alternative alone give the same term.
    CovarianceEvidence rival = e;
    rival.has_rival = true;
    rival.rival_gap = make_pose(0.2, -0.1, 0.0, 0.0, 0.0, 0.05);
    rival.rival_nvtl_drop = 0.03;
    CovarianceEvidence alternative = e;
    alternative.alternatives.emplace_back(rival.rival_gap, rival.rival_nvtl_drop);
    const double w = 1.0 / (1.0 + std::exp(0.03 / 0.05));
    const Matrix6d pair = w * (1.0 - w) * rival.rival_gap * rival.rival_gap.transpose();
    CHECK(relative_gap(calibrated_pose_covariance(rival, s).disagreement, pair) < 1e-12);
    CHECK(relative_gap(calibrated_pose_covariance(alternative, s).disagreement, pair) < 1e-12);
    // Three optima: the pose (weight 1), one as good (1) and one 0.1 below (e^-2): their
    // spread about their weighted mean. A drop below zero (an alternative scoring higher)
    // weighs as none; one not finite is left out.
    CovarianceEvidence three = e;
    const Pose6 a = make_pose(0.1, 0.0, 0.0, 0.0, 0.0, 0.0), b = make_pose(0.0, 0.3, 0.0, 0.0, 0.0, 0.02);
    three.alternatives = {{a, -0.01}, {b, 0.1}, {a, std::numeric_limits<double>::quiet_NaN()}};
    const double wa = 1.0, wb = std::exp(-0.1 / 0.05), total = 1.0 + wa + wb;
    const Pose6 mean = (wa * a + wb * b) / total;
    const Matrix6d expected = (mean * mean.transpose() + wa * (a - mean) * (a - mean).transpose() +
                               wb * (b - mean) * (b - mean).transpose()) /
                              total;
    const CalibratedCovariance c = calibrated_pose_covariance(three, s);
    CHECK(relative_gap(c.disagreement, expected) < 1e-12);
    CHECK(c.covariance.isApprox(c.laplace + c.sparsity + c.residual + c.disagreement + c.localizability + c.deskew));
    s.hypothesis_temperature = 0.0;
    CHECK(calibrated_pose_covariance(three, s).disagreement.isZero(0.0));
  }
  SECTION("residual: a refined pose takes the refined scale") {
    s.refined_residual_scale = 0.5;
    e.refined = true;
    CHECK(relative_gap(calibrated_pose_covariance(e, s).residual, 0.5 * 3.0 * e.laplace) < 1e-5);
    e.refined = false;
    CHECK(relative_gap(calibrated_pose_covariance(e, s).residual, 2.0 * 3.0 * e.laplace) < 1e-5);
  }
  SECTION("localizability: c^2 (1 / rho - 1 / rho_c) v v' along each direction below the cut") {
    s.weak_direction_sigma = 0.01;
    s.weak_direction_ratio = 0.5;
    e.localizability.valid = true;
    // Ratios 0.04, 0.2, 0.5 (at the cut: no term), 0.8, 0.9, 1 of the largest eigenvalue.
    e.localizability.eigenvalues << 0.4, 2.0, 5.0, 8.0, 9.0, 10.0;
    e.localizability.weakest_ratio = 0.04;
    e.localizability.directions.setZero();
    e.localizability.directions.col(0) = make_pose(0.9, 0.4, 0.0, 0.0, 0.0, 0.01);
    e.localizability.directions.col(1) = make_pose(-0.4, 0.9, 0.0, 0.0, 0.0, 0.02);
    for (int i = 2; i < 6; ++i) e.localizability.directions(i, i) = 1.0;
    const Pose6 v0 = e.localizability.directions.col(0), v1 = e.localizability.directions.col(1);
    const Matrix6d expected =
        1e-4 * ((1.0 / 0.04 - 2.0) * v0 * v0.transpose() + (1.0 / 0.2 - 2.0) * v1 * v1.transpose());
    const CalibratedCovariance c = calibrated_pose_covariance(e, s);
    CHECK(relative_gap(c.localizability, expected) < 1e-12);
    // Along v0's x-y direction (v1's is across it) a sigma of 1 cm x sqrt(25 - 2) = 4.8 cm of
    // point motion.
    const Eigen::Vector2d u = v0.head<2>().normalized();
    CHECK(std::sqrt(u.dot(c.localizability.topLeftCorner<2, 2>() * u)) ==
          Approx(0.01 * std::sqrt(23.0) * v0.head<2>().norm()));
    // A cut at 0.1 keeps only the weakest; at 0 none.
    s.weak_direction_ratio = 0.1;
    CHECK(relative_gap(calibrated_pose_covariance(e, s).localizability,
                       1e-4 * (1.0 / 0.04 - 10.0) * v0 * v0.transpose()) < 1e-12);
    s.weak_direction_ratio = 0.0;
    CHECK(calibrated_pose_covariance(e, s).localizability.isZero(0.0));
    s.weak_direction_ratio = 0.5;
    // A direction whose eigenvalue is not above zero (degenerate: the localizer's own remap)
    // is left out; the others still count.
    e.localizability.eigenvalues(0) = 0.0;
    CHECK(relative_gap(calibrated_pose_covariance(e, s).localizability,
                       1e-4 * (1.0 / 0.2 - 2.0) * v1 * v1.transpose()) < 1e-12);
    e.localizability.eigenvalues(0) = 0.4;
    // No analysis, or c = 0: no term.
    e.localizability.valid = false;
    CHECK(calibrated_pose_covariance(e, s).localizability.isZero(0.0));
    e.localizability.valid = true;
    s.weak_direction_sigma = 0.0;
    CHECK(calibrated_pose_covariance(e, s).localizability.isZero(0.0));
    // A weak enough direction dominates.
    s.weak_direction_sigma = 0.05;
    e.localizability.eigenvalues(0) = 0.1;
    CHECK(calibrated_pose_covariance(e, s).dominant == CovarianceTerm::Localizability);
  }
  SECTION("de-skew: the evidence's own term, times its scale; none without it") {
    CHECK(calibrated_pose_covariance(e, s).deskew.isZero(0.0));
    // A motion off by 1.5 m/s sideways over a 0.1 s sweep (points' RMS time 0.1 / sqrt(3) s):
    // 8.7 cm across, more than the residual term here.
    Matrix6d d = Matrix6d::Zero();
    d(1, 1) = 0.01 / 3.0 * 2.25;
    e.has_deskew = true;
    e.deskew = d;
    const CalibratedCovariance c = calibrated_pose_covariance(e, s);
    CHECK(relative_gap(c.deskew, d) < 1e-15);
    CHECK(std::sqrt(c.deskew(1, 1)) == Approx(1.5 * 0.1 / std::sqrt(3.0)).epsilon(1e-12));
    CHECK(c.dominant == CovarianceTerm::Deskew);
    s.deskew_scale = 2.0;
    CHECK(relative_gap(calibrated_pose_covariance(e, s).deskew, 2.0 * d) < 1e-15);
    s.deskew_scale = 0.0;
    CHECK(calibrated_pose_covariance(e, s).deskew.isZero(0.0));
    s.deskew_scale = -1.0;
    CHECK_THROWS_WITH(calibrated_pose_covariance(e, s), Catch::Matchers::Contains("deskew_scale"));
    s.deskew_scale = 1.0;
    e.has_deskew = false;
    CHECK(calibrated_pose_covariance(e, s).deskew.isZero(0.0));
  }
  SECTION("the sum, symmetric, never below the Laplace estimate") {
    e.has_resolution_gap = true;
    e.resolution_gap = make_pose(0.04, -0.02, 0.01, 0.001, 0.0, 0.002);
    e.localizability.valid = true;
    e.localizability.eigenvalues << 1.0, 6.0, 7.0, 8.0, 9.0, 10.0;
    e.localizability.weakest_ratio = 0.1;
    e.localizability.directions.col(0) = make_pose(0.0, 1.0, 0.0, 0.0, 0.0, 0.0);
    e.has_deskew = true;
    e.deskew.diagonal() << 1e-4, 4e-4, 1e-5, 1e-6, 1e-6, 4e-6;
    const CalibratedCovariance c = calibrated_pose_covariance(e, s);
    CHECK(!c.localizability.isZero(0.0));
    CHECK(!c.deskew.isZero(0.0));
    CHECK(relative_gap(c.covariance,
                       c.laplace + c.sparsity + c.residual + c.disagreement + c.localizability + c.deskew) < 1e-15);
    CHECK(c.covariance == c.covariance.transpose());
    const Eigen::SelfAdjointEigenSolver<Matrix6d> gap(c.covariance - c.laplace);
    CHECK(gap.eigenvalues().minCoeff() >= -1e-18);
  }
  SECTION("the dominant term: by trace with rotations weighed by the points' arm") {
    // Residual 6x Laplace: the largest here.
    CHECK(calibrated_pose_covariance(e, s).dominant == CovarianceTerm::Residual);
    // Few points: the floor (0.36 / 10 m^2 per axis).
    e.matched_points = 10;
    CHECK(calibrated_pose_covariance(e, s).dominant == CovarianceTerm::Sparsity);
    // A refinement 0.5 m away.
    e.matched_points = 400;
    e.has_resolution_gap = true;
    e.resolution_gap = make_pose(0.5, 0.5, 0.0, 0.0, 0.0, 0.0);
    CHECK(calibrated_pose_covariance(e, s).dominant == CovarianceTerm::Disagreement);
    // No other term: the Laplace estimate.
    CalibratedCovarianceSettings none;
    none.sparsity_translation = none.sparsity_rotation = none.residual_scale = 0.0;
    e.has_resolution_gap = false;
    const CalibratedCovariance raw = calibrated_pose_covariance(e, none);
    CHECK(raw.dominant == CovarianceTerm::Laplace);
    CHECK(raw.covariance == e.laplace);
  }
  SECTION("no Laplace estimate: nothing reported; bad constants refused") {
    e.laplace_valid = false;
    const CalibratedCovariance c = calibrated_pose_covariance(e, s);
    CHECK_FALSE(c.valid);
    CHECK(c.covariance.isZero(0.0));
    CHECK(c.dominant == CovarianceTerm::None);
    s.residual_scale = -1.0;
    CHECK_THROWS_WITH(calibrated_pose_covariance(e, s), Catch::Matchers::Contains("residual_scale"));
    s.residual_scale = std::nan("");
    CHECK_THROWS_AS(calibrated_pose_covariance(e, s), Error);
    s.residual_scale = 1.0;
    s.weak_direction_sigma = -0.01;
    CHECK_THROWS_WITH(calibrated_pose_covariance(e, s), Catch::Matchers::Contains("weak_direction_sigma"));
    s.weak_direction_sigma = 0.01;
    s.weak_direction_ratio = 1.5;
    CHECK_THROWS_WITH(calibrated_pose_covariance(e, s), Catch::Matchers::Contains("weak_direction_ratio"));
    s.weak_direction_ratio = -0.1;
    CHECK_THROWS_WITH(calibrated_pose_covariance(e, s), Catch::Matchers::Contains("weak_direction_ratio"));
    s.weak_direction_ratio = 0.5;
    s.refined_residual_scale = INFINITY;
    CHECK_THROWS_WITH(calibrated_pose_covariance(e, s), Catch::Matchers::Contains("refined_residual_scale"));
  }
}

TEST_CASE("Calibrated covariance: the defaults, the bound's sigma, the term names", "[unit][pose_covariance]") {
  // The fitted constants (docs/library.md, "The calibrated covariance").
  const CalibratedCovarianceSettings d;
  CHECK(d.sparsity_translation == 0.0);
  CHECK(d.sparsity_rotation == 0.0037);
  CHECK(d.residual_scale == 1.0);  // refitted for the refined pose (2.5 before)
  CHECK(d.refined_residual_scale == 0.065);
  CHECK(d.hypothesis_temperature == 0.05);
  CHECK(d.weak_direction_sigma == 0.005);
  CHECK(d.weak_direction_ratio == 0.5);
  CHECK(d.deskew_scale == 1.0);
  const LocalizerSettings ls;
  CHECK(ls.covariance_deskew_scale == d.deskew_scale);
  CHECK(ls.covariance_residual_scale == d.residual_scale);
  CHECK(ls.covariance_refined_residual_scale == d.refined_residual_scale);
  CHECK(ls.covariance_weak_direction_sigma == d.weak_direction_sigma);
  CHECK(ls.covariance_weak_direction_ratio == d.weak_direction_ratio);
  CHECK(ls.max_position_sigma == 0.2);
  // max_position_sigma: the largest standard deviation of the x-y-z block, whatever its axes.
  Matrix6d c = Matrix6d::Zero();
  c.diagonal() << 0.01, 0.04, 0.0025, 1.0, 1.0, 1.0;  // the angles do not count
  CHECK(max_position_sigma(c) == Approx(0.2).epsilon(1e-12));
  c(0, 1) = c(1, 0) = 0.02;  // x and y correlated: eigenvalues of [[0.01 0.02] [0.02 0.04]] are 0 and 0.05
  CHECK(max_position_sigma(c) == Approx(std::sqrt(0.05)).epsilon(1e-12));
  CHECK(enum_names<CovarianceTerm>() == std::vector<std::string>{"none", "laplace", "sparsity", "residual",
                                                                  "disagreement", "localizability", "deskew"});
  for (CovarianceTerm t : EnumValues<CovarianceTerm>::all()) CHECK(covariance_term_from_string(to_string(t)) == t);
  CHECK_THROWS_WITH(covariance_term_from_string("floor"), Catch::Matchers::Contains("sparsity") &&
                                                              Catch::Matchers::Contains("deskew"));
}
