#include "optimizer.hpp"

#include "../nvtx.hpp"

#include <Eigen/Eigenvalues>
#include <Eigen/SVD>

#include <algorithm>
#include <cmath>

namespace ndtcu::detail {

namespace {

using Vector6d = Eigen::Matrix<double, 6, 1>;

// More-Thuente (1994) as PCL 1.13 implements it (ndt.hpp computeStepLengthMT and helpers).
// phi(a) = -score(x + a d) is minimised; psi is the auxiliary function of eq. 2.1.
constexpr double kMu = 1.e-4;  // sufficient decrease constant, eq. 1.1
constexpr double kNu = 0.9;    // curvature condition constant, eq. 1.2
constexpr int kMaxStepIterations = 10;

double psi(double a, double f_a, double f_0, double g_0) { return f_a - f_0 - kMu * g_0 * a; }
double dpsi(double g_a, double g_0) { return g_a - kMu * g_0; }

// Updating Algorithm (cases U1-U3) and Modified Updating Algorithm (cases a-c); returns
// true when the interval has converged.
bool update_interval(double& a_l, double& f_l, double& g_l, double& a_u, double& f_u, double& g_u, double a_t,
                     double f_t, double g_t) {
  if (f_t > f_l) {  // U1 / a
    a_u = a_t;
    f_u = f_t;
    g_u = g_t;
    return false;
  }
  if (g_t * (a_l - a_t) > 0) {  // U2 / b
    a_l = a_t;
    f_l = f_t;
    g_l = g_t;
    return false;
  }
  if (g_t * (a_l - a_t) < 0) {  // U3 / c
    a_u = a_l;
    f_u = f_l;
    g_u = g_l;
    a_l = a_t;
    f_l = f_t;
    g_l = g_t;
    return false;
  }
  return true;
}

// Trial value selection, More-Thuente 1994 pp. 299-300, with the cubic and quadratic
// minimisers of Sun and Yuan 2006 (eqs. 2.4.52, 2.4.56, 2.4.2, 2.4.5), PCL 1.13's version.
double trial_value(double a_l, double f_l, double g_l, double a_u, double f_u, double g_u, double a_t, double f_t,
                   double g_t) {
  if (a_t == a_l && a_t == a_u) return a_t;
  enum { Case1, Case2, Case3, Case4 } condition;
  if (a_t == a_l) {
    condition = Case4;
  } else if (f_t > f_l) {
    condition = Case1;
  } else if (g_t * g_l < 0) {
    condition = Case2;
  } else if (std::fabs(g_t) <= std::fabs(g_l)) {
    condition = Case3;
  } else {
    condition = Case4;
  }
  switch (condition) {
    case Case1: {
      const double z = 3 * (f_t - f_l) / (a_t - a_l) - g_t - g_l;
      const double w = std::sqrt(z * z - g_t * g_l);
      const double a_c = a_l + (a_t - a_l) * (w - g_l - z) / (g_t - g_l + 2 * w);
      const double a_q = a_l - 0.5 * (a_l - a_t) * g_l / (g_l - (f_l - f_t) / (a_l - a_t));
      if (std::fabs(a_c - a_l) < std::fabs(a_q - a_l)) return a_c;
      return 0.5 * (a_q + a_c);
    }
    case Case2: {
      const double z = 3 * (f_t - f_l) / (a_t - a_l) - g_t - g_l;
      const double w = std::sqrt(z * z - g_t * g_l);
      const double a_c = a_l + (a_t - a_l) * (w - g_l - z) / (g_t - g_l + 2 * w);
      const double a_s = a_l - (a_l - a_t) / (g_l - g_t) * g_l;
      if (std::fabs(a_c - a_t) >= std::fabs(a_s - a_t)) return a_c;
      return a_s;
    }
    case Case3: {
      const double z = 3 * (f_t - f_l) / (a_t - a_l) - g_t - g_l;
      const double w = std::sqrt(z * z - g_t * g_l);
      const double a_c = a_l + (a_t - a_l) * (w - g_l - z) / (g_t - g_l + 2 * w);
      const double a_s = a_l - (a_l - a_t) / (g_l - g_t) * g_l;
      const double a_t_next = std::fabs(a_c - a_t) < std::fabs(a_s - a_t) ? a_c : a_s;
      // 0.66: More-Thuente's safeguard keeping the trial inside the interval.
      if (a_t > a_l) return std::min(a_t + 0.66 * (a_u - a_t), a_t_next);
      return std::max(a_t + 0.66 * (a_u - a_t), a_t_next);
    }
    case Case4:
    default: {
      const double z = 3 * (f_t - f_u) / (a_t - a_u) - g_t - g_u;
      const double w = std::sqrt(z * z - g_t * g_u);
      return a_u + (a_t - a_u) * (w - g_u - z) / (g_t - g_u + 2 * w);
    }
  }
}

struct StepContext {
  DerivativeEvaluator& evaluator;
  Evaluation& current;  // evaluation at the last trial: updated in place
  int& evaluations;
};

// PCL's computeStepLengthMT. `dir` is the unit Newton direction (reversed when it is not
// a descent direction of phi), `step_init` the Newton step's length. Leaves `current` at
// the returned step, Hessian included.
double more_thuente(StepContext& ctx, const Pose6& x, Vector6d& dir, double step_init, double step_max,
                    double step_min) {
  const double phi_0 = -ctx.current.score;
  double d_phi_0 = -(ctx.current.gradient.dot(dir));
  if (d_phi_0 >= 0) {
    if (d_phi_0 == 0) return 0;  // not a descent direction, and no better one
    d_phi_0 *= -1;
    dir *= -1;
  }
  int step_iterations = 0;
  double a_l = 0, a_u = 0;
  double f_l = psi(a_l, phi_0, phi_0, d_phi_0);
  double g_l = dpsi(d_phi_0, d_phi_0);
  double f_u = psi(a_u, phi_0, phi_0, d_phi_0);
  double g_u = dpsi(d_phi_0, d_phi_0);
  bool interval_converged = (step_max - step_min) < 0, open_interval = true;

  double a_t = step_init;
  a_t = std::min(a_t, step_max);
  a_t = std::max(a_t, step_min);
  Pose6 x_t = x + dir * a_t;
  ctx.current = ctx.evaluator.evaluate(x_t, true);
  ++ctx.evaluations;
  double phi_t = -ctx.current.score;
  double d_phi_t = -(ctx.current.gradient.dot(dir));
  double psi_t = psi(a_t, phi_t, phi_0, d_phi_0);
  double d_psi_t = dpsi(d_phi_t, d_phi_0);

  while (!interval_converged && step_iterations < kMaxStepIterations &&
         !(psi_t <= 0 /* sufficient decrease */ && d_phi_t <= -kNu * d_phi_0 /* curvature */)) {
    if (open_interval) {
      a_t = trial_value(a_l, f_l, g_l, a_u, f_u, g_u, a_t, psi_t, d_psi_t);
    } else {
      a_t = trial_value(a_l, f_l, g_l, a_u, f_u, g_u, a_t, phi_t, d_phi_t);
    }
    a_t = std::min(a_t, step_max);
    a_t = std::max(a_t, step_min);
    x_t = x + dir * a_t;
    ctx.current = ctx.evaluator.evaluate(x_t, false);
    ++ctx.evaluations;
    phi_t = -ctx.current.score;
    d_phi_t = -(ctx.current.gradient.dot(dir));
    psi_t = psi(a_t, phi_t, phi_0, d_phi_0);
    d_psi_t = dpsi(d_phi_t, d_phi_0);
    if (open_interval && (psi_t <= 0 && d_psi_t >= 0)) {
      open_interval = false;
      f_l += phi_0 - kMu * d_phi_0 * a_l;  // psi -> phi
      g_l += kMu * d_phi_0;
      f_u += phi_0 - kMu * d_phi_0 * a_u;
      g_u += kMu * d_phi_0;
    }
    if (open_interval) {
      interval_converged = update_interval(a_l, f_l, g_l, a_u, f_u, g_u, a_t, psi_t, d_psi_t);
    } else {
      interval_converged = update_interval(a_l, f_l, g_l, a_u, f_u, g_u, a_t, phi_t, d_phi_t);
    }
    ++step_iterations;
  }
  // The trials after the first skip the Hessian; PCL then computes it at the final trial.
  if (step_iterations) {
    ctx.current = ctx.evaluator.evaluate(x_t, true);
    ++ctx.evaluations;
  }
  return a_t;
}

}  // namespace

bool newton_direction(const Eigen::Matrix<double, 6, 6>& hessian, const Vector6d& gradient, NewtonDirection direction,
                      Vector6d& dp) {
  if (!hessian.allFinite() || !gradient.allFinite()) return false;
  if (direction == NewtonDirection::SaddleFree) {
    // H = V diag(lambda) V'; the singular values of a symmetric matrix are |lambda|.
    const Eigen::SelfAdjointEigenSolver<Eigen::Matrix<double, 6, 6>> eig(hessian);
    if (eig.info() != Eigen::Success) return false;
    const Vector6d magnitude = eig.eigenvalues().cwiseAbs();
    const double largest = magnitude.maxCoeff();
    if (!(largest > 0.0) || !(magnitude.minCoeff() > 6.0 * Eigen::NumTraits<double>::epsilon() * largest)) return false;
    // dp = -(V diag(-|lambda|) V')^-1 g = V diag(1 / |lambda|) V' g: an ascent direction.
    const auto& v = eig.eigenvectors();
    const Vector6d step = v * (v.transpose() * gradient).cwiseQuotient(magnitude);
    if (!step.allFinite()) return false;
    dp = step;
    return true;
  }
  // PCL (line 23 of Magnusson's Algorithm 2): H dp = -g by SVD, with the rank as Eigen's
  // default threshold defines it: singular values above 6 * machine epsilon * the largest.
  const Eigen::JacobiSVD<Eigen::Matrix<double, 6, 6>> sv(hessian, Eigen::ComputeFullU | Eigen::ComputeFullV);
  const auto& sigma = sv.singularValues();
  const double threshold = 6.0 * Eigen::NumTraits<double>::epsilon() * sigma(0);
  if (!(sigma(0) > 0.0) || !(sigma(5) > threshold)) return false;
  const Vector6d step = sv.solve(-gradient);
  if (!step.allFinite()) return false;
  dp = step;
  return true;
}

math::StepRules step_rules(const AlignSettings& s) {
  math::StepRules r{};
  r.step_min = s.epsilon / 2;  // PCL and Autoware: transformation_epsilon / 2
  r.step_max = s.step_size;
  r.epsilon = s.epsilon;
  r.max_iterations = s.max_iterations;
  r.pcl_convergence = s.convergence == ConvergenceRule::Pcl ? 1 : 0;
  r.prior = math::PriorTerms{};
  if (s.prior.active()) {
    r.prior.active = 1;
    for (int i = 0; i < 6; ++i) {
      for (int j = i; j < 6; ++j) r.prior.information[math::upper_index(i, j)] = s.prior.information(i, j);
    }
    r.prior.longitudinal = s.prior.regularization_scale_factor;
    r.prior.heading[0] = std::cos(s.prior.pose(5));
    r.prior.heading[1] = std::sin(s.prior.pose(5));
  }
  return r;
}

namespace {

// An evaluator's sums with the pose prior added (math::add_prior), for the host loops.
class PriorEvaluator final : public DerivativeEvaluator {
 public:
  PriorEvaluator(DerivativeEvaluator& inner, const math::PriorTerms& prior, const Pose6& center)
      : inner_(inner), prior_(prior) {
    for (int i = 0; i < 6; ++i) center_[i] = center(i);
  }
  math::DerivativeSums evaluate_sums(const Pose6& pose, bool with_hessian) override {
    math::DerivativeSums sums = inner_.evaluate_sums(pose, with_hessian);
    const double p[6] = {pose(0), pose(1), pose(2), pose(3), pose(4), pose(5)};
    math::add_prior(prior_, center_, p, with_hessian, sums.v);
    return sums;
  }

