// The aligner on synthetic scenes: recovery of a known motion, degenerate inputs as
// results, bad input as errors, and the same bits for any thread count.
#include "../support/test_support.hpp"
#include "synthetic.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>

#include "ndt/optimizer.hpp"

#include <Eigen/Geometry>
#include <Eigen/QR>

#include <cmath>
#include <limits>

using namespace ndtcu;

namespace {

double rotation_error(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b) {
  // Through a quaternion (atan2 of its parts): exact near zero, unlike acos of the trace.
  const Eigen::Matrix3d r = a.topLeftCorner<3, 3>().transpose() * b.topLeftCorner<3, 3>();
  return Eigen::AngleAxisd(r).angle();
}

double translation_error(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b) {
  return (a.topRightCorner<3, 1>() - b.topRightCorner<3, 1>()).norm();
}

Pose6 make_pose(double x, double y, double z, double r, double p, double w) {
  Pose6 v;
  v << x, y, z, r, p, w;
  return v;
}

}  // namespace

TEST_CASE("pose_to_matrix and matrix_to_pose are inverse", "[unit][aligner]") {
  const Pose6 p = make_pose(1.5, -2.0, 0.3, 0.2, -0.4, 2.9);
  const Pose6 q = matrix_to_pose(pose_to_matrix(p));
  CHECK((p - q).cwiseAbs().maxCoeff() < 1e-12);
  Eigen::Matrix4d bad = pose_to_matrix(p);
  bad(0, 0) *= 1.1;
  CHECK_THROWS_AS(matrix_to_pose(bad), Error);
}

TEST_CASE("Both presets recover a known motion of a synthetic scene", "[unit][aligner]") {
  const PointCloud target = test::synthetic_scene(21, 40000);
  const Pose6 truth = make_pose(0.35, -0.25, 0.05, 0.01, -0.015, 0.04);
  const PointCloud source = test::moved_by_inverse(test::synthetic_scene(22, 20000), truth);
  for (const char* name : {"autoware", "pcl"}) {
    AlignSettings s = preset(name);
    s.resolution = 1.0;
    s.epsilon = 1e-4;  // PCL's rule compares a squared translation: tighter so it iterates
    s.max_iterations = 60;
    const AlignResult r = align(target, source, Eigen::Matrix4d::Identity(), s, test::run_with(2));
    INFO(name << ": " << r.pose.transpose() << " after " << r.iterations << " (" << to_string(r.reason) << ")");
    CHECK(r.converged);
    // Tolerances: the scene's sparse sampling (about 30 points per 1 m voxel) limits what
    // either score function can resolve to a few mm and mrad.
    CHECK(translation_error(r.transform, pose_to_matrix(truth)) < 0.01);
    CHECK(rotation_error(r.transform, pose_to_matrix(truth)) < 0.005);
    CHECK(r.tp == Approx(r.score / static_cast<double>(source.size())));
    CHECK(r.nvtl > 0.0);
    CHECK(r.matched_points > source.size() / 2);
    CHECK(r.trace.size() == static_cast<std::size_t>(r.iterations));
    CHECK(r.hessian.isApprox(r.hessian.transpose()));
    CHECK(r.backend == Backend::Cpu);
  }
}

