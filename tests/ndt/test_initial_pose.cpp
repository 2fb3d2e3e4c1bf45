// find_initial_pose on the CPU backend: on the simulator's sample it finds scan 3 from
// 1.5 m and 60 or 150 deg off (within 0.1 m and 1 deg of the truth, not ambiguous); in a
// room symmetric under a half turn it reports the ambiguity with a rival half a turn away;
// bad input is an Error that names what is wrong.
#include "../support/test_support.hpp"
#include "initial_pose_sample.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Geometry>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

using namespace ndtcu;
using namespace ndtcu::initial_pose_test;

namespace {

// A 20 x 10 m room, 3 m high walls and a floor, every point paired with its half-turn
// image (x, y) -> (-x, -y): the room and its sampling are symmetric under a 180 deg yaw,
// and under no other (the sides differ in length).
PointCloud half_turn_room() {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  PointCloud c;
  for (int i = 0; i < 12000; ++i) {
    const float a = u(rng), b = u(rng);
    Eigen::Vector3f p;
    switch (i % 4) {
      case 0: p = {-10.f + 20.f * a, -5.f + 10.f * b, 0.f}; break;  // floor
      case 1: p = {10.f, -5.f + 10.f * a, 3.f * b}; break;           // short wall
      case 2: p = {-10.f + 20.f * a, 5.f, 3.f * b}; break;           // long wall
      default: p = {-10.f + 20.f * a, -5.f + 10.f * b, 3.f}; break;   // ceiling
    }
    p.z() -= 1.37f;  // off the voxel lattice's planes
    c.points.push_back(p);
    c.points.emplace_back(-p.x(), -p.y(), p.z());
  }
  return c;
}

}  // namespace

TEST_CASE("The sweep's hypotheses: grid inside the disc times the yaws", "[unit][initial_pose]") {
  Pose6 around;
  around << 10.0, -5.0, 1.5, 0.01, -0.02, 3.0;
  const std::vector<Pose6> h = initial_pose_hypotheses(around);  // radius 2, step 1, 360 / 15
  // Grid offsets (i, j) in -2..2 with i^2 + j^2 <= 4: 13 positions; 24 yaws (no +-180 twice).
  REQUIRE(h.size() == 13 * 24);
  for (const Pose6& p : h) {
    CHECK((p.head<2>() - around.head<2>()).norm() <= 2.0 + 1e-12);
    CHECK(p(2) == around(2));
    CHECK(p(3) == around(3));
    CHECK(p(4) == around(4));
  }
  // The yaws of one position are 15 deg apart around the full circle, all distinct.
  for (int k = 0; k < 24; ++k) {
    CHECK(std::abs(wrap(h[static_cast<std::size_t>(k)](5) - around(5) - (k - 12) * 15.0 * kDeg)) < 1e-12);
  }
  InitialPoseOptions o;
  o.radius = 0.0;
  o.yaw_range_deg = 90.0;
  o.yaw_step_deg = 30.0;
  const std::vector<Pose6> yaw_only = initial_pose_hypotheses(around, o);  // -45..45: -30, 0, 30
  REQUIRE(yaw_only.size() == 3);
  CHECK(yaw_only[1] == around);
}

