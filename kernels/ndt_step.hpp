#pragma once
/// \file
/// The fixed-step Newton update, written once for the CPU optimizer and the CUDA device
/// loop: the 6x6 solve, Autoware's step rule (no line search, the Newton step's length
/// clamped to [epsilon / 2, step_size]) and PCL's and Autoware's stopping rules. Each
/// hypothesis of a batch carries its own StepState, so it stops on its own rule. The
/// More-Thuente line search stays on the host (src/ndt/optimizer.cpp) and uses
/// small_step() from here.

#include "ndt_derivatives.hpp"

#include <math.h>

namespace ndtcu::math {

/// Why a hypothesis stopped (StopReason on the host), or kRunning.
enum StepReason : int {
  kRunning = -1,
  kConverged = 0,
  kMaxIterations = 1,
  kNoCorrespondence = 2,
  kSingularHessian = 3,
};

/// A quadratic prior on the pose, added to the NDT score (which is maximised):
///   score -= 1/2 r' L r,  r = pose - center (angle entries wrapped into [-pi, pi]),
///   L = information + 2 c N u u',
/// where `information` is the prior's 6x6 information matrix, N the evaluation's
/// point-voxel pairs (sums[kCorrespondences]), c `longitudinal` and u the unit heading
/// (cos yaw, sin yaw) of the prior pose in x-y. The second term is Autoware's GNSS
/// regularization (regularization_scale_factor c: the squared longitudinal distance to the
/// regularization pose, weighted by the pairs), with u fixed at the prior's heading where
/// Autoware takes the current pose's yaw without differentiating it: the term is then an
/// exact quadratic, its gradient and Hessian exact. Poses are map-relative (the optimizer's).
struct PriorTerms {
  int active;               ///< 0: no prior (the sums are left as they are, bit for bit)
  double information[21];   ///< upper triangle of the information matrix, row by row
  double longitudinal;      ///< c >= 0: weight of the longitudinal term per point-voxel pair
  double heading[2];        ///< u: cos and sin of the prior pose's yaw
};

/// Wraps an angle difference into [-pi, pi].
NDTCU_HD inline double wrap_angle(double a) {
  constexpr double kPi = 3.141592653589793, kTwoPi = 6.283185307179586;
  if (a > kPi || a < -kPi) a -= kTwoPi * floor((a + kPi) / kTwoPi);
  return a;
}

/// Adds the prior `p` centred at `center` to the derivative sums `sums` evaluated at
/// `pose`: its score, gradient and (`with_hessian`) Hessian (PriorTerms). Nothing when the
/// prior is not active. The one copy of the prior's math, for the host loops and the
/// device loop.
NDTCU_HD inline void add_prior(const PriorTerms& p, const double* center, const double* pose, bool with_hessian,
                               double* sums) {
  if (!p.active) return;
  double r[6];
  for (int i = 0; i < 6; ++i) r[i] = i < 3 ? pose[i] - center[i] : wrap_angle(pose[i] - center[i]);
  const double w = 2.0 * p.longitudinal * sums[kCorrespondences];
  double lr[6];  // L r
  for (int i = 0; i < 6; ++i) {
    double s = 0.0;
    for (int j = 0; j < 6; ++j) s += p.information[upper_index(i < j ? i : j, i < j ? j : i)] * r[j];
    lr[i] = s;
  }
  const double along = p.heading[0] * r[0] + p.heading[1] * r[1];  // u' r
  lr[0] += w * p.heading[0] * along;
  lr[1] += w * p.heading[1] * along;
  double quadratic = 0.0;
  for (int i = 0; i < 6; ++i) quadratic += r[i] * lr[i];
  sums[kScore] -= 0.5 * quadratic;
  for (int i = 0; i < 6; ++i) sums[kGradient + i] -= lr[i];
  if (!with_hessian) return;
  for (int i = 0; i < 6; ++i) {
    for (int j = i; j < 6; ++j) sums[kHessian + upper_index(i, j)] -= p.information[upper_index(i, j)];
  }
  sums[kHessian + upper_index(0, 0)] -= w * p.heading[0] * p.heading[0];
  sums[kHessian + upper_index(0, 1)] -= w * p.heading[0] * p.heading[1];
  sums[kHessian + upper_index(1, 1)] -= w * p.heading[1] * p.heading[1];
}

/// The rules of the fixed step, the same for every hypothesis of a batch.
struct StepRules {
  double step_min;      ///< shortest step: epsilon / 2 (PCL's and Autoware's)
  double step_max;      ///< longest step: the step size
  double epsilon;       ///< convergence threshold
  int max_iterations;   ///< Newton iterations at most
  int pcl_convergence;  ///< 1: PCL 1.13's stopping rule, 0: Autoware's
  /// The pose prior, added to every evaluation's sums before the step (add_prior); each
  /// hypothesis has its own centre.
  PriorTerms prior;
};

/// One iteration as the loop records it: the pose after the step, the score there and the
/// step's length.
struct StepTrace {
  double pose[6];
  double score;
  double step;
};

/// One hypothesis's loop state.
struct StepState {
  double pose[6];         ///< the current pose (map-relative)
  double last_step;       ///< the last step's length
  double last_delta[3];   ///< the last step's translation (PCL's rule)
  int iterations;         ///< Newton iterations taken
  int evaluations;        ///< derivative evaluations made
  int reason;             ///< StepReason
};

/// A fresh state at `pose`: no iteration, running.
NDTCU_HD inline StepState start_state(const double* pose) {
  StepState s;
  for (int i = 0; i < 6; ++i) s.pose[i] = pose[i];
  s.last_step = 0.0;
  for (int i = 0; i < 3; ++i) s.last_delta[i] = 0.0;
  s.iterations = 0;
  s.evaluations = 0;
  s.reason = kRunning;
  return s;
}

/// Solves A x = b (6x6, row-major in `a`) by LU with partial pivoting, in place. False when
/// a pivot is not above 6 * machine epsilon * the largest |entry| (or is not a number):
/// the matrix is numerically singular (the rank threshold PCL's SVD solve uses, on the
/// pivots instead of the singular values).
/// Every loop is unrolled and every index a constant (the pivot row is found as a value and
/// rows are swapped by comparing with each candidate), so that on the device the system
/// stays in registers: with the pivot as an index the arrays went to local memory, and a
/// single alignment's step on one thread was a chain of local loads (measured on an H200:
/// BENCHMARK.md, "The step in registers"). The same operations in the same order as the
/// loops written plainly.
NDTCU_HD inline bool solve6(double* a, double* b, double* x) {
  double largest = 0.0;
NDTCU_UNROLL
  for (int k = 0; k < 36; ++k) largest = fmax(largest, fabs(a[k]));
  const double tiny = 6.0 * 2.220446049250313e-16 * largest;
NDTCU_UNROLL
  for (int k = 0; k < 6; ++k) {
    int p = k;
    double pivot = fabs(a[6 * k + k]);  // |a| of row p in column k
NDTCU_UNROLL
    for (int r = k + 1; r < 6; ++r) {
      const double v = fabs(a[6 * r + k]);
      if (v > pivot) {
        p = r;
        pivot = v;
      }
    }
    if (!(pivot > tiny)) return false;
NDTCU_UNROLL
    for (int r = k + 1; r < 6; ++r) {
      if (r != p) continue;
NDTCU_UNROLL
      for (int c = 0; c < 6; ++c) {
        const double t = a[6 * k + c];
        a[6 * k + c] = a[6 * r + c];
        a[6 * r + c] = t;
      }
      const double t = b[k];
      b[k] = b[r];
      b[r] = t;
    }
NDTCU_UNROLL
    for (int r = k + 1; r < 6; ++r) {
      const double f = a[6 * r + k] / a[6 * k + k];
NDTCU_UNROLL
      for (int c = k + 1; c < 6; ++c) a[6 * r + c] = add_rn(a[6 * r + c], -mul_rn(f, a[6 * k + c]));
      b[r] = add_rn(b[r], -mul_rn(f, b[k]));
    }
  }
NDTCU_UNROLL
  for (int k = 5; k >= 0; --k) {
    double s = b[k];
NDTCU_UNROLL
    for (int c = k + 1; c < 6; ++c) s = add_rn(s, -mul_rn(a[6 * k + c], x[c]));
    x[k] = s / a[6 * k + k];
  }
  return true;
}

/// The Newton direction of PCL and Autoware from a derivative sum: H dp = -g, H the upper
/// triangle mirrored, solved by solve6. False when H is numerically singular.
NDTCU_HD inline bool lu_direction(const double* sums, double* dp) {
  double h[36], g[6];
NDTCU_UNROLL
  for (int i = 0; i < 6; ++i) {
    g[i] = -sums[kGradient + i];
NDTCU_UNROLL
    for (int j = 0; j < 6; ++j) h[6 * i + j] = sums[kHessian + upper_index(i < j ? i : j, i < j ? j : i)];
  }
  return solve6(h, g, dp);
}

/// The stopping rule on the last step: PCL 1.13 compares the step's translation, as a float
/// transform, squared, with epsilon itself (rotation ignored); Autoware the step's length
/// with epsilon.
NDTCU_HD inline bool small_step(const StepRules& r, double step_length, const double* delta_translation) {
  if (r.pcl_convergence) {
    const float t0 = static_cast<float>(delta_translation[0]), t1 = static_cast<float>(delta_translation[1]),
                t2 = static_cast<float>(delta_translation[2]);
    // Summed as Eigen's squaredNorm sums three floats (its reduction splits halves).
    const float sq = add_rn(mul_rn(t0, t0), add_rn(mul_rn(t1, t1), mul_rn(t2, t2)));
    return r.epsilon > 0 && static_cast<double>(sq) <= r.epsilon;
  }
  return fabs(step_length) < r.epsilon;
}

/// The trace entry of iteration `i` (from 0) in an array of max_iterations entries (the
/// device loop's, sized before it starts), or null when the trace is not kept. The host
/// loop passes a trace of its own type instead, with its own trace_entry (found by
/// argument-dependent lookup) that grows the trace with the iterations actually run.
NDTCU_HD inline StepTrace* trace_entry(StepTrace* trace, int i) { return trace ? trace + i : nullptr; }

/// Records the iteration a step just completed (`score`: its evaluation's score) into
/// `trace` (see trace_entry; null: not kept) and applies the stopping rules in the host
/// loop's order: a non-finite pose, the small step, the iteration count. True when the
/// loop stops.
template <typename Trace>
NDTCU_HD inline bool finish_iteration(const StepRules& r, double score, StepState& s, Trace trace) {
  bool finite = true;
  for (int k = 0; k < 6; ++k) finite = finite && isfinite(s.pose[k]);
  if (StepTrace* e = trace_entry(trace, s.iterations - 1)) {
    for (int k = 0; k < 6; ++k) e->pose[k] = s.pose[k];
    e->score = score;
    e->step = fabs(s.last_step);
  }
  if (!finite) {
    s.reason = kSingularHessian;
    return true;
  }
  if (small_step(r, s.last_step, s.last_delta)) {
    s.reason = kConverged;
    return true;
  }
  if (s.iterations >= r.max_iterations) {
    s.reason = kMaxIterations;
    return true;
  }
  return false;
}

/// One call per evaluation of the fixed-step loop: `sums` are the derivative sums at
/// s.pose. Finishes the step that led there (stopping rules), then takes the next step:
/// the Newton direction from `direction(sums, dp)` (lu_direction for PCL's solve), reversed
/// when it does not ascend, its length clamped to [step_min, step_max]. Returns true when
/// the loop needs the evaluation at the new s.pose; false when it stopped (s.reason).
/// A direction along which the score does not change is a zero step, recorded as an
/// iteration without an evaluation, as Autoware's computeStepLengthMT returns 0 there.
template <typename Trace, typename Direction>
NDTCU_HD inline bool fixed_step(const double* sums, const StepRules& r, StepState& s, Trace trace,
                                Direction&& direction) {
  s.evaluations += 1;
  // After the first evaluation, every evaluation is at the pose the last step reached.
  if (s.iterations > 0 && finish_iteration(r, sums[kScore], s, trace)) return false;
  for (;;) {
    if (sums[kPointsMatched] == 0.0) {
      s.reason = kNoCorrespondence;
      return false;
    }
    double x[6];
    if (!direction(sums, x)) {
      s.reason = kSingularHessian;
      return false;
    }
    double norm = 0.0;
    for (int i = 0; i < 6; ++i) norm = add_rn(norm, mul_rn(x[i], x[i]));
    norm = sqrt(norm);
    if (norm == 0.0 || isnan(norm)) {
      // PCL stops here too: converged when the step is exactly zero (zero gradient).
      s.reason = norm == 0.0 ? kConverged : kSingularHessian;
      return false;
    }
    double dir[6], d_phi_0 = 0.0;
    for (int i = 0; i < 6; ++i) {
      dir[i] = x[i] / norm;
      d_phi_0 = add_rn(d_phi_0, -mul_rn(sums[kGradient + i], dir[i]));
    }
    double step = 0.0;
    if (d_phi_0 != 0.0) {
      if (d_phi_0 > 0.0) {
        for (int i = 0; i < 6; ++i) dir[i] = -dir[i];  // not an ascent direction of the score
      }
      step = fmax(fmin(norm, r.step_max), r.step_min);
    }
    for (int i = 0; i < 6; ++i) s.pose[i] = add_rn(s.pose[i], mul_rn(dir[i], step));
    for (int i = 0; i < 3; ++i) s.last_delta[i] = mul_rn(dir[i], step);
    s.last_step = step;
    s.iterations += 1;
    if (step != 0.0) return true;
    // No step and no evaluation: the score is unchanged; record it and solve again.
    if (finish_iteration(r, sums[kScore], s, trace)) return false;
  }
}

}  // namespace ndtcu::math
