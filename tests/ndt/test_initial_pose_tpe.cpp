// The tree-structured Parzen estimator and find_initial_pose_tpe on the CPU backend: the
// estimator's draws are fixed by its seed (golden values, so a change of transform shows);
// its proposals gather at the optimum of known functions in 1-D and in Autoware's 6-D
// space, across the yaw's wrap; the search finds the sample's scan 3 from 1.5 m and
// 60 deg off (within 0.1 m and 1 deg); a batched search is reproducible; bad options are
// an Error that names the field.
#include "../support/test_support.hpp"
#include "initial_pose_sample.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/initial_pose_tpe.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Geometry>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace ndtcu;
using namespace ndtcu::initial_pose_test;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `trials` proposals of `tpe` against `objective` one at a time (Autoware's loop) and
// returns the proposals.
std::vector<TreeParzenEstimator::Input> optimise(TreeParzenEstimator& tpe, int trials,
                                                 const std::function<double(const TreeParzenEstimator::Input&)>& objective) {
  std::vector<TreeParzenEstimator::Input> out;
  for (int i = 0; i < trials; ++i) {
    out.push_back(tpe.propose());
    tpe.add(out.back(), objective(out.back()));
  }
  return out;
}

// Autoware's 6-D space around (x, y, z, roll, pitch) = 0: x, y N(0, 1 m), z N(0, 0.1 m),
// roll and pitch N(0, 0.1 rad), yaw uniform on the circle; kernels 0.25 m and 2.5 deg.
std::vector<TpeDimension> autoware_space() {
  return {{TpePrior::Normal, 0.0, 1.0, 0.25, false},  {TpePrior::Normal, 0.0, 1.0, 0.25, false},
          {TpePrior::Normal, 0.0, 0.1, 0.0, false},   {TpePrior::Normal, 0.0, 0.1, 0.0, false},
          {TpePrior::Normal, 0.0, 0.1, 0.0, false},   {TpePrior::Uniform, 0.0, kPi, 2.5 * kDeg, true}};
}

// The sample's rough pose: 1.5 m from the truth and the heading 60 deg off.
Pose6 rough_pose(const Pose6& truth) {
  Pose6 around = truth;
  around(0) += 1.2;
  around(1) -= 0.9;
  around(5) = wrap(around(5) + 60.0 * kDeg);
  return around;
}

}  // namespace

TEST_CASE("TreeParzenEstimator's draws are fixed by the seed", "[unit][initial_pose]") {
  const std::vector<TpeDimension> dims = {{TpePrior::Normal, 2.0, 3.0, 0.5, false},
                                          {TpePrior::Uniform, 3.0, kPi, 0.1, true}};
  TpeSettings settings;
  settings.startup_trials = 5;
  settings.seed = 42;
  TreeParzenEstimator a(dims, settings), b(dims, settings);
  settings.seed = 43;
  TreeParzenEstimator c(dims, settings);
  const auto objective = [](const TreeParzenEstimator::Input& x) { return -std::abs(x[0] - 1.0); };
  const auto pa = optimise(a, 30, objective), pb = optimise(b, 30, objective), pc = optimise(c, 30, objective);
  CHECK(pa == pb);  // bit for bit, startup and proposals alike
  CHECK(pa != pc);
  // Golden values: mt19937_64 (fixed by the standard) through the estimator's own
  // transforms, seed 0 (a separate Python mt19937_64 gives the same values). The
  // margin allows the last bits of another libm's log and cos.
  TreeParzenEstimator g(dims, TpeSettings{});
  const TreeParzenEstimator::Input first = g.sample_prior(), second = g.sample_prior();
  CHECK(first[0] == Approx(3.7681364112089275).margin(1e-12));
  CHECK(first[1] == Approx(0.10702686821807594).margin(1e-12));
  CHECK(second[0] == Approx(-1.905317298031652).margin(1e-12));
  CHECK(second[1] == Approx(0.21755290830657703).margin(1e-12));

  // The prior's moments, and the periodic uniform wrapped into [-pi, pi).
  TreeParzenEstimator p(dims, TpeSettings{});
  double sum = 0.0, sum2 = 0.0;
  int wrapped = 0;
  constexpr int n = 20000;
  for (int i = 0; i < n; ++i) {
    const TreeParzenEstimator::Input x = p.sample_prior();
    sum += x[0];
    sum2 += x[0] * x[0];
    REQUIRE(x[1] >= -kPi);
    REQUIRE(x[1] < kPi);
    wrapped += x[1] < 0.0 ? 1 : 0;
  }
  const double mean = sum / n;
  CHECK(mean == Approx(2.0).margin(0.1));
  CHECK(std::sqrt(sum2 / n - mean * mean) == Approx(3.0).margin(0.1));
  // Uniform on [3 - pi, 3 + pi), a full turn: wrapped, half of it lies below 0.
  CHECK(static_cast<double>(wrapped) / n == Approx(0.5).margin(0.02));
}