TEST_CASE("find_initial_pose finds the sample's scan 3 from 1.5 m and a wrong heading", "[unit][initial_pose]") {
  Sample& s = sample();
  for (double yaw_off_deg : {60.0, 150.0}) {
    CAPTURE(yaw_off_deg);
    Pose6 around = s.truth;
    around(0) += 1.2;  // 1.5 m away
    around(1) -= 0.9;
    around(5) = wrap(around(5) + yaw_off_deg * kDeg);
    const InitialPoseResult r = find_initial_pose(s.aligner, s.scan, around);
    WARN("sample scan 3, yaw off " << yaw_off_deg << " deg: " << r.hypotheses_aligned << " hypotheses, "
                                   << r.time_ms << " ms (coarse " << r.coarse_ms << ", refine " << r.refine_ms
                                   << "), NVTL " << r.best.nvtl << ", rival " << r.ambiguity_nvtl);
    CHECK(r.coarse_hypotheses == 13 * 24);
    // 32 places refined, and those that ran out of iterations continued up to three times.
    CHECK(r.refined_hypotheses >= 32);
    CHECK(r.refined_hypotheses <= 4 * 32);
    CHECK(r.hypotheses_aligned == r.coarse_hypotheses + r.refined_hypotheses);
    CHECK(r.best.converged);
    // The tolerances of a converged alignment on this scene (the localize test reaches
    // ATE 0.01 m), not of the sweep's grid: the refinement must reach the basin's end.
    CHECK((r.best.pose.head<3>() - s.truth.head<3>()).norm() < 0.1);
    CHECK(rotation_angle(r.best.pose, s.truth) < 1.0 * kDeg);
    CHECK_FALSE(r.ambiguous);
    if (r.has_rival) {
      CHECK(r.ambiguity_nvtl < r.best.nvtl - 0.1);
      const bool apart = (r.rival_pose.head<3>() - r.best.pose.head<3>()).norm() > 1.0 ||
                         rotation_angle(r.rival_pose, r.best.pose) > 10.0 * kDeg;
      CHECK(apart);
    } else {
      CHECK(std::isnan(r.ambiguity_nvtl));
    }
    CHECK(r.time_ms >= r.coarse_ms + r.refine_ms);
  }
}

TEST_CASE("find_initial_pose reports a room symmetric under a half turn as ambiguous", "[unit][initial_pose]") {
  const PointCloud room = half_turn_room();
  Aligner aligner(cpu_settings(), test::on_cpu(2));
  aligner.set_target(room);
  // The scan: the room seen from its centre (the room itself, thinned), truth = identity.
  const PointCloud scan = voxel_downsample(room, 0.5);
  Pose6 around = Pose6::Zero();
  around(0) = 0.7;
  around(1) = -0.4;
  around(5) = 20.0 * kDeg;
  const InitialPoseResult r = find_initial_pose(aligner, scan, around);
  CAPTURE(r.best.pose.transpose(), r.best.nvtl, r.ambiguity_nvtl, r.rival_pose.transpose());
  WARN("half-turn room: winner " << r.best.pose.transpose() << " NVTL " << r.best.nvtl << ", rival "
                                 << r.rival_pose.transpose() << " NVTL " << r.ambiguity_nvtl);
  REQUIRE(r.has_rival);
  CHECK(r.ambiguous);
  CHECK(std::abs(r.ambiguity_nvtl - r.best.nvtl) <= 0.1);
  // Winner and rival are the two headings of the room, 0 and 180 deg, each at the centre.
  const double turn = std::abs(wrap(r.rival_pose(5) - r.best.pose(5)));
  CHECK(std::abs(turn - kPi) < 2.0 * kDeg);
  CHECK(r.best.pose.head<2>().norm() < 0.2);
  CHECK(r.rival_pose.head<2>().norm() < 0.2);

}

TEST_CASE("find_initial_pose continues what ran out of iterations three times, and returns the best NVTL unconverged",
          "[unit][initial_pose]") {
  Sample& s = sample();
  // An epsilon no step gets below and 3 iterations: every refined hypothesis stops at
  // max_iterations. The map is shared, so the aligner costs no rebuild.
  AlignSettings settings = cpu_settings();
  settings.epsilon = 1e-12;
  settings.max_iterations = 3;
  Aligner aligner(settings, test::on_cpu(2));
  aligner.set_target(s.aligner.target());
  Pose6 around = s.truth;
  around(0) += 1.2;
  around(1) -= 0.9;
  around(5) = wrap(around(5) + 60.0 * kDeg);
  const InitialPoseResult r = find_initial_pose(aligner, s.scan, around);
  CHECK_FALSE(r.best.converged);
  CHECK(r.best.reason == StopReason::MaxIterations);
  CHECK(r.best.iterations == 12);  // 3, and 3 more in each of the three continuations
  CHECK(r.refined_hypotheses == 128);  // 32 places, each continued three times
  // Still the right place: the coarse pass (5 iterations, its own settings but this
  // epsilon) and 12 more steps of 0.1 m at most leave it within the grid's reach of the
  // truth (the nearest grid start is 0.22 m off; 0.6 m allows for the unfinished steps).
  CHECK((r.best.pose.head<2>() - s.truth.head<2>()).norm() < 0.6);
  CHECK(std::abs(wrap(r.best.pose(5) - s.truth(5))) < 5.0 * kDeg);
}