 private:
  DerivativeEvaluator& inner_;
  const math::PriorTerms& prior_;
  double center_[6];
};

Pose6 to_pose(const double* p) {
  Pose6 out;
  for (int i = 0; i < 6; ++i) out(i) = p[i];
  return out;
}

// The host loop's trace: it grows with the iterations actually run (math::fixed_step asks
// for entry i through trace_entry, found here by argument-dependent lookup), so
// max_iterations sizes nothing.
struct GrowingTrace {
  std::vector<math::StepTrace>* entries;  // null: not kept
};

math::StepTrace* trace_entry(GrowingTrace trace, int i) {
  if (!trace.entries || i < 0) return nullptr;
  const auto n = static_cast<std::size_t>(i) + 1;
  if (trace.entries->size() < n) trace.entries->resize(n);
  return &(*trace.entries)[n - 1];
}

// Autoware's loop with use_line_search = false: the shared fixed-step update
// (kernels/ndt_step.hpp), the same code the device loop runs, with PCL's direction by LU
// there; the saddle-free direction is taken here from H's eigen-decomposition.
OptimizerOutput optimize_fixed_step(DerivativeEvaluator& evaluator, const Pose6& initial, const AlignSettings& s,
                                    const math::StepRules& rules, bool keep_trace) {
  const double start[6] = {initial(0), initial(1), initial(2), initial(3), initial(4), initial(5)};
  math::StepState state = math::start_state(start);
  std::vector<math::StepTrace> trace;
  auto direction = [&s](const double* sums, double* dp) {
    if (s.newton_direction == NewtonDirection::Pcl) return math::lu_direction(sums, dp);
    const Evaluation e = to_evaluation(*reinterpret_cast<const math::DerivativeSums*>(sums));
    Vector6d step;
    if (!newton_direction(e.hessian, e.gradient, s.newton_direction, step)) return false;
    for (int i = 0; i < 6; ++i) dp[i] = step(i);
    return true;
  };
  math::DerivativeSums sums = evaluator.evaluate_sums(initial, true);
  for (;;) {
    NDTCU_NVTX_RANGE("iteration");
    if (!math::fixed_step(sums.v, rules, state, GrowingTrace{keep_trace ? &trace : nullptr}, direction)) break;
    sums = evaluator.evaluate_sums(to_pose(state.pose), true);
  }
  OptimizerOutput out;
  out.pose = to_pose(state.pose);
  out.iterations = state.iterations;
  out.evaluations = state.evaluations;
  out.reason = to_stop_reason(state.reason);
  out.final = to_evaluation(sums);
  if (keep_trace) out.trace = to_trace(trace.data(), state.iterations);
  return out;
}

}  // namespace

StopReason to_stop_reason(int reason) {
  switch (reason) {
    case math::kConverged: return StopReason::Converged;
    case math::kNoCorrespondence: return StopReason::NoCorrespondence;
    case math::kSingularHessian: return StopReason::SingularHessian;
    default: return StopReason::MaxIterations;
  }
}

std::vector<IterationTrace> to_trace(const math::StepTrace* entries, int count) {
  std::vector<IterationTrace> out(static_cast<std::size_t>(std::max(count, 0)));
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].pose = to_pose(entries[i].pose);
    out[i].score = entries[i].score;
    out[i].step_length = entries[i].step;
  }
  return out;
}