TEST_CASE("TreeParzenEstimator's proposals gather at the optimum of a 1-D function", "[unit][initial_pose]") {
  TpeSettings settings;
  settings.startup_trials = 20;
  TreeParzenEstimator tpe({{TpePrior::Normal, 0.0, 3.0, 0.25, false}}, settings);
  const double optimum = 1.7;
  const auto objective = [&](const TreeParzenEstimator::Input& x) { return -(x[0] - optimum) * (x[0] - optimum); };
  const auto proposals = optimise(tpe, 80, objective);
  std::vector<double> startup_err, late_err;
  for (std::size_t i = 0; i < 20; ++i) startup_err.push_back(std::abs(proposals[i][0] - optimum));
  for (std::size_t i = 40; i < proposals.size(); ++i) late_err.push_back(std::abs(proposals[i][0] - optimum));
  CAPTURE(median(startup_err), median(late_err));
  CHECK(median(startup_err) > 0.5);  // the prior: N(0, 3) is ~2 from the optimum
  // Near, not at: Autoware's weight of 5 on the bad density keeps proposals off the bad
  // trials, which gather near the optimum too once the good set is full.
  CHECK(median(late_err) < 0.5);
  // The good set holds the best tenth of the trials, at most 10, best first.
  CHECK(tpe.trials().size() == 80);
  CHECK(tpe.good_count() == 8);
  for (std::size_t i = 1; i < tpe.trials().size(); ++i) {
    CHECK(tpe.trials()[i - 1].objective >= tpe.trials()[i].objective);
  }
  CHECK(tpe.log_ratio({optimum}) > tpe.log_ratio({optimum - 3.0}));
}

TEST_CASE("TreeParzenEstimator's proposals gather at the optimum in Autoware's 6-D space, across the yaw's wrap",
          "[unit][initial_pose]") {
  // Autoware's loop with a stand-in for NDT: a start within 1 m and 20 deg of the optimum
  // (its basin) "aligns" to the optimum and scores 1, any other start stays where it is
  // and scores less the farther it is. The optimum's heading is 179 deg, so the basin
  // spans the wrap at +-180.
  const double x0 = 0.6, y0 = -0.8, yaw0 = 179.0 * kDeg;
  const auto in_basin = [&](const TreeParzenEstimator::Input& x) {
    return std::hypot(x[0] - x0, x[1] - y0) < 1.0 && std::abs(wrap(x[5] - yaw0)) < 20.0 * kDeg;
  };
  TpeSettings settings;
  settings.startup_trials = 100;
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    settings.seed = seed;
    TreeParzenEstimator tpe(autoware_space(), settings);
    int startup_hits = 0, proposal_hits = 0, across = 0;
    for (int i = 0; i < 200; ++i) {
      const TreeParzenEstimator::Input x = tpe.propose();
      const bool hit = in_basin(x);
      (i < 100 ? startup_hits : proposal_hits) += hit ? 1 : 0;
      across += hit && x[5] < 0.0 ? 1 : 0;
      if (hit) {
        tpe.add({x0, y0, x[2], x[3], x[4], yaw0}, 1.0);
      } else {
        const double dyaw = wrap(x[5] - yaw0);
        tpe.add(x, -std::hypot(x[0] - x0, x[1] - y0) - std::abs(dyaw));
      }
    }
    CAPTURE(seed, startup_hits, proposal_hits, across);
    // The prior puts a few % of its draws in the basin (11 % of the headings times about
    // a third of the positions: 3 to 5 of 100 for seeds 0-3); the proposals about half
    // (48 to 60 of 100), on both sides of the wrap (18 to 32 at negative yaws).
    CHECK(startup_hits <= 10);
    CHECK(proposal_hits >= 35);
    CHECK(across >= 10);
    CHECK(proposal_hits - across >= 10);
  }
}