TEST_CASE("a sweep's size is counted from its radius, steps and ranges before anything is built",
          "[unit][initial_pose]") {
  using Catch::Matchers::Contains;
  Pose6 around;
  around << -24.0, 18.4, 1.3, 0.0, 0.0, -1.71;
  // The count is exact: the limit at the sweep's size passes, one below refuses it.
  InitialPoseOptions o;  // radius 2 at 1 m: 13 positions, times 24 yaws
  o.max_hypotheses = 13 * 24;
  CHECK(initial_pose_hypotheses(around, o).size() == 13 * 24);
  o.max_hypotheses = 13 * 24 - 1;
  CHECK_THROWS_WITH(validate(o), Contains("312 hypotheses (13 positions within radius 2 m at position_step 1 m, "
                                          "times 24 yaws over yaw_range_deg 360 at yaw_step_deg 15)") &&
                                     Contains("exceed the limit of 311"));
  // Radii and steps that are not multiples of each other, half circles and odd steps: the
  // count validate() makes is the number of hypotheses the sweep builds.
  for (const double radius : {0.0, 0.5, 1.0, 2.5, 3.7, 7.0}) {
    for (const double step : {0.3, 0.7, 1.0}) {
      for (const double yaw_step : {7.0, 15.0, 45.0, 360.0}) {
        for (const double yaw_range : {10.0, 90.0, 360.0}) {
          InitialPoseOptions c;
          c.radius = radius;
          c.position_step = step;
          c.yaw_step_deg = yaw_step;
          c.yaw_range_deg = yaw_range;
          const std::size_t n = initial_pose_hypotheses(around, c).size();
          CAPTURE(radius, step, yaw_step, yaw_range, n);
          c.max_hypotheses = n;
          CHECK_NOTHROW(validate(c));
          if (n > 1) {  // (a limit of 0 is refused as such)
            c.max_hypotheses = n - 1;
            CHECK_THROWS_WITH(validate(c), Contains(std::to_string(n) + " hypotheses"));
          }
        }
      }
    }
  }
  // Issue 26: a yaw step of 1e-7 deg took 16.8 GB and 67 s before it was refused (the yaws
  // were built first), a radius of 1e6 m ran on (counting 4e12 grid cells). Both are now
  // refused at once, through find_initial_pose as through validate.
  const auto t0 = std::chrono::steady_clock::now();
  InitialPoseOptions fine;
  fine.radius = 0.0;
  fine.yaw_step_deg = 1e-7;
  CHECK_THROWS_WITH(validate(fine), Contains("1 positions within radius 0 m") && Contains("yaw_step_deg 1e-07") &&
                                        Contains("exceed the limit of 100000"));
  InitialPoseOptions wide;
  wide.radius = 1e6;
  CHECK_THROWS_WITH(validate(wide), Contains("about 7") && Contains("radius 1000000 m") &&
                                        Contains("exceed the limit of 100000"));
  Aligner aligner(cpu_settings(), test::on_cpu(2));  // checked before the aligner or the scan is looked at
  CHECK_THROWS_WITH(find_initial_pose(aligner, PointCloud{}, around, wide), Contains("radius 1000000 m"));
  wide.radius = 1e300;
  wide.position_step = 1e-300;
  CHECK_THROWS_WITH(validate(wide), Contains("exceed the limit of 100000"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0);
}

TEST_CASE("find_initial_pose rejects bad input with an Error that names it", "[unit][initial_pose]") {
  using Catch::Matchers::Contains;
  Sample& s = sample();
  const Pose6 around = s.truth;
  {
    Aligner empty(cpu_settings(), test::on_cpu(2));
    CHECK_THROWS_WITH(find_initial_pose(empty, s.scan, around), Contains("no target map"));
  }
  {
    Pose6 bad = around;
    bad(5) = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH(find_initial_pose(s.aligner, s.scan, bad), Contains("around[5]") && Contains("not finite"));
  }
  const auto rejects = [&](InitialPoseOptions o, const std::string& field) {
    CAPTURE(field);
    CHECK_THROWS_WITH(find_initial_pose(s.aligner, s.scan, around, o), Contains("InitialPoseOptions::" + field));
  };
  InitialPoseOptions o;
  o.radius = -1.0;
  rejects(o, "radius = -1");
  o = {};
  o.position_step = 0.0;
  rejects(o, "position_step = 0");
  o = {};
  o.yaw_step_deg = -15.0;
  rejects(o, "yaw_step_deg = -15");
  o = {};
  o.yaw_range_deg = 0.0;
  rejects(o, "yaw_range_deg = 0");
  o.yaw_range_deg = 361.0;
  rejects(o, "yaw_range_deg = 361");
  o = {};
  o.coarse_iterations = 0;
  rejects(o, "coarse_iterations = 0");
  o = {};
  o.refine_count = 0;
  rejects(o, "refine_count = 0");
  o = InitialPoseOptions{};
  o.refine_step_size = -0.1;
  rejects(o, "refine_step_size = -0.1");
  o = {};
  o.coarse_step_size = std::numeric_limits<double>::quiet_NaN();
  rejects(o, "coarse_step_size = nan");
  o = {};
  o.ambiguity_margin = -0.1;
  rejects(o, "ambiguity_margin = -0.1");
  o = {};
  o.ambiguity_distance = std::numeric_limits<double>::infinity();
  rejects(o, "ambiguity_distance = inf");
  o = {};
  o.ambiguity_angle_deg = -1.0;
  rejects(o, "ambiguity_angle_deg = -1");
  o = {};
  // 201 x 201 positions within 100 m at 1 m (31417 in the disc) times 24 yaws.
  o.radius = 100.0;
  CHECK_THROWS_WITH(find_initial_pose(s.aligner, s.scan, around, o),
                    Contains("754008 hypotheses") && Contains("exceed the limit of 100000") &&
                        Contains("larger"));
}

TEST_CASE("rotation offsets: the identity first, a cubic grid inside the ball, every rotation near one",
          "[unit][initial_pose]") {
  const std::vector<Eigen::Vector3d> turns = rotation_offsets(45.0, 15.0);
  REQUIRE(turns.size() == 123);  // grid points (i, j, k) with i^2 + j^2 + k^2 <= 9
  CHECK(turns.front().isZero());
  for (const Eigen::Vector3d& v : turns) CHECK(v.norm() <= 45.0 * kDeg + 1e-9);
  // Every rotation within 40 deg of the identity lies within 15 deg of a grid rotation.
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  double worst = 0.0;
  for (int t = 0; t < 2000; ++t) {
    Eigen::Vector3d axis(normal(rng), normal(rng), normal(rng));
    axis.normalize();
    const Eigen::Matrix3d r = Eigen::AngleAxisd(40.0 * kDeg * std::cbrt(unit(rng)), axis).toRotationMatrix();
    double nearest = kPi;
    for (const Eigen::Vector3d& v : turns) {
      const Eigen::Matrix3d g = v.isZero() ? Eigen::Matrix3d::Identity()
                                           : Eigen::AngleAxisd(v.norm(), v.normalized()).toRotationMatrix();
      nearest = std::min(nearest, Eigen::AngleAxisd(g.transpose() * r).angle());
    }
    worst = std::max(worst, nearest);
  }
  CAPTURE(worst / kDeg);
  CHECK(worst < 15.0 * kDeg);
  CHECK(rotation_offsets(0.0, 15.0).size() == 1);
  CHECK_THROWS_WITH(rotation_offsets(-1.0, 15.0), Catch::Matchers::Contains("range -1"));
  CHECK_THROWS_WITH(rotation_offsets(45.0, 0.0), Catch::Matchers::Contains("step 0"));
  CHECK_THROWS_WITH(rotation_offsets(180.0, 1.0), Catch::Matchers::Contains("too fine"));
}

namespace {

// Starts 1 m about the sample's truth, every 90 deg: for comparing a batch option with the
// aligner setting it stands for.
std::vector<Pose6> starts_near_truth(const Sample& s) {
  InitialPoseOptions o;
  o.radius = 1.0;
  o.yaw_step_deg = 90.0;
  return initial_pose_hypotheses(s.truth, o);
}

// The results of the sample's aligner with `options` and of an aligner of `settings`
// (the sample's map, no options), from the same starts: each pair must be the same bits.
std::pair<std::vector<AlignResult>, std::vector<AlignResult>> option_and_setting(Sample& s, const BatchOptions& options,
                                                                                 const AlignSettings& settings) {
  const std::vector<Pose6> starts = starts_near_truth(s);
  Aligner reference(settings, test::on_cpu(2));
  reference.set_target(s.aligner.target());
  std::pair<std::vector<AlignResult>, std::vector<AlignResult>> out{s.aligner.align_batch(s.scan, starts, options),
                                                                    reference.align_batch(s.scan, starts)};
  REQUIRE(out.first.size() == out.second.size());
  for (std::size_t k = 0; k < out.first.size(); ++k) {
    CHECK(out.first[k].iterations == out.second[k].iterations);
    CHECK(out.first[k].pose == out.second[k].pose);
    CHECK(out.first[k].nvtl == out.second[k].nvtl);
  }
  return out;
}

}  // namespace

TEST_CASE("a coarse pass (BatchOptions::max_iterations) equals an aligner with that many iterations",
          "[unit][initial_pose]") {
  Sample& s = sample();
  AlignSettings few = cpu_settings();
  few.max_iterations = 3;
  BatchOptions coarse;
  coarse.max_iterations = 3;
  const auto [a, b] = option_and_setting(s, coarse, few);
  for (const AlignResult& r : a) CHECK(r.iterations <= 3);
  BatchOptions bad;
  bad.max_iterations = -1;
  const std::vector<Pose6> starts = starts_near_truth(s);
  CHECK_THROWS_WITH(s.aligner.align_batch(s.scan, starts, bad), Catch::Matchers::Contains("max_iterations = -1"));
  CHECK_THROWS_WITH(search_hypotheses(s.aligner, s.scan, {}), Catch::Matchers::Contains("no hypotheses"));
}

TEST_CASE("a batch's step length (BatchOptions::step_size) equals an aligner with that step_size",
          "[unit][initial_pose]") {
  Sample& s = sample();
  AlignSettings longer = cpu_settings();
  longer.step_size = 0.3;
  BatchOptions steps;
  steps.step_size = 0.3;
  const auto [a, b] = option_and_setting(s, steps, longer);
  const std::vector<Pose6> starts = starts_near_truth(s);
  const std::vector<AlignResult> own = s.aligner.align_batch(s.scan, starts);
  int differ = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    differ += a[k].iterations != own[k].iterations || a[k].pose != own[k].pose ? 1 : 0;
  }
  CHECK(differ > 0);  // the override took effect: the aligner's own 0.1 m steps end elsewhere
  // A step shorter than half the aligner's epsilon is an empty range of step lengths.
  BatchOptions bad;
  bad.step_size = 0.4 * s.aligner.settings().epsilon;
  CHECK_THROWS_WITH(s.aligner.align_batch(s.scan, starts, bad), Catch::Matchers::Contains("BatchOptions::step_size"));
  bad.step_size = -1.0;
  CHECK_THROWS_WITH(s.aligner.align_batch(s.scan, starts, bad), Catch::Matchers::Contains("step_size = -1"));
}

