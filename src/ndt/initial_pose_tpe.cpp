// Initial pose search by Autoware's tree-structured Parzen estimator (see
// include/ndtcu/initial_pose_tpe.hpp). The method follows autoware_ndt_scan_matcher's
// NDTScanMatcher::align_pose and autoware_localization_util's
// TreeStructuredParzenEstimator; the startup particles run as one batch.
#include <ndtcu/error.hpp>
#include <ndtcu/initial_pose_tpe.hpp>

#include "../log.hpp"
#include "../nvtx.hpp"
#include "pose_search.hpp"

#include <fmt/format.h>

#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace ndtcu {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;
// log(2 pi), the normal density's constant.
constexpr double kLog2Pi = 1.8378770664093454836;

// An angle brought into [-pi, pi), the interval Autoware's yaw is drawn from and its kernel
// differences are wrapped into.
double wrap_angle(double a) {
  a = std::remainder(a, 2.0 * kPi);  // [-pi, pi]
  return a >= kPi ? a - 2.0 * kPi : a;
}

// a ranks above b: a higher objective; NaN ranks below every number.
bool ranks_above(double a, double b) {
  if (std::isnan(a)) return false;
  return std::isnan(b) || a > b;
}

// log(sum exp(v)) without overflow; -inf for an empty list or all -inf.
double log_sum_exp(const std::vector<double>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : v) m = std::max(m, x);
  if (!std::isfinite(m)) return m;
  double s = 0.0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// TreeParzenEstimator

TreeParzenEstimator::TreeParzenEstimator(std::vector<TpeDimension> dimensions, const TpeSettings& settings)
    : dims_(std::move(dimensions)), settings_(settings), engine_(settings.seed) {
  if (dims_.empty()) throw Error("TreeParzenEstimator: no dimensions");
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    const TpeDimension& dim = dims_[d];
    if (!std::isfinite(dim.center)) {
      throw Error(fmt::format("TreeParzenEstimator: dimension {} center = {} is not finite", d, dim.center));
    }
    if (!(std::isfinite(dim.scale) && dim.scale >= 0.0)) {
      throw Error(fmt::format("TreeParzenEstimator: dimension {} scale = {} must be finite and >= 0", d, dim.scale));
    }
    if (!(std::isfinite(dim.bandwidth) && dim.bandwidth >= 0.0)) {
      throw Error(fmt::format("TreeParzenEstimator: dimension {} bandwidth = {} must be finite and >= 0 (0: left out)",
                              d, dim.bandwidth));
    }
  }
  if (!(settings_.good_ratio > 0.0 && settings_.good_ratio < 1.0)) {
    throw Error(fmt::format("TpeSettings::good_ratio = {}: must lie in (0, 1)", settings_.good_ratio));
  }
  if (settings_.max_good < 1) throw Error("TpeSettings::max_good = 0: must be >= 1");
  if (settings_.candidates < 1) throw Error("TpeSettings::candidates = 0: must be >= 1");
  if (!(std::isfinite(settings_.bad_weight) && settings_.bad_weight >= 0.0)) {
    throw Error(fmt::format("TpeSettings::bad_weight = {}: must be finite and >= 0", settings_.bad_weight));
  }
}

// 53 random bits in [0, 1): every double of the form k / 2^53, the same on every platform.
double TreeParzenEstimator::uniform01() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

// Box-Muller (the cosine branch; the sine one is dropped so every draw takes exactly two
// engine values). 1 - u lies in (0, 1], so the logarithm is finite.
double TreeParzenEstimator::normal01() {
  const double u1 = 1.0 - uniform01();
  const double u2 = uniform01();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

TreeParzenEstimator::Input TreeParzenEstimator::sample_prior() {
  Input x(dims_.size());
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    const TpeDimension& dim = dims_[d];
    double v = dim.prior == TpePrior::Normal ? dim.center + dim.scale * normal01()
                                             : dim.center + dim.scale * (2.0 * uniform01() - 1.0);
    x[d] = dim.periodic ? wrap_angle(v) : v;
  }
  return x;
}

void TreeParzenEstimator::add(const Input& input, double objective) {
  if (input.size() != dims_.size()) {
    throw Error(fmt::format("TreeParzenEstimator::add: input has {} values, the estimator {} dimensions", input.size(),
                            dims_.size()));
  }
  for (std::size_t d = 0; d < input.size(); ++d) {
    if (!std::isfinite(input[d])) {
      throw Error(fmt::format("TreeParzenEstimator::add: input[{}] = {} is not finite", d, input[d]));
    }
  }
  // Kept sorted best first; a new trial goes after those it does not rank above (a stable
  // order: Autoware re-sorts with std::sort, whose order of equal scores is unspecified).
  const auto at = std::find_if(trials_.begin(), trials_.end(),
                               [&](const Trial& t) { return ranks_above(objective, t.objective); });
  trials_.insert(at, Trial{input, objective});
}