TEST_CASE("TreeParzenEstimator's kernel takes yaw the short way", "[unit][initial_pose]") {
  // One good trial at 179.5 deg, nine bad ones half a turn away (-0.5 deg): a candidate
  // 1 deg away across the wrap (-179.5) scores as one 1 deg away on the same side (178.5).
  TreeParzenEstimator w(autoware_space(), TpeSettings{});
  w.add({0, 0, 0, 0, 0, 179.5 * kDeg}, 1.0);
  for (int i = 0; i < 9; ++i) w.add({0, 0, 0, 0, 0, -0.5 * kDeg}, 0.0);
  REQUIRE(w.good_count() == 1);
  const double across = w.log_ratio({0, 0, 0, 0, 0, -179.5 * kDeg});
  const double same_side = w.log_ratio({0, 0, 0, 0, 0, 178.5 * kDeg});
  CHECK(across == Approx(same_side).epsilon(1e-9));
  CHECK(across > w.log_ratio({0, 0, 0, 0, 0, 90.0 * kDeg}));
  // z, roll and pitch are outside the densities (bandwidth 0), as in Autoware.
  CHECK(w.log_ratio({0, 0, 0.5, 0.2, -0.2, 179.5 * kDeg}) == w.log_ratio({0, 0, 0, 0, 0, 179.5 * kDeg}));
}

TEST_CASE("find_initial_pose_tpe finds the sample's scan 3 from 1.5 m and 60 deg off", "[unit][initial_pose]") {
  Sample& s = sample();
  const Pose6 around = rough_pose(s.truth);
  TpeOptions o;  // Autoware's defaults: 200 particles, 100 of them the startup batch
  const InitialPoseResult r = find_initial_pose_tpe(s.aligner, s.scan, around, o);
  WARN("TPE, sample scan 3: " << r.hypotheses_aligned << " particles, " << r.time_ms << " ms (startup "
                              << r.coarse_ms << ", proposals " << r.refine_ms << "), NVTL " << r.best.nvtl
                              << ", rival " << r.ambiguity_nvtl);
  CHECK(r.coarse_hypotheses == 100);
  CHECK(r.refined_hypotheses == 100);
  CHECK(r.hypotheses_aligned == 200);
  CHECK((r.best.pose.head<3>() - s.truth.head<3>()).norm() < 0.1);
  CHECK(rotation_angle(r.best.pose, s.truth) < 1.0 * kDeg);
  // As in Autoware the winner is the best NVTL, but on this scan a particle that used its
  // 30 iterations near the optimum often edged out the converged ones there in the fourth
  // decimal (3.3155 against 3.3154 for seeds 0, 4, 5 of 0-5), and the search's verdict was
  // "not converged" for the place it had found: a converged particle at the winner's place
  // wins instead.
  CHECK(r.best.converged);
  CHECK(r.best.nvtl >= s.aligner.align_from_pose(s.scan, s.truth).nvtl - 0.01);
  CHECK_FALSE(r.ambiguous);
  if (r.has_rival) {
    CHECK(r.ambiguity_nvtl < r.best.nvtl - o.ambiguity_margin);
    CHECK(((r.rival_pose.head<3>() - r.best.pose.head<3>()).norm() > 1.0 ||
           rotation_angle(r.rival_pose, r.best.pose) > 10.0 * kDeg));
  }
  CHECK(r.time_ms >= r.coarse_ms + r.refine_ms);
}