TEST_CASE("a search's coarse and refinement step lengths equal a search by an aligner with that step_size",
          "[unit][initial_pose]") {
  Sample& s = sample();
  AlignSettings longer = cpu_settings();
  longer.step_size = 0.3;
  Aligner reference(longer, test::on_cpu(2));
  reference.set_target(s.aligner.target());
  InitialPoseOptions o;
  o.radius = 2.0;
  o.yaw_step_deg = 30.0;
  const Pose6 around = s.truth + (Pose6() << 1.2, -0.7, 0.0, 0.0, 0.0, 0.3).finished();
  const std::vector<Pose6> hypotheses = initial_pose_hypotheses(around, o);
  const InitialPoseResult theirs = search_hypotheses(reference, s.scan, hypotheses, o);
  o.coarse_step_size = 0.3;
  o.refine_step_size = 0.3;
  const InitialPoseResult ours = search_hypotheses(s.aligner, s.scan, hypotheses, o);
  CHECK(ours.best.pose == theirs.best.pose);
  CHECK(ours.best.nvtl == theirs.best.nvtl);
  CHECK(ours.best.iterations == theirs.best.iterations);
  CHECK(ours.refined_hypotheses == theirs.refined_hypotheses);
  CHECK(ours.has_rival == theirs.has_rival);
  if (ours.has_rival && theirs.has_rival) CHECK(ours.ambiguity_nvtl == theirs.ambiguity_nvtl);
  // The coarse override took effect: with the refinement's alone, the search differs.
  o.coarse_step_size = 0.0;
  const InitialPoseResult refine_only = search_hypotheses(s.aligner, s.scan, hypotheses, o);
  CHECK((refine_only.best.pose != ours.best.pose || refine_only.best.iterations != ours.best.iterations ||
         refine_only.refined_hypotheses != ours.refined_hypotheses));
}

