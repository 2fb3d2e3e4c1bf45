// Aligner::align_batch on the CPU backend: every hypothesis has the bits of align() from
// its guess, whatever the batch size, the order of the hypotheses and the thread count;
// B scans in one batch give each scan's results; bad guesses are errors that name them.
#include "../support/test_support.hpp"
#include "batch_check.hpp"
#include "synthetic.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

using namespace ndtcu;

namespace {

// K guesses within 0.5 m and 5 deg of `centre`, seeded.
std::vector<Pose6> guesses_around(const Pose6& centre, int k, std::uint32_t seed) {
  return test::guesses_around(centre, k, seed, 0.5, 5.0);
}

// An aligner on the CPU backend, Autoware's settings, `threads` workers, `target` set.
Aligner cpu_aligner(const PointCloud& target, int threads) {
  ExecutionOptions execution;
  execution.backend = Backend::Cpu;
  execution.threads = threads;
  Aligner aligner(autoware_preset(), execution);
  aligner.set_target(target);
  return aligner;
}

}  // namespace

TEST_CASE("A CPU batch gives every hypothesis the bits of align()", "[unit][aligner][batch]") {
  const PointCloud target = test::synthetic_scene(61, 30000);
  Pose6 truth;
  truth << 0.3, -0.2, 0.05, 0.01, -0.01, 0.05;
  // 3,000 points (12 chunks of the CPU evaluator) and 500 (2): with 16 threads, a batch of
  // 7 hypotheses of the first spreads each evaluation over the workers, of the second runs
  // the hypotheses one per thread; either way the bits of align().
  for (const int points : {3000, 500}) {
    const PointCloud source = test::moved_by_inverse(test::synthetic_scene(62, points), truth);
    for (LineSearch line : {LineSearch::Fixed, LineSearch::MoreThuente}) {
      for (int threads : {1, 2, 3, 16}) {
        AlignSettings s = autoware_preset();
        ExecutionOptions e;
        e.backend = Backend::Cpu;
        s.line_search = line;
        e.threads = threads;
        s.max_iterations = 20;
        Aligner aligner(s, e);
        aligner.set_target(target);
        const std::vector<Pose6> guesses = guesses_around(truth, 7, 9);
        const std::vector<AlignResult> batch = aligner.align_batch(source, guesses);
        REQUIRE(batch.size() == guesses.size());
        int converged = 0;
        for (std::size_t k = 0; k < guesses.size(); ++k) {
          CAPTURE(points, to_string(line), threads, k);
          const AlignResult single = aligner.align_from_pose(source, guesses[k]);
          test::check_same_bits(batch[k], single);
          CHECK(batch[k].trace.empty());  // not asked for
          converged += batch[k].converged;
        }
        CHECK(converged >= 5);  // real alignments, not first-step stops
        // Reversed order and a sub-batch: the same bits per hypothesis.
        std::vector<Pose6> reversed(guesses.rbegin(), guesses.rend());
        const std::vector<AlignResult> back = aligner.align_batch(source, reversed, BatchOptions{true});
        for (std::size_t k = 0; k < guesses.size(); ++k) {
          test::check_same_bits(back[guesses.size() - 1 - k], batch[k]);
          CHECK(back[guesses.size() - 1 - k].trace.size() == static_cast<std::size_t>(batch[k].iterations));
        }
        const std::vector<AlignResult> two = aligner.align_batch(source, std::vector<Pose6>{guesses[3], guesses[5]});
        test::check_same_bits(two[0], batch[3]);
        test::check_same_bits(two[1], batch[5]);
      }
    }
  }
}

TEST_CASE("A batch of several scans gives each scan's results", "[unit][aligner][batch]") {
  const PointCloud target = test::synthetic_scene(63, 30000);
  Pose6 truth;
  truth << -0.2, 0.3, 0.0, 0.0, 0.01, -0.04;
  std::vector<PointCloud> sources = {test::moved_by_inverse(test::synthetic_scene(64, 2500), truth),
                                     test::moved_by_inverse(test::synthetic_scene(65, 1800), truth), PointCloud{}};
  sources[1].origin = Eigen::Vector3d(0.5, -0.25, 0.0);  // a source with an origin of its own
  for (auto& p : sources[1].points) p -= sources[1].origin.cast<float>();
  Aligner aligner = cpu_aligner(target, 2);
  const std::vector<std::vector<Pose6>> guesses = {guesses_around(truth, 3, 1), guesses_around(truth, 4, 2),
                                                   guesses_around(truth, 2, 3)};
  const auto all = aligner.align_batch(sources, guesses);
  REQUIRE(all.size() == 3);
  for (std::size_t b = 0; b < 2; ++b) {
    const auto each = aligner.align_batch(sources[b], guesses[b]);
    REQUIRE(all[b].size() == guesses[b].size());
    for (std::size_t k = 0; k < each.size(); ++k) test::check_same_bits(all[b][k], each[k]);
  }
  for (const AlignResult& r : all[2]) CHECK(r.reason == StopReason::EmptySource);
}