TEST_CASE("Degenerate inputs are results with a reason", "[unit][aligner]") {
  const PointCloud target = test::synthetic_scene(31, 20000);
  Aligner a(autoware_preset());
  a.set_target(target);

  SECTION("empty source") {
    const AlignResult r = a.align(PointCloud{});
    CHECK(r.reason == StopReason::EmptySource);
    CHECK_FALSE(r.converged);
    CHECK(r.iterations == 0);
  }
  SECTION("target without a usable voxel") {
    PointCloud sparse;
    for (int i = 0; i < 50; ++i) sparse.points.emplace_back(10.f * i, 0.f, 0.f);  // one point per voxel
    Aligner b(autoware_preset());
    b.set_target(sparse);
    const AlignResult r = b.align(target);
    CHECK(r.reason == StopReason::NoVoxels);
    CHECK(r.target_voxels == 0);
  }
  SECTION("no correspondence at the initial guess") {
    const AlignResult r = a.align(target, pose_to_matrix(make_pose(500, 0, 0, 0, 0, 0)));
    CHECK(r.reason == StopReason::NoCorrespondence);
    CHECK_FALSE(r.converged);
    CHECK(r.correspondences == 0);
    CHECK(r.pose(0) == 500.0);
  }
  SECTION("singular Hessian") {
    // One point at the source origin: the rotation columns of its Jacobian vanish.
    PointCloud one;
    one.points.emplace_back(0.f, 0.f, 0.f);
    const AlignResult r = a.align(one, pose_to_matrix(make_pose(2.3, 1.1, 0.2, 0, 0, 0)));
    CHECK(r.reason == StopReason::SingularHessian);
    CHECK_FALSE(r.converged);
  }
  SECTION("bad input throws") {
    Eigen::Matrix4d nan_guess = Eigen::Matrix4d::Identity();
    nan_guess(0, 3) = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_AS(a.align(target, nan_guess), Error);
    Pose6 nan_pose = Pose6::Zero();
    nan_pose(4) = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_AS(a.align_from_pose(target, nan_pose), Error);
    PointCloud bad = target;
    bad.points[5].x() = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(a.align(bad), Error);
    Aligner no_target;
    CHECK_THROWS_AS(no_target.align(target), Error);
    AlignSettings s;
    s.resolution = -1;
    CHECK_THROWS_AS(Aligner(s), Error);
  }
}

TEST_CASE("The same input gives the same bits with 1, 2, 3 and 8 threads", "[unit][aligner]") {
  const PointCloud target = test::synthetic_scene(41, 40000);
  const PointCloud source = test::moved_by_inverse(test::synthetic_scene(42, 15000),
                                                   make_pose(0.4, 0.2, 0.0, 0.0, 0.01, -0.03));
  for (const char* name : {"autoware", "pcl"}) {
    AlignSettings s = preset(name);
    s.resolution = 1.0;
    s.epsilon = 1e-4;
    const AlignResult ref = align(target, source, Eigen::Matrix4d::Identity(), s, test::run_with(1));
    REQUIRE(ref.iterations > 1);
    for (int t : {2, 3, 8}) {
      const AlignResult r = align(target, source, Eigen::Matrix4d::Identity(), s, test::run_with(t));
      INFO(name << " threads " << t);
      CHECK(r.iterations == ref.iterations);
      CHECK(r.pose == ref.pose);
      CHECK(r.score == ref.score);
      CHECK(r.nvtl == ref.nvtl);
      CHECK(r.hessian == ref.hessian);
      REQUIRE(r.trace.size() == ref.trace.size());
      for (std::size_t k = 0; k < r.trace.size(); ++k) CHECK(r.trace[k].score == ref.trace[k].score);
    }
  }
}

TEST_CASE("A map far from zero aligns as one at zero (origin moved into the pose)", "[unit][aligner]") {
  const PointCloud target = test::synthetic_scene(51, 30000);
  const Pose6 truth = make_pose(0.3, 0.2, 0.0, 0.0, 0.0, 0.03);
  const PointCloud source = test::moved_by_inverse(test::synthetic_scene(52, 10000), truth);
  const AlignSettings s = autoware_preset();
  const ExecutionOptions e = test::run_with(2);
  const AlignResult local = align(target, source, Eigen::Matrix4d::Identity(), s, e);

  PointCloud utm = target;
  utm.origin = Eigen::Vector3d(652000.0, 5412000.0, 310.0);
  Eigen::Matrix4d guess = Eigen::Matrix4d::Identity();
  guess.topRightCorner<3, 1>() = utm.origin;
  const AlignResult far = align(utm, source, guess, s, e);
  CHECK(far.iterations == local.iterations);
  CHECK(far.score == local.score);
  Eigen::Matrix4d expect = local.transform;
  expect.topRightCorner<3, 1>() += utm.origin;
  CHECK(translation_error(far.transform, expect) < 1e-6);
  CHECK(rotation_error(far.transform, expect) < 1e-9);
}

