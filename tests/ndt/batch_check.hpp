#pragma once
// What "the same result" means for a batched alignment: every number a single align()
// returns, bit for bit (the trace only where both kept one).
#include <ndtcu/result.hpp>

#include "../support/test_support.hpp"

#include <cstring>

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

}  // namespace ndtcu::test
