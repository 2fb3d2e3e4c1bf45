#pragma once
// The Newton loop of PCL's NormalDistributionsTransform::computeTransformation and
// Autoware's multigrid NDT, backend-independent: it only calls DerivativeEvaluator.
#include "evaluator.hpp"
#include "ndt_step.hpp"

#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>

#include <vector>

namespace ndtcu::detail {

/// What the Newton loop produced (poses map-relative, as the evaluator sees them).
struct OptimizerOutput {
  Pose6 pose = Pose6::Zero();     // final pose
  int iterations = 0;
  StopReason reason = StopReason::MaxIterations;
  Evaluation final;               // evaluation at the final pose, Hessian included
  std::vector<IterationTrace> trace;  // per iteration, map-relative poses
  int evaluations = 0;
};

/// The Newton direction dp for Hessian `hessian` and gradient `gradient` of the score
/// (maximised), as `direction` defines it: H dp = -g by SVD (Pcl), or the same with H's
/// eigenvalues replaced by -|lambda| (SaddleFree). False, with `dp` untouched, when H is
/// singular (its smallest singular value, the smallest |lambda|, not above 6 * machine
/// epsilon * the largest: Eigen's default rank threshold) or the solution is not finite.
bool newton_direction(const Eigen::Matrix<double, 6, 6>& hessian, const Eigen::Matrix<double, 6, 1>& gradient,
                      NewtonDirection direction, Eigen::Matrix<double, 6, 1>& dp);

/// Runs the Newton iterations from `initial` with the step rule, line search and
/// convergence rule of `settings`; the trace is kept when `keep_trace`. The fixed step runs
/// the shared update of kernels/ndt_step.hpp (the device loop's code), More-Thuente PCL's
/// line search here. A prior of `settings` (PosePrior::active) is added to every evaluation
/// (math::add_prior), centred at `prior_center` (map-relative).
OptimizerOutput optimize(DerivativeEvaluator& evaluator, const Pose6& initial, const AlignSettings& settings,
                         bool keep_trace = true, const Pose6& prior_center = Pose6::Zero());

/// The fixed-step rules of `settings`: steps in [epsilon / 2, step_size], its stopping rule.
math::StepRules step_rules(const AlignSettings& settings);
/// StopReason of a math::StepReason.
StopReason to_stop_reason(int reason);
/// Host trace entries of the first `count` shared trace entries.
std::vector<IterationTrace> to_trace(const math::StepTrace* entries, int count);

/// Autoware's count_oscillation over a pose sequence: the longest run of consecutive
/// translation steps whose directions have cosine below -0.9 (zero steps reset the run).
int count_oscillation(const std::vector<Eigen::Vector3d>& positions);

}  // namespace ndtcu::detail