TEST_CASE("Search methods all recover a small motion", "[unit][aligner]") {
  const PointCloud target = test::synthetic_scene(61, 40000);
  const Pose6 truth = make_pose(0.2, -0.15, 0.0, 0.0, 0.0, 0.02);
  const PointCloud source = test::moved_by_inverse(test::synthetic_scene(62, 15000), truth);
  for (auto m : {SearchMethod::Radius, SearchMethod::Direct27, SearchMethod::Direct7, SearchMethod::Direct1}) {
    AlignSettings s = autoware_preset();
    s.resolution = 1.0;
    s.search = m;
    const AlignResult r = align(target, source, Eigen::Matrix4d::Identity(), s, test::run_with(2));
    INFO(to_string(m) << ": " << r.pose.transpose());
    CHECK(translation_error(r.transform, pose_to_matrix(truth)) < 0.03);
  }
}

TEST_CASE("Oscillation count follows Autoware's definition", "[unit][aligner]") {
  using detail::count_oscillation;
  using V = Eigen::Vector3d;
  // Back and forth along x: every step after the first reverses (cosine -1).
  CHECK(count_oscillation({V(0, 0, 0), V(1, 0, 0), V(0, 0, 0), V(1, 0, 0), V(0, 0, 0)}) == 3);
  // Forward motion never oscillates; a zero step resets the run.
  CHECK(count_oscillation({V(0, 0, 0), V(1, 0, 0), V(2, 0, 0), V(3, 0, 0)}) == 0);
  CHECK(count_oscillation({V(0, 0, 0), V(1, 0, 0), V(0, 0, 0), V(0, 0, 0), V(1, 0, 0), V(0, 0, 0)}) == 1);
  // A right-angle turn (cosine 0) is not an inversion; cosine -0.95 is.
  CHECK(count_oscillation({V(0, 0, 0), V(1, 0, 0), V(1, 1, 0)}) == 0);
  CHECK(count_oscillation({V(0, 0, 0), V(1, 0, 0), V(1.0 - 0.95, 0.312, 0)}) == 1);
}

TEST_CASE("Settings parse and print", "[unit][aligner]") {
  CHECK(search_method_from_string("direct7") == SearchMethod::Direct7);
  CHECK_THROWS_AS(search_method_from_string("kdtree"), Error);
  CHECK(std::string(to_string(LineSearch::MoreThuente)) == "more-thuente");
  CHECK(preset("pcl").line_search == LineSearch::MoreThuente);
  CHECK(preset("autoware").resolution == 2.0);
  CHECK_THROWS_AS(preset("ros"), Error);
}