namespace {

// The angle (rad) between two rotations given as poses' transforms.
double angle_between(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b) {
  return Eigen::AngleAxisd(a.topLeftCorner<3, 3>().transpose() * b.topLeftCorner<3, 3>()).angle();
}

// A start anywhere within `radius` of `truth` in x and y (uniform over the disc, or on its
// circle when `on_circle`), at the truth's z, with a uniform yaw and no roll or pitch.
Pose6 rough_start(const Eigen::Matrix4d& truth, double radius, bool on_circle, std::mt19937_64& rng) {
  // Uniforms from the generator's bits (the distributions of <random> differ between
  // standard libraries; these starts must not).
  const auto unit = [&rng]() { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  const double r = on_circle ? radius : radius * std::sqrt(unit());
  const double a = 2.0 * kPi * unit();
  Pose6 p = Pose6::Zero();
  p(0) = truth(0, 3) + r * std::cos(a);
  p(1) = truth(1, 3) + r * std::sin(a);
  p(2) = truth(2, 3);
  p(5) = wrap(2.0 * kPi * unit());
  return p;
}

struct SearchTally {
  int found = 0, total = 0, wrong_accepted = 0, flagged = 0;
};

// One search from `start`: found within 10 cm and 1 deg; a wrong pose counts as accepted
// when it converged above the NVTL threshold (2.3) without the ambiguity flag.
void tally(SearchTally& t, const InitialPoseResult& r, const Eigen::Matrix4d& truth, const std::string& what) {
  const double err = (r.best.transform.topRightCorner<3, 1>() - truth.topRightCorner<3, 1>()).norm();
  const double angle = angle_between(r.best.transform, truth);
  const bool right = err < 0.10 && angle < 1.0 * kDeg;
  ++t.total;
  t.found += right;
  t.flagged += r.ambiguous;
  const bool accepted = r.best.converged && r.best.nvtl >= 2.3 && !r.ambiguous;
  if (!right && accepted) ++t.wrong_accepted;
  std::printf("  %s: %s, %.3f m, %.2f deg, NVTL %.3f%s, leveled %d, %.0f ms\n", what.c_str(),
              right ? "found" : "MISSED", err, angle / kDeg, r.best.nvtl, r.ambiguous ? " (ambiguous)" : "",
              r.leveled ? 1 : 0, r.time_ms);
}

}  // namespace

TEST_CASE("initpose on 10 BALM scans from 4 starts each within 5 m and any yaw, roll and pitch from the ground",
          "[data][initial_pose][heavy]") {
  NDTCU_REQUIRE_DATA(dir, "balm_os0");
  const std::filesystem::path balm = dir / "balm_os0";
  const Trajectory reference = read_trajectory((balm / "poses_tum.txt").string());
  REQUIRE(reference.size() == 60);
  Aligner aligner(cpu_settings(), test::on_cpu(2));
  aligner.set_target(read_point_cloud((balm / "map_even_frames_0-58_voxel0.1.pcd").string()));
  InitialPoseOptions o;
  o.radius = 5.0;
  o.level_from_ground = true;
  std::mt19937_64 rng(2026);
  SearchTally t;
  for (int scan_index = 3; scan_index < 60; scan_index += 6) {  // 10 odd scans (none is in the map)
    char name[32];
    std::snprintf(name, sizeof(name), "scans/%03d.pcd", scan_index);
    const PointCloud scan = voxel_downsample(read_point_cloud((balm / name).string()), 1.0);
    const Eigen::Matrix4d truth = reference[static_cast<std::size_t>(scan_index)].pose.matrix();
    for (int k = 0; k < 4; ++k) {
      const Pose6 start = rough_start(truth, 5.0, false, rng);
      tally(t, find_initial_pose(aligner, scan, start, o), truth, std::string(name) + " start " + std::to_string(k));
    }
  }
  std::printf("balm initpose (CPU, 2 threads): %d of %d within 10 cm and 1 deg, %d wrong accepted, %d ambiguous\n",
              t.found, t.total, t.wrong_accepted, t.flagged);
  CHECK(t.total == 40);
  CHECK(t.found >= 38);
  CHECK(t.wrong_accepted == 0);
}

TEST_CASE("initpose finds KITTI 00 frames 1-5 in the map of frames 0, 2, 4 from 5 m off with unknown yaw",
          "[data][initial_pose][heavy]") {
  NDTCU_REQUIRE_DATA(dir, "kitti00");
  const std::filesystem::path kitti = dir / "kitti00";
  const Trajectory reference =
      read_trajectory((kitti / "poses_velo_icp_reference.txt").string(), TrajectoryFormat::Kitti, 0.1);
  REQUIRE(reference.size() == 6);
  const auto velodyne = [&](int f) {
    char name[32];
    std::snprintf(name, sizeof(name), "%06d.bin", f);
    return load_sample(kitti / "velodyne" / name, 0.0);
  };
  PointCloud map;
  for (int f : {0, 2, 4}) {
    const PointCloud scan = velodyne(f);
    for (const auto& p : scan.points) map.points.push_back((reference[f].pose * p.cast<double>()).cast<float>());
  }
  Aligner aligner(cpu_settings(), test::on_cpu(2));
  aligner.set_target(voxel_downsample(map, 0.2));
  InitialPoseOptions o;
  o.radius = 6.0;
  o.level_from_ground = true;
  std::mt19937_64 rng(5);
  SearchTally t;
  for (int f = 1; f <= 5; ++f) {
    const Eigen::Matrix4d truth = reference[f].pose.matrix();
    const Pose6 start = rough_start(truth, 5.0, true, rng);
    tally(t, find_initial_pose(aligner, voxel_downsample(velodyne(f), 1.0), start, o), truth,
          "kitti frame " + std::to_string(f));
  }
  CHECK(t.found == 5);
  CHECK(t.wrong_accepted == 0);
}

TEST_CASE("a search outside the map, a scan with no overlap, an empty map: a clear verdict, never a found pose",
          "[unit][initial_pose]") {
  Sample& s = sample();
  InitialPoseOptions o;
  o.radius = 2.0;
  o.yaw_step_deg = 45.0;
  {  // 1 km from the map
    Pose6 far = s.truth;
    far(0) += 1000.0;
    const InitialPoseResult r = find_initial_pose(s.aligner, s.scan, far, o);
    CAPTURE(r.best.nvtl, to_string(r.best.reason));
    CHECK(verdict(r) == InitialPoseVerdict::NoOverlap);
    CHECK(r.best.matched_points == 0);
  }
  {  // the scan moved 300 m in its own frame: nothing of it lies in the map
    PointCloud away = s.scan;
    for (auto& p : away.points) p += Eigen::Vector3f(300.f, -200.f, 0.f);
    const InitialPoseResult r = find_initial_pose(s.aligner, away, s.truth, o);
    CHECK(verdict(r) == InitialPoseVerdict::NoOverlap);
  }
  {  // an empty map
    Aligner empty(cpu_settings(), test::on_cpu(2));
    empty.set_target(PointCloud{});
    const InitialPoseResult r = find_initial_pose(empty, s.scan, s.truth, o);
    CHECK(r.best.reason == StopReason::NoVoxels);
    CHECK(verdict(r) == InitialPoseVerdict::NoOverlap);
    CHECK(std::string(to_string(verdict(r))) == "no_overlap");
  }
  {  // the truth's neighbourhood: found, and a threshold above its NVTL says so
    const InitialPoseResult r = find_initial_pose(s.aligner, s.scan, s.truth, o);
    CHECK(verdict(r) == InitialPoseVerdict::Found);
    CHECK(verdict(r, r.best.nvtl + 0.01) == InitialPoseVerdict::BelowThreshold);
  }
}