std::size_t TreeParzenEstimator::good_count() const noexcept {
  const auto share = static_cast<std::size_t>(static_cast<double>(trials_.size()) * settings_.good_ratio);
  return std::min(settings_.max_good, share);
}

// The kernel's log density at x for a trial at mu: a product of 1-D normals of the
// dimensions with a bandwidth (Autoware's log_gaussian_pdf).
double TreeParzenEstimator::log_kernel(const Input& x, const Input& mu) const {
  double r = 0.0;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    const double h = dims_[d].bandwidth;
    if (h <= 0.0) continue;
    const double diff = dims_[d].periodic ? wrap_angle(x[d] - mu[d]) : x[d] - mu[d];
    r += -0.5 * kLog2Pi - std::log(h) - diff * diff / (2.0 * h * h);
  }
  return r;
}

double TreeParzenEstimator::log_ratio(const Input& x) const {
  const std::size_t n = trials_.size(), good = good_count();
  if (good == 0) throw Error("TreeParzenEstimator::log_ratio: the good set is empty (too few trials)");
  std::vector<double> good_logs, bad_logs;
  good_logs.reserve(good);
  bad_logs.reserve(n - good);
  const double log_w_good = -std::log(static_cast<double>(good));
  const double log_w_bad = -std::log(static_cast<double>(n - good));
  for (std::size_t i = 0; i < n; ++i) {
    const double lp = log_kernel(x, trials_[i].input);
    if (i < good) good_logs.push_back(lp + log_w_good);
    else bad_logs.push_back(lp + log_w_bad);
  }
  // Autoware's ranking: above - 5 * below (its comment calls the weight a heuristic that
  // pushes proposals away from the bad trials harder than the plain ratio would).
  return log_sum_exp(good_logs) - settings_.bad_weight * log_sum_exp(bad_logs);
}