TEST_CASE("Newton direction: PCL's solve, and saddle-free where the Hessian is not negative definite",
          "[unit][aligner]") {
  using detail::newton_direction;
  using M6 = Eigen::Matrix<double, 6, 6>;
  using V6 = Eigen::Matrix<double, 6, 1>;
  // A random rotation of diag(lambda): H = Q diag(lambda) Q'.
  const M6 q = Eigen::HouseholderQR<M6>(M6::Random()).householderQ();
  const V6 g = (V6() << 0.3, -1.2, 0.7, 2.0, -0.4, 0.9).finished();
  auto hessian = [&q](const V6& lambda) { return M6(q * lambda.asDiagonal() * q.transpose()); };

  SECTION("negative definite: both solve H dp = -g") {
    const M6 h = hessian((V6() << -5, -4, -3, -2, -1, -0.5).finished());
    V6 pcl, saddle_free;
    REQUIRE(newton_direction(h, g, NewtonDirection::Pcl, pcl));
    REQUIRE(newton_direction(h, g, NewtonDirection::SaddleFree, saddle_free));
    CHECK((h * pcl + g).norm() < 1e-12);
    CHECK((pcl - saddle_free).norm() < 1e-12 * pcl.norm());
  }
  SECTION("indefinite: PCL's solution follows the convex direction downhill, saddle-free goes up") {
    const V6 lambda = (V6() << -5, -4, -3, -2, -1, 0.5).finished();
    const M6 h = hessian(lambda);
    V6 pcl, saddle_free;
    REQUIRE(newton_direction(h, g, NewtonDirection::Pcl, pcl));
    REQUIRE(newton_direction(h, g, NewtonDirection::SaddleFree, saddle_free));
    CHECK((h * pcl + g).norm() < 1e-12);
    const V6 convex = q.col(5);  // the eigenvector of +0.5
    // Along the convex direction PCL's step has the sign opposite to the gradient's, the
    // saddle-free step the gradient's sign and the same length (|g.v| / 0.5).
    CHECK(convex.dot(pcl) * convex.dot(g) < 0.0);
    CHECK(convex.dot(saddle_free) * convex.dot(g) > 0.0);
    CHECK(std::fabs(convex.dot(saddle_free)) == Approx(std::fabs(convex.dot(pcl))).epsilon(1e-10));
    // Along the concave directions the two agree; overall saddle-free ascends.
    for (int k = 0; k < 5; ++k) CHECK(q.col(k).dot(saddle_free) == Approx(q.col(k).dot(pcl)).epsilon(1e-10));
    CHECK(g.dot(saddle_free) > 0.0);
  }
  SECTION("singular or not finite: no direction, dp untouched") {
    V6 dp = V6::Constant(7.0);
    for (const NewtonDirection d : {NewtonDirection::Pcl, NewtonDirection::SaddleFree}) {
      CHECK_FALSE(newton_direction(hessian((V6() << -5, -4, -3, -2, -1, 0).finished()), g, d, dp));
      CHECK_FALSE(newton_direction(M6::Zero(), g, d, dp));
      M6 nan = hessian((V6() << -5, -4, -3, -2, -1, -0.5).finished());
      nan(2, 3) = std::numeric_limits<double>::quiet_NaN();
      CHECK_FALSE(newton_direction(nan, g, d, dp));
      CHECK(dp == V6::Constant(7.0));
    }
  }
}

TEST_CASE("Saddle-free Newton recovers the synthetic motion as PCL's direction does", "[unit][aligner]") {
  const PointCloud target = test::synthetic_scene(21, 40000);
  const Pose6 truth = make_pose(0.35, -0.25, 0.05, 0.01, -0.015, 0.04);
  const PointCloud source = test::moved_by_inverse(test::synthetic_scene(22, 20000), truth);
  AlignSettings s = autoware_preset();
  s.resolution = 1.0;
  s.epsilon = 1e-4;
  s.max_iterations = 60;
  const ExecutionOptions e = test::run_with(2);
  const AlignResult pcl = align(target, source, Eigen::Matrix4d::Identity(), s, e);
  s.newton_direction = NewtonDirection::SaddleFree;
  const AlignResult saddle_free = align(target, source, Eigen::Matrix4d::Identity(), s, e);
  INFO("pcl " << pcl.iterations << " iterations, saddle-free " << saddle_free.iterations);
  REQUIRE(pcl.converged);
  REQUIRE(saddle_free.converged);
  CHECK(translation_error(saddle_free.transform, pose_to_matrix(truth)) < 0.01);
  CHECK(rotation_error(saddle_free.transform, pose_to_matrix(truth)) < 0.005);
  CHECK(translation_error(saddle_free.transform, pcl.transform) < 1e-3);
  CHECK(std::string(to_string(NewtonDirection::SaddleFree)) == "saddle-free");
  CHECK(newton_direction_from_string("pcl") == NewtonDirection::Pcl);
  CHECK_THROWS_AS(newton_direction_from_string("levenberg"), Error);
  CHECK(wants_device_loop(autoware_preset(), e));
  CHECK_FALSE(wants_device_loop(s, e));
  CHECK_FALSE(wants_device_loop(pcl_preset(), e));
}