TEST_CASE("find_initial_pose_tpe in batches is reproducible and counts its particles", "[unit][initial_pose]") {
  Sample& s = sample();
  const Pose6 around = rough_pose(s.truth);
  TpeOptions o;
  o.particles = 22;
  o.startup_trials = 12;
  o.proposal_batch = 4;  // batches of 4, 4 and 2
  o.seed = 7;
  const InitialPoseResult a = find_initial_pose_tpe(s.aligner, s.scan, around, o);
  const InitialPoseResult b = find_initial_pose_tpe(s.aligner, s.scan, around, o);
  CHECK(a.coarse_hypotheses == 12);
  CHECK(a.refined_hypotheses == 10);
  CHECK(a.hypotheses_aligned == 22);
  CHECK(a.best.pose == b.best.pose);
  CHECK(a.best.nvtl == b.best.nvtl);
  CHECK(a.has_rival == b.has_rival);
  CHECK(a.rival_pose == b.rival_pose);
  o.seed = 8;
  const InitialPoseResult c = find_initial_pose_tpe(s.aligner, s.scan, around, o);
  CHECK(c.best.pose != a.best.pose);

  // With a pose covariance asked for, the caller attaches it to the winner: the same
  // search, the same pose.
  AlignSettings laplace = cpu_settings();
  laplace.pose_covariance = PoseCovariance::Laplace;
  Aligner with_covariance(laplace, test::on_cpu(2));
  with_covariance.set_target(s.aligner.target());
  o.seed = 7;
  InitialPoseResult d = find_initial_pose_tpe(with_covariance, s.scan, around, o);
  attach_pose_covariance(with_covariance, s.scan, d.best);
  CHECK(d.best.pose == a.best.pose);
  CHECK(d.best.covariance_mode == PoseCovariance::Laplace);
  CHECK(a.best.covariance_mode == PoseCovariance::None);
  CHECK(d.hypotheses_aligned == 22);
}