TreeParzenEstimator::Input TreeParzenEstimator::propose() {
  if (trials_.size() < settings_.startup_trials || good_count() == 0) return sample_prior();
  Input best;
  double best_ratio = -std::numeric_limits<double>::infinity();
  for (std::size_t c = 0; c < settings_.candidates; ++c) {
    Input x = sample_prior();
    const double r = log_ratio(x);
    // The first candidate always counts, so a ratio of -inf (every kernel underflowed)
    // still proposes a prior draw.
    if (c == 0 || r > best_ratio) {
      best_ratio = r;
      best = std::move(x);
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------
// The initial pose search

void validate(const TpeOptions& o) {
  const auto fail = [](const std::string& field, double value, const char* rule) {
    throw Error(fmt::format("TpeOptions::{} = {}: {}", field, value, rule));
  };
  const auto non_negative = [&](const char* field, double v, const char* unit) {
    if (!(std::isfinite(v) && v >= 0.0)) fail(field, v, unit);
  };
  // The bound's reason in its message: the search's cost grows with the square of the
  // particles (initial_pose_tpe.hpp, kMaxTpeParticles).
  const std::string up_to = fmt::format("must lie in [1, {}] (the search's cost grows with the square of its "
                                        "particles: 2,000 take about 30 s on 2 CPU cores)",
                                        kMaxTpeParticles);
  if (o.particles < 1 || o.particles > kMaxTpeParticles) fail("particles", o.particles, up_to.c_str());
  if (o.startup_trials < 1 || o.startup_trials > o.particles) {
    fail("startup_trials", o.startup_trials, fmt::format("must lie in [1, particles = {}]", o.particles).c_str());
  }
  non_negative("stddev_x", o.stddev_x, "must be finite and >= 0 (m)");
  non_negative("stddev_y", o.stddev_y, "must be finite and >= 0 (m)");
  non_negative("stddev_z", o.stddev_z, "must be finite and >= 0 (m)");
  non_negative("stddev_roll_deg", o.stddev_roll_deg, "must be finite and >= 0 (deg)");
  non_negative("stddev_pitch_deg", o.stddev_pitch_deg, "must be finite and >= 0 (deg)");
  if (!(o.yaw_range_deg >= 0.0 && o.yaw_range_deg <= 360.0)) {
    fail("yaw_range_deg", o.yaw_range_deg, "must lie in [0, 360] (deg; 360 = full circle)");
  }
  if (!(std::isfinite(o.bandwidth_xy) && o.bandwidth_xy > 0.0)) {
    fail("bandwidth_xy", o.bandwidth_xy, "must be finite and > 0 (m)");
  }
  if (!(std::isfinite(o.bandwidth_yaw_deg) && o.bandwidth_yaw_deg > 0.0)) {
    fail("bandwidth_yaw_deg", o.bandwidth_yaw_deg, "must be finite and > 0 (deg)");
  }
  if (!(o.good_ratio > 0.0 && o.good_ratio < 1.0)) fail("good_ratio", o.good_ratio, "must lie in (0, 1)");
  if (o.max_good < 1) fail("max_good", o.max_good, "must be >= 1");
  if (o.candidates < 1) fail("candidates", o.candidates, "must be >= 1");
  if (static_cast<long long>(o.candidates) * o.particles > kMaxTpeCandidateDraws) {
    fail("candidates", o.candidates,
         fmt::format("particles x candidates = {} x {} must be at most {} (each proposal ranks its candidates by "
                     "kernels at every particle before it: fewer particles take more candidates)",
                     o.particles, o.candidates, kMaxTpeCandidateDraws)
             .c_str());
  }
  non_negative("bad_weight", o.bad_weight, "must be finite and >= 0");
  if (o.proposal_batch < 1 || o.proposal_batch > kMaxTpeParticles) {
    fail("proposal_batch", o.proposal_batch,
         fmt::format("must lie in [1, {}] (1: Autoware's sequential search)", kMaxTpeParticles).c_str());
  }
  non_negative("ambiguity_distance", o.ambiguity_distance, "must be finite and >= 0 (m)");
  non_negative("ambiguity_angle_deg", o.ambiguity_angle_deg, "must be finite and >= 0 (deg)");
  non_negative("ambiguity_margin", o.ambiguity_margin, "must be finite and >= 0 (NVTL)");
}

namespace {

// The estimator's dimensions, in Autoware's order.
enum : std::size_t { kX, kY, kZ, kRoll, kPitch, kYaw, kDims };

// Roll, pitch, yaw of a rotation in the heading convention R = Rz(yaw) Ry(pitch) Rx(roll)
// (tf2's getRPY, which Autoware feeds its estimator with); ndtcu's Pose6 composes the
// other way round (Rx Ry Rz), so the two differ once the pose is tilted.
Eigen::Vector3d heading_rpy(const Eigen::Matrix3d& r) {
  const double pitch = std::asin(std::clamp(-r(2, 0), -1.0, 1.0));
  return {std::atan2(r(2, 1), r(2, 2)), pitch, std::atan2(r(1, 0), r(0, 0))};
}

// The Pose6 of an estimator input.
Pose6 input_to_pose(const TreeParzenEstimator::Input& x) {
  Eigen::Matrix4d t = Eigen::Matrix4d::Identity();
  t.topLeftCorner<3, 3>() = (Eigen::AngleAxisd(x[kYaw], Eigen::Vector3d::UnitZ()) *
                             Eigen::AngleAxisd(x[kPitch], Eigen::Vector3d::UnitY()) *
                             Eigen::AngleAxisd(x[kRoll], Eigen::Vector3d::UnitX()))
                                .toRotationMatrix();
  t.topRightCorner<3, 1>() << x[kX], x[kY], x[kZ];
  return matrix_to_pose(t);
}

// The estimator input of a pose (what Autoware adds: the aligned pose's position and rpy).
TreeParzenEstimator::Input pose_to_input(const Pose6& p) {
  const Eigen::Vector3d rpy = heading_rpy(pose_to_matrix(p).topLeftCorner<3, 3>());
  return {p(0), p(1), p(2), rpy(0), rpy(1), rpy(2)};
}

}  // namespace

InitialPoseResult find_initial_pose_tpe(Aligner& aligner, PointCloudView scan, const Pose6& around,
                                        const TpeOptions& o) {
  NDTCU_NVTX_RANGE("find_initial_pose_tpe");
  const auto t0 = std::chrono::steady_clock::now();
  validate(o);
  if (!aligner.has_target()) {
    throw Error("TPE initial pose search: the aligner has no target map (call Aligner::set_target first)");
  }
  for (int i = 0; i < 6; ++i) {
    if (!std::isfinite(around(i))) {
      throw Error(fmt::format("TPE initial pose search: around[{}] = {} is not finite (x y z roll pitch yaw)", i,
                              around(i)));
    }
  }

  // The prior around the rough pose, in the estimator's (heading) convention.
  const TreeParzenEstimator::Input mean = pose_to_input(around);
  std::vector<TpeDimension> dims(kDims);
  dims[kX] = {TpePrior::Normal, mean[kX], o.stddev_x, o.bandwidth_xy, false};
  dims[kY] = {TpePrior::Normal, mean[kY], o.stddev_y, o.bandwidth_xy, false};
  // Autoware's kernel leaves z, roll and pitch out ("experimentally better"): they are
  // near the rough pose's anyway, and the aligner settles them.
  dims[kZ] = {TpePrior::Normal, mean[kZ], o.stddev_z, 0.0, false};
  dims[kRoll] = {TpePrior::Normal, mean[kRoll], o.stddev_roll_deg * kDeg, 0.0, false};
  dims[kPitch] = {TpePrior::Normal, mean[kPitch], o.stddev_pitch_deg * kDeg, 0.0, false};
  dims[kYaw] = {TpePrior::Uniform, mean[kYaw], 0.5 * o.yaw_range_deg * kDeg, o.bandwidth_yaw_deg * kDeg, true};
  TpeSettings ts;
  ts.startup_trials = static_cast<std::size_t>(o.startup_trials);
  ts.good_ratio = o.good_ratio;
  ts.max_good = static_cast<std::size_t>(o.max_good);
  ts.candidates = static_cast<std::size_t>(o.candidates);
  ts.bad_weight = o.bad_weight;
  ts.seed = o.seed;
  TreeParzenEstimator tpe(std::move(dims), ts);

  // Each particle with the aligner's own settings, as Autoware aligns them.
  const BatchOptions batch{};
  std::vector<AlignResult> results;
  results.reserve(static_cast<std::size_t>(o.particles));
  const auto run = [&](std::size_t count) {
    std::vector<Pose6> guesses;
    guesses.reserve(count);
    for (std::size_t k = 0; k < count; ++k) guesses.push_back(input_to_pose(tpe.propose()));
    std::vector<AlignResult> aligned = aligner.align_batch(scan, guesses, batch);
    // The history learns where each particle ended and its transform probability
    // (Autoware's add_trial of the aligned pose, not the sampled one).
    for (std::size_t k = 0; k < count; ++k) {
      tpe.add(pose_to_input(aligned[k].pose), aligned[k].tp);
      results.push_back(std::move(aligned[k]));
    }
  };

  InitialPoseResult result;
  // Startup: the proposals depend on no history (prior draws), so one batch gives the
  // particles Autoware aligns one by one.
  auto t = std::chrono::steady_clock::now();
  run(static_cast<std::size_t>(o.startup_trials));
  result.coarse_ms = detail::ms_since(t);
  result.coarse_hypotheses = static_cast<std::size_t>(o.startup_trials);

  t = std::chrono::steady_clock::now();
  const auto total = static_cast<std::size_t>(o.particles);
  while (results.size() < total) {
    run(std::min(static_cast<std::size_t>(o.proposal_batch), total - results.size()));
  }
  result.refine_ms = detail::ms_since(t);
  result.refined_hypotheses = total - result.coarse_hypotheses;
  result.hypotheses_aligned = total;

  // Winner: the highest NVTL (Autoware's best particle score) ...
  std::size_t winner = 0;
  for (std::size_t k = 1; k < results.size(); ++k) {
    if (detail::nvtl_ranks_above(results[k], results[winner])) winner = k;
  }
  // ... but a particle that ran out of iterations does not win over one that converged at
  // the same place (not distinct from it): it was still moving, and edging out the
  // converged ones in the fourth decimal of NVTL made the search's verdict "not converged"
  // for a place it had found (500 particles on the sample: not converged, NVTL 0.0005
  // above a converged particle there; 300: found).
  if (!results[winner].converged) {
    std::optional<std::size_t> settled;
    for (std::size_t k = 0; k < results.size(); ++k) {
      if (!results[k].converged || results[k].matched_points == 0 ||
          detail::distinct_poses(results[k].pose, results[winner].pose, o.ambiguity_distance,
                                 o.ambiguity_angle_deg * kDeg)) {
        continue;
      }
      if (!settled || detail::nvtl_ranks_above(results[k], results[*settled])) settled = k;
    }
    if (settled) winner = *settled;
  }
  result.best = results[winner];

  // Rival: the best particle that ended at a pose distinct from the winner's.
  for (std::size_t k = 0; k < results.size(); ++k) {
    if (k != winner) detail::offer_rival(result, results[k], o.ambiguity_distance, o.ambiguity_angle_deg * kDeg);
  }
  detail::settle_ambiguity(result, o.ambiguity_margin);
  result.time_ms = detail::ms_since(t0);
  detail::log().debug("TPE initial pose search: {} startup ({:.1f} ms) + {} proposed ({:.1f} ms, batches of {}) "
                      "particles, NVTL {:.4f}{}",
                      result.coarse_hypotheses, result.coarse_ms, result.refined_hypotheses, result.refine_ms,
                      o.proposal_batch, result.best.nvtl, result.ambiguous ? ", ambiguous" : "");
  return result;
}

}  // namespace ndtcu