OptimizerOutput optimize(DerivativeEvaluator& inner, const Pose6& initial, const AlignSettings& s, bool keep_trace,
                         const Pose6& prior_center) {
  const math::StepRules rules = step_rules(s);
  PriorEvaluator with_prior(inner, rules.prior, prior_center);
  DerivativeEvaluator& evaluator = rules.prior.active ? static_cast<DerivativeEvaluator&>(with_prior) : inner;
  if (s.line_search == LineSearch::Fixed) return optimize_fixed_step(evaluator, initial, s, rules, keep_trace);
  // PCL's loop with More-Thuente (host only): SVD solve, the line search, the shared
  // stopping rule.
  OptimizerOutput out;
  out.pose = initial;
  Evaluation current = evaluator.evaluate(initial, true);
  out.evaluations = 1;
  StepContext ctx{evaluator, current, out.evaluations};

  for (;;) {
    NDTCU_NVTX_RANGE("iteration");
    if (current.matched_points == 0) {
      out.reason = StopReason::NoCorrespondence;
      break;
    }
    NDTCU_NVTX_RANGE("solve");
    Vector6d delta;
    if (!newton_direction(current.hessian, current.gradient, s.newton_direction, delta)) {
      out.reason = StopReason::SingularHessian;
      break;
    }
    double delta_norm = delta.norm();
    if (delta_norm == 0 || std::isnan(delta_norm)) {
      // PCL stops here too: converged when the step is exactly zero (zero gradient).
      out.reason = delta_norm == 0 ? StopReason::Converged : StopReason::SingularHessian;
      break;
    }
    delta /= delta_norm;
    const double step = more_thuente(ctx, out.pose, delta, delta_norm, rules.step_max, rules.step_min);
    delta *= step;
    out.pose += delta;
    ++out.iterations;
    if (keep_trace) out.trace.push_back({out.pose, current.score, std::fabs(step)});
    if (!out.pose.allFinite()) {
      out.reason = StopReason::SingularHessian;
      break;
    }
    const double translation[3] = {delta(0), delta(1), delta(2)};
    if (math::small_step(rules, step, translation)) {
      out.reason = StopReason::Converged;
      break;
    }
    if (out.iterations >= s.max_iterations) {
      out.reason = StopReason::MaxIterations;
      break;
    }
  }
  out.final = current;
  return out;
}

int count_oscillation(const std::vector<Eigen::Vector3d>& positions) {
  constexpr double kInversionCosine = -0.9;  // Autoware's inversion_vector_threshold
  int run = 0, longest = 0;
  for (std::size_t i = 2; i < positions.size(); ++i) {
    const Eigen::Vector3d step = positions[i] - positions[i - 1];
    const Eigen::Vector3d prev = positions[i - 1] - positions[i - 2];
    if (step.norm() == 0.0 || prev.norm() == 0.0) {
      run = 0;
      continue;
    }
    run = step.normalized().dot(prev.normalized()) < kInversionCosine ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

}  // namespace ndtcu::detail