TEST_CASE("Bad batches are errors that name the hypothesis", "[unit][aligner][batch]") {
  const PointCloud target = test::synthetic_scene(66, 5000);
  const PointCloud source = test::synthetic_scene(67, 500);
  AlignSettings s = autoware_preset();
  ExecutionOptions e;
  e.backend = Backend::Cpu;
  Aligner aligner(s, e);
  CHECK_THROWS_WITH(aligner.align_batch(source, std::vector<Pose6>{Pose6::Zero()}),
                    Catch::Matchers::Contains("no target"));
  aligner.set_target(target);
  CHECK_THROWS_WITH(aligner.align_batch(source, std::vector<Pose6>{}), Catch::Matchers::Contains("empty"));
  std::vector<Pose6> bad(3, Pose6::Zero());
  bad[2](4) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(aligner.align_batch(source, bad),
                    Catch::Matchers::Contains("hypothesis 2") && Catch::Matchers::Contains("pitch"));
  std::vector<Eigen::Matrix4d> matrices(2, Eigen::Matrix4d::Identity());
  matrices[1](0, 0) = 2.0;  // a scale, not a rotation
  CHECK_THROWS_WITH(aligner.align_batch(source, matrices),
                    Catch::Matchers::Contains("hypothesis 1") && Catch::Matchers::Contains("rigid"));
  CHECK_THROWS_WITH(aligner.align_batch(std::vector<PointCloud>{source, source}, std::vector<std::vector<Pose6>>{{Pose6::Zero()}}),
                    Catch::Matchers::Contains("2 sources but 1 guess lists"));
  // A good batch after the errors works.
  CHECK(aligner.align_batch(source, std::vector<Pose6>{Pose6::Zero()}).size() == 1);
}

TEST_CASE("evaluate_batch scores every pose as a batch of one does", "[unit][aligner][batch]") {
  const PointCloud target = test::synthetic_scene(68, 30000);
  const PointCloud source = test::synthetic_scene(69, 2000);
  for (int threads : {1, 3}) {
    Aligner aligner = cpu_aligner(target, threads);
    const std::vector<Pose6> poses = guesses_around(Pose6::Zero(), 9, 12);
    const std::vector<AlignResult> batch = aligner.evaluate_batch(source, poses);
    REQUIRE(batch.size() == poses.size());
    for (std::size_t k = 0; k < poses.size(); ++k) {
      CAPTURE(threads, k);
      const AlignResult one = aligner.evaluate_batch(source, std::vector<Pose6>{poses[k]}).front();
      test::check_same_bits(batch[k], one);
      CHECK(batch[k].iterations == 0);
      CHECK(batch[k].nvtl > 0.0);
      // evaluate() takes a matrix: the same score up to the pose's round trip through it.
      const AlignResult via_matrix = aligner.evaluate(source, pose_to_matrix(poses[k]));
      CHECK(via_matrix.score == Approx(batch[k].score).epsilon(1e-9));
    }
  }
  AlignSettings s = autoware_preset();
  ExecutionOptions e;
  e.backend = Backend::Cpu;
  Aligner aligner(s, e);
  aligner.set_target(target);
  std::vector<Pose6> bad(2, Pose6::Zero());
  bad[1](5) = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(aligner.evaluate_batch(source, bad),
                    Catch::Matchers::Contains("hypothesis 1") && Catch::Matchers::Contains("yaw"));
  CHECK_THROWS_WITH(aligner.evaluate_batch(source, std::vector<Pose6>{}), Catch::Matchers::Contains("empty"));
  CHECK(aligner.evaluate_batch(PointCloud{}, std::vector<Pose6>{Pose6::Zero()}).front().reason ==
        StopReason::EmptySource);
}

TEST_CASE("score_batch gives evaluate_batch's score, NVTL and counts, bit for bit", "[unit][aligner][batch]") {
  const PointCloud target = test::synthetic_scene(68, 30000);
  PointCloud source = test::synthetic_scene(69, 1500);
  Aligner aligner = cpu_aligner(target, 2);
  // Poses near the scene and far from it (no voxel: NVTL 0), at the origin and with a
  // source origin of its own (the pose's rotation moves it).
  std::vector<Pose6> poses = guesses_around(Pose6::Zero(), 12, 14);
  Pose6 away = Pose6::Zero();
  away(0) = 500.0;
  poses.push_back(away);
  for (const Eigen::Vector3d& origin : {Eigen::Vector3d::Zero().eval(), Eigen::Vector3d(0.5, -0.25, 0.125)}) {
    source.origin = origin;
    const std::vector<AlignResult> full = aligner.evaluate_batch(source, poses);
    const std::vector<PoseScore> scores = aligner.score_batch(source, poses);
    REQUIRE(scores.size() == poses.size());
    std::size_t matched = 0;
    for (std::size_t k = 0; k < poses.size(); ++k) {
      CAPTURE(origin.transpose(), k);
      test::check_same_score(scores[k], full[k]);
      matched += scores[k].matched_points > 0;
    }
    CHECK(matched == poses.size() - 1);  // all but the pose 500 m away met the map
    CHECK(scores.back().matched_points == 0);
    CHECK(scores.back().nvtl == 0.0);
  }
  std::vector<Pose6> bad(3, Pose6::Zero());
  bad[2](3) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(aligner.score_batch(source, bad),
                    Catch::Matchers::Contains("score_batch") && Catch::Matchers::Contains("hypothesis 2") &&
                        Catch::Matchers::Contains("roll"));
  CHECK_THROWS_WITH(aligner.score_batch(source, std::vector<Pose6>{}), Catch::Matchers::Contains("empty"));
  const std::vector<PoseScore> empty = aligner.score_batch(PointCloud{}, std::vector<Pose6>{Pose6::Zero()});
  REQUIRE(empty.size() == 1);
  CHECK(empty[0].matched_points == 0);
  CHECK(empty[0].score == 0.0);
}
