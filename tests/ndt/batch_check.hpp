#pragma once
// What "the same result" means for a batched alignment: every number a single align()
// returns, bit for bit (the trace only where both kept one); and the guesses the batch
// tests start from.
#include <ndtcu/result.hpp>

#include "../support/test_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace ndtcu::test {

/// Checks that `batch` has the bits of `single` (pose, reason, iterations, score, TP,
/// NVTL, Hessian, counts).
inline void check_same_bits(const AlignResult& batch, const AlignResult& single) {
  CAPTURE(batch.pose.transpose(), single.pose.transpose(), batch.iterations, single.iterations);
  CHECK(std::memcmp(batch.pose.data(), single.pose.data(), sizeof(double) * 6) == 0);
  CHECK(batch.iterations == single.iterations);
  CHECK(batch.reason == single.reason);
  CHECK(batch.converged == single.converged);
  CHECK(std::memcmp(&batch.score, &single.score, sizeof(double)) == 0);
  CHECK(std::memcmp(&batch.tp, &single.tp, sizeof(double)) == 0);
  CHECK(std::memcmp(&batch.nvtl, &single.nvtl, sizeof(double)) == 0);
  CHECK(std::memcmp(batch.hessian.data(), single.hessian.data(), sizeof(double) * 36) == 0);
  CHECK(batch.correspondences == single.correspondences);
  CHECK(batch.matched_points == single.matched_points);
  CHECK(batch.backend == single.backend);
}

/// Checks that score_batch's `score` has the bits of evaluate_batch's `full` at its pose.
inline void check_same_score(const PoseScore& score, const AlignResult& full) {
  CHECK(std::memcmp(&score.score, &full.score, sizeof(double)) == 0);
  CHECK(std::memcmp(&score.nvtl, &full.nvtl, sizeof(double)) == 0);
  CHECK(score.correspondences == full.correspondences);
  CHECK(score.matched_points == full.matched_points);
}

/// K guesses around `centre`, seeded: each translation entry uniform within
/// +-`translation` m, each angle within +-`degrees`.
inline std::vector<Pose6> guesses_around(const Pose6& centre, int k, std::uint32_t seed, double translation,
                                         double degrees) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> t(-translation, translation), a(-degrees * M_PI / 180.0, degrees * M_PI / 180.0);
  std::vector<Pose6> out;
  for (int i = 0; i < k; ++i) {
    Pose6 p = centre;
    for (int j = 0; j < 3; ++j) p(j) += t(rng);
    for (int j = 3; j < 6; ++j) p(j) += a(rng);
    out.push_back(p);
  }
  return out;
}

}  // namespace ndtcu::test