TEST_CASE("find_initial_pose_tpe and TpeOptions reject bad input, naming it", "[unit][initial_pose]") {
  const auto rejects = [](const std::function<void(TpeOptions&)>& edit, const std::string& field) {
    TpeOptions o;
    edit(o);
    CAPTURE(field);
    CHECK_THROWS_WITH(validate(o), Catch::Contains("TpeOptions::" + field + " = "));
  };
  CHECK_NOTHROW(validate(TpeOptions{}));
  rejects([](TpeOptions& o) { o.particles = 0; }, "particles");
  rejects([](TpeOptions& o) { o.startup_trials = 0; }, "startup_trials");
  rejects([](TpeOptions& o) { o.startup_trials = 201; }, "startup_trials");
  rejects([](TpeOptions& o) { o.stddev_x = -1.0; }, "stddev_x");
  rejects([](TpeOptions& o) { o.stddev_y = std::numeric_limits<double>::quiet_NaN(); }, "stddev_y");
  rejects([](TpeOptions& o) { o.stddev_z = std::numeric_limits<double>::infinity(); }, "stddev_z");
  rejects([](TpeOptions& o) { o.stddev_roll_deg = -0.1; }, "stddev_roll_deg");
  rejects([](TpeOptions& o) { o.stddev_pitch_deg = -0.1; }, "stddev_pitch_deg");
  rejects([](TpeOptions& o) { o.yaw_range_deg = 361.0; }, "yaw_range_deg");
  rejects([](TpeOptions& o) { o.bandwidth_xy = 0.0; }, "bandwidth_xy");
  rejects([](TpeOptions& o) { o.bandwidth_yaw_deg = 0.0; }, "bandwidth_yaw_deg");
  rejects([](TpeOptions& o) { o.good_ratio = 1.0; }, "good_ratio");
  rejects([](TpeOptions& o) { o.max_good = 0; }, "max_good");
  rejects([](TpeOptions& o) { o.candidates = 0; }, "candidates");
  rejects([](TpeOptions& o) { o.bad_weight = -1.0; }, "bad_weight");
  rejects([](TpeOptions& o) { o.proposal_batch = 0; }, "proposal_batch");
  rejects([](TpeOptions& o) { o.ambiguity_distance = -1.0; }, "ambiguity_distance");
  rejects([](TpeOptions& o) { o.ambiguity_angle_deg = -1.0; }, "ambiguity_angle_deg");
  rejects([](TpeOptions& o) { o.ambiguity_margin = -1.0; }, "ambiguity_margin");
  // The bound of --particles, whoever sets it (issue 26: particles_num 2000000000 from an
  // Autoware file ran out of memory).
  TpeOptions many;
  many.particles = 2000000000;
  CHECK_THROWS_WITH(validate(many), Catch::Contains("TpeOptions::particles = 2000000000: must lie in [1, 2000]"));
  // The bound is the search's measured cost (4,000 particles took 96 s on 2 CPU cores, and
  // 100,000 were allowed), and its message says so.
  many.particles = kMaxTpeParticles + 1;
  CHECK_THROWS_WITH(validate(many), Catch::Contains("TpeOptions::particles = 2001: must lie in [1, 2000] (the "
                                                    "search's cost grows with the square of its particles: 2,000 "
                                                    "take about 30 s on 2 CPU cores)"));
  many.particles = kMaxTpeParticles;
  CHECK_NOTHROW(validate(many));
  // More candidates per proposal take fewer particles: their product is bounded.
  many.candidates = 101;
  CHECK_THROWS_WITH(validate(many), Catch::Contains("TpeOptions::candidates = 101: particles x candidates = 2000 x "
                                                    "101 must be at most 200000"));
  many.particles = 200;
  many.candidates = 1000;
  CHECK_NOTHROW(validate(many));
  rejects([](TpeOptions& o) { o.proposal_batch = kMaxTpeParticles + 1; }, "proposal_batch");
  rejects([](TpeOptions& o) { o.candidates = kMaxTpeParticles + 1; }, "candidates");

  // The estimator itself: wrong sizes and values.
  CHECK_THROWS_AS(TreeParzenEstimator({}), Error);
  CHECK_THROWS_WITH(TreeParzenEstimator({{TpePrior::Normal, 0.0, -1.0, 0.0, false}}), Catch::Contains("scale"));
  TreeParzenEstimator tpe({{TpePrior::Normal, 0.0, 1.0, 0.1, false}});
  CHECK_THROWS_WITH(tpe.add({0.0, 1.0}, 0.0), Catch::Contains("2 values"));
  CHECK_THROWS_WITH(tpe.add({std::numeric_limits<double>::quiet_NaN()}, 0.0), Catch::Contains("input[0]"));
  CHECK_THROWS_AS(tpe.log_ratio({0.0}), Error);  // no good set yet

  // The search: no map, a rough pose that is not finite.
  Aligner empty(cpu_settings(), test::on_cpu(2));
  PointCloud scan;
  scan.points.emplace_back(1.f, 2.f, 3.f);
  CHECK_THROWS_WITH(find_initial_pose_tpe(empty, scan, Pose6::Zero()), Catch::Contains("no target map"));
  Pose6 bad = Pose6::Zero();
  bad(5) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(find_initial_pose_tpe(sample().aligner, scan, bad), Catch::Contains("around[5]"));
}
