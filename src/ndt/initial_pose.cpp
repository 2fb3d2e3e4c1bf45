// Initial pose search by sweep: a coarse batch over a grid of positions and yaws, a
// refinement batch of the best distinct places, and an ambiguity check (see
// include/ndtcu/initial_pose.hpp).
#include <ndtcu/error.hpp>
#include <ndtcu/initial_pose.hpp>

#include "../log.hpp"
#include "pose_search.hpp"
#include "../nvtx.hpp"

#include <fmt/format.h>

#include <Eigen/Eigenvalues>
#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

namespace ndtcu {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDeg = kPi / 180.0;

// An angle brought into (-pi, pi].
double wrap_angle(double a) {
  a = std::remainder(a, 2.0 * kPi);
  return a <= -kPi ? a + 2.0 * kPi : a;
}

// Grid indices per side, as a double (a radius of 1e6 m at 1e-9 m is beyond every integer
// type): offsets i * step for |i| <= n reach the radius. The 1e-9 keeps a radius that is an
// exact multiple of the step (2 m / 1 m) from losing its last ring to rounding.
double grid_half_width(const InitialPoseOptions& o) { return std::floor(o.radius / o.position_step + 1e-9); }

// Whether grid offset (i, j) lies inside the disc of the radius (same tolerance).
bool inside_disc(long i, long j, const InitialPoseOptions& o) {
  const double x = static_cast<double>(i) * o.position_step, y = static_cast<double>(j) * o.position_step;
  return x * x + y * y <= o.radius * o.radius * (1.0 + 1e-9) + 1e-12;
}

// Yaw offsets per side, as a double: k * step for |k * step| <= range / 2.
double yaw_half_count(const InitialPoseOptions& o) { return std::floor(o.yaw_range_deg / 2.0 / o.yaw_step_deg + 1e-9); }

// Whether the last yaw offset lands on the first one turned by 360 deg (+-180 are one
// heading) and is dropped: the full circle at a step that divides it.
bool yaw_wraps(const InitialPoseOptions& o, double n) {
  return n > 0.0 && std::abs(n * o.yaw_step_deg - (-n * o.yaw_step_deg) - 360.0) < 1e-6;
}

// Yaw offsets (rad): k * step for |k * step| <= range / 2, less the wrapped duplicate.
// Called only once validate() has bounded their number.
std::vector<double> yaw_offsets(const InitialPoseOptions& o) {
  const double half = yaw_half_count(o);
  const long n = static_cast<long>(half);
  std::vector<double> out;
  for (long k = -n; k <= n; ++k) out.push_back(static_cast<double>(k) * o.yaw_step_deg);
  if (yaw_wraps(o, half)) out.pop_back();
  for (double& d : out) d *= kDeg;
  return out;
}

// The size of the sweep, from the radius, the steps and the yaw range alone (nothing is
// built): positions, yaws and their product, exact when `exact`; otherwise the positions
// alone are known to exceed max_hypotheses (one row of the grid does) and `positions` is
// the disc's area over a grid cell, for the message.
struct SweepSize {
  double positions = 0.0, yaws = 0.0, total = 0.0;
  bool exact = true;
};

SweepSize sweep_size(const InitialPoseOptions& o) {
  SweepSize size;
  const double yaw_half = yaw_half_count(o);
  size.yaws = 2.0 * yaw_half + 1.0 - (yaw_wraps(o, yaw_half) ? 1.0 : 0.0);
  const double n = grid_half_width(o);
  const double limit = static_cast<double>(o.max_hypotheses);
  // The row through the centre alone holds 2n + 1 positions (every |i| <= n lies inside:
  // n * step <= radius up to the tolerances of inside_disc); counting the disc row by row
  // is then bounded by the limit (at most limit / 2 rows), never by the radius.
  if (2.0 * n + 1.0 > limit) {
    const double cells = o.radius / o.position_step;
    size.positions = std::max(2.0 * n + 1.0, 3.14159265358979323846 * cells * cells);
    size.total = size.positions * size.yaws;
    size.exact = false;
    return size;
  }
  const long half = static_cast<long>(n);
  for (long i = -half; i <= half; ++i) {
    // The row's half width from the circle, then corrected to inside_disc's own test.
    const double x = static_cast<double>(i) * o.position_step;
    const double room = o.radius * o.radius * (1.0 + 1e-9) + 1e-12 - x * x;
    long j = room < 0.0 ? -1 : std::min(half, static_cast<long>(std::floor(std::sqrt(room) / o.position_step)));
    while (j < half && inside_disc(i, j + 1, o)) ++j;
    while (j >= 0 && !inside_disc(i, j, o)) --j;
    if (j >= 0) size.positions += static_cast<double>(2 * j + 1);
  }
  size.total = size.positions * size.yaws;
  return size;
}

}  // namespace

void validate(const InitialPoseOptions& o) {
  const auto fail = [](const std::string& field, double value, const char* rule) {
    throw Error(fmt::format("InitialPoseOptions::{} = {}: {}", field, value, rule));
  };
  if (!(std::isfinite(o.radius) && o.radius >= 0.0)) fail("radius", o.radius, "must be finite and >= 0 (m)");
  if (!(std::isfinite(o.position_step) && o.position_step > 0.0)) {
    fail("position_step", o.position_step, "must be finite and > 0 (m)");
  }
  if (!(o.yaw_range_deg > 0.0 && o.yaw_range_deg <= 360.0)) {
    fail("yaw_range_deg", o.yaw_range_deg, "must lie in (0, 360] (deg; 360 = full circle)");
  }
  if (!(std::isfinite(o.yaw_step_deg) && o.yaw_step_deg > 0.0)) {
    fail("yaw_step_deg", o.yaw_step_deg, "must be finite and > 0 (deg)");
  }
  if (o.coarse_iterations < 1 || o.coarse_iterations > kMaxIterations) {
    fail("coarse_iterations", o.coarse_iterations, fmt::format("must lie in [1, {}]", kMaxIterations).c_str());
  }
  if (o.refine_count < 1) fail("refine_count", o.refine_count, "must be >= 1");
  if (!(std::isfinite(o.coarse_step_size) && o.coarse_step_size >= 0.0)) {
    fail("coarse_step_size", o.coarse_step_size, "must be finite and >= 0 (m; 0: the aligner's step_size)");
  }
  if (!(std::isfinite(o.refine_step_size) && o.refine_step_size >= 0.0)) {
    fail("refine_step_size", o.refine_step_size, "must be finite and >= 0 (m; 0: the aligner's step_size)");
  }
  if (!(std::isfinite(o.ambiguity_distance) && o.ambiguity_distance >= 0.0)) {
    fail("ambiguity_distance", o.ambiguity_distance, "must be finite and >= 0 (m)");
  }
  if (!(std::isfinite(o.ambiguity_angle_deg) && o.ambiguity_angle_deg >= 0.0)) {
    fail("ambiguity_angle_deg", o.ambiguity_angle_deg, "must be finite and >= 0 (deg)");
  }
  if (!(std::isfinite(o.ambiguity_margin) && o.ambiguity_margin >= 0.0)) {
    fail("ambiguity_margin", o.ambiguity_margin, "must be finite and >= 0 (NVTL)");
  }
  if (o.max_hypotheses < 1) fail("max_hypotheses", 0.0, "must be >= 1");
  if (o.screen_above > 0 && (o.screen_keep < 1 || o.screen_points < 1)) {
    fail(o.screen_keep < 1 ? "screen_keep" : "screen_points", 0.0, "must be >= 1 when screen_above is not 0");
  }
  // The sweep's size, before anything is built: a radius of 1e6 m or a yaw step of 1e-7
  // deg would otherwise take minutes and gigabytes to be refused.
  const SweepSize size = sweep_size(o);
  if (size.total > static_cast<double>(o.max_hypotheses)) {
    throw Error(fmt::format("initial pose search: {}{:.0f} hypotheses ({}{:.0f} positions within radius {} m at "
                            "position_step {} m, times {:.0f} yaws over yaw_range_deg {} at yaw_step_deg {}) exceed "
                            "the limit of {} (max_hypotheses); use a larger position or yaw step, or a smaller "
                            "radius or yaw range",
                            size.exact ? "" : "about ", size.total, size.exact ? "" : "about ", size.positions,
                            o.radius, o.position_step, size.yaws, o.yaw_range_deg, o.yaw_step_deg, o.max_hypotheses));
  }
}

namespace {

// The sweep: each hypothesis keeps the rough pose's roll and pitch with its yaw turned, or,
// with `up`, is leveled by it (leveled_rotation) at that yaw.
std::vector<Pose6> sweep(const Pose6& around, const InitialPoseOptions& o, const Eigen::Vector3d* up) {
  validate(o);
  for (int i = 0; i < 6; ++i) {
    if (!std::isfinite(around(i))) {
      throw Error(fmt::format("initial pose search: around[{}] = {} is not finite (x y z roll pitch yaw)", i, around(i)));
    }
  }
  // validate() has bounded the sweep's size (sweep_size) by max_hypotheses.
  const long n = static_cast<long>(grid_half_width(o));
  const std::vector<double> yaws = yaw_offsets(o);
  std::vector<Pose6> out;
  out.reserve(static_cast<std::size_t>(sweep_size(o).total));
  for (long i = -n; i <= n; ++i) {
    for (long j = -n; j <= n; ++j) {
      if (!inside_disc(i, j, o)) continue;
      for (double dyaw : yaws) {
        Pose6 p = around;
        p(0) += static_cast<double>(i) * o.position_step;
        p(1) += static_cast<double>(j) * o.position_step;
        p(5) = wrap_angle(around(5) + dyaw);
        if (up) {
          Eigen::Matrix4d t = Eigen::Matrix4d::Identity();
          t.topLeftCorner<3, 3>() = leveled_rotation(*up, p(5));
          t.topRightCorner<3, 1>() = p.head<3>();
          p = matrix_to_pose(t);
        }
        out.push_back(p);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<Pose6> initial_pose_hypotheses(const Pose6& around, const InitialPoseOptions& o) {
  return sweep(around, o, nullptr);
}

std::vector<Pose6> initial_pose_hypotheses(const Pose6& around, const InitialPoseOptions& o, const Eigen::Vector3d& up) {
  if (!(up.allFinite() && up.norm() > 0.5)) throw Error("initial pose search: the up direction must be a finite unit vector");
  return sweep(around, o, &up);
}

const char* to_string(InitialPoseVerdict v) {
  switch (v) {
    case InitialPoseVerdict::Found: return "found";
    case InitialPoseVerdict::Ambiguous: return "ambiguous";
    case InitialPoseVerdict::BelowThreshold: return "below_threshold";
    case InitialPoseVerdict::NotConverged: return "not_converged";
    case InitialPoseVerdict::NoOverlap: return "no_overlap";
    case InitialPoseVerdict::LowOverlap: return "low_overlap";
  }
  return "unknown";
}

InitialPoseVerdict verdict(const InitialPoseResult& r, double nvtl_threshold) {
  const StopReason why = r.best.reason;
  if (r.best.matched_points == 0 || why == StopReason::EmptySource || why == StopReason::NoVoxels ||
      why == StopReason::NoCorrespondence) {
    return InitialPoseVerdict::NoOverlap;
  }
  if (2 * r.best.matched_points < r.best.source_points) return InitialPoseVerdict::LowOverlap;
  if (r.ambiguous) return InitialPoseVerdict::Ambiguous;
  if (!r.best.converged) return InitialPoseVerdict::NotConverged;
  if (!(r.best.nvtl >= nvtl_threshold)) return InitialPoseVerdict::BelowThreshold;
  return InitialPoseVerdict::Found;
}

Eigen::Matrix3d leveled_rotation(const Eigen::Vector3d& up, double yaw) {
  const Eigen::Matrix3d level = Eigen::Quaterniond::FromTwoVectors(up.normalized(), Eigen::Vector3d::UnitZ()).toRotationMatrix();
  return Eigen::AngleAxisd(yaw, Eigen::Vector3d::UnitZ()).toRotationMatrix() * level;
}

ScanGround estimate_ground(PointCloudView scan, double max_tilt_deg) {
  if (!(max_tilt_deg > 0.0 && max_tilt_deg < 90.0)) {
    throw Error(fmt::format("estimate_ground: max_tilt_deg = {} must lie in (0, 90)", max_tilt_deg));
  }
  constexpr double kInlier = 0.1, kMinHeight = 0.3;
  constexpr std::size_t kMaxPoints = 20000;
  constexpr int kTrials = 300;
  ScanGround g;
  std::vector<Eigen::Vector3d> pts;
  const std::size_t stride = scan.size() > kMaxPoints ? (scan.size() + kMaxPoints - 1) / kMaxPoints : 1;
  for (std::size_t i = 0; i < scan.size(); i += stride) {
    const Eigen::Vector3d p = scan[i].cast<double>() + scan.origin;  // the sensor is at the frame's origin
    if (p.allFinite() && p.squaredNorm() > 1e-6) pts.push_back(p);
  }
  g.points = pts.size();
  if (pts.size() < 50) return g;
  const double min_cos = std::cos(max_tilt_deg * kDeg);
  // A fixed generator and index draws by modulo: the same plane on every platform
  // (std::uniform_int_distribution is implementation-defined; the modulo bias of a 64-bit
  // draw over a few thousand points is immaterial).
  std::mt19937_64 rng(0x5eed9a0d);
  const auto draw = [&]() { return static_cast<std::size_t>(rng() % pts.size()); };
  const auto count = [&](const Eigen::Vector3d& n, double d) {
    std::size_t c = 0;
    for (const Eigen::Vector3d& p : pts) c += std::abs(n.dot(p) + d) < kInlier;
    return c;
  };
  std::size_t best = 0;
  Eigen::Vector3d best_n = Eigen::Vector3d::UnitZ();
  double best_d = 0.0;
  for (int t = 0; t < kTrials; ++t) {
    const Eigen::Vector3d& a = pts[draw()];
    const Eigen::Vector3d& b = pts[draw()];
    const Eigen::Vector3d& c = pts[draw()];
    Eigen::Vector3d n = (b - a).cross(c - a);
    const double len = n.norm();
    if (!(len > 1e-6)) continue;
    n /= len;
    double d = -n.dot(a);
    if (d < 0.0) {  // orient the normal towards the sensor (the origin): d is then its height
      n = -n;
      d = -d;
    }
    if (d < kMinHeight || n.z() < min_cos) continue;
    const std::size_t inliers = count(n, d);
    if (inliers > best) {
      best = inliers;
      best_n = n;
      best_d = d;
    }
  }
  if (best < std::max<std::size_t>(50, pts.size() / 10)) return g;
  // Least squares over the inliers: the normal is the covariance's smallest eigenvector.
  Eigen::Vector3d mean = Eigen::Vector3d::Zero();
  std::size_t m = 0;
  for (const Eigen::Vector3d& p : pts) {
    if (std::abs(best_n.dot(p) + best_d) < kInlier) {
      mean += p;
      ++m;
    }
  }
  mean /= static_cast<double>(m);
  Eigen::Matrix3d cov = Eigen::Matrix3d::Zero();
  for (const Eigen::Vector3d& p : pts) {
    if (std::abs(best_n.dot(p) + best_d) < kInlier) cov += (p - mean) * (p - mean).transpose();
  }
  Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> eig(cov);
  Eigen::Vector3d n = eig.eigenvectors().col(0);
  if (n.dot(best_n) < 0.0) n = -n;
  g.found = true;
  g.up = n.normalized();
  g.height = -g.up.dot(mean);
  g.inliers = count(g.up, g.height);
  return g;
}

std::vector<Eigen::Vector3d> rotation_offsets(double range_deg, double step_deg) {
  if (!(std::isfinite(range_deg) && range_deg >= 0.0 && range_deg <= 180.0)) {
    throw Error(fmt::format("rotation offsets: range {} deg must lie in [0, 180]", range_deg));
  }
  if (!(std::isfinite(step_deg) && step_deg > 0.0)) {
    throw Error(fmt::format("rotation offsets: step {} deg must be finite and > 0", step_deg));
  }
  const long n = static_cast<long>(std::floor(range_deg / step_deg + 1e-9));
  if (n > 50) throw Error(fmt::format("rotation offsets: range {} deg at step {} deg is too fine a grid", range_deg, step_deg));
  const double limit = range_deg * kDeg * (1.0 + 1e-9) + 1e-12;
  std::vector<Eigen::Vector3d> out;
  out.emplace_back(Eigen::Vector3d::Zero());  // the centre first
  for (long i = -n; i <= n; ++i) {
    for (long j = -n; j <= n; ++j) {
      for (long k = -n; k <= n; ++k) {
        if (i == 0 && j == 0 && k == 0) continue;
        const Eigen::Vector3d v = Eigen::Vector3d(double(i), double(j), double(k)) * (step_deg * kDeg);
        if (v.norm() <= limit) out.push_back(v);
      }
    }
  }
  return out;
}

InitialPoseResult find_initial_pose(Aligner& aligner, PointCloudView scan, const Pose6& around,
                                    const InitialPoseOptions& o) {
  NDTCU_NVTX_RANGE("find_initial_pose");
  validate(o);  // the sweep's size among the rest, before the scan is looked at
  if (!aligner.has_target()) {
    throw Error("initial pose search: the aligner has no target map (call Aligner::set_target first)");
  }
  if (o.level_from_ground) {
    const ScanGround ground = estimate_ground(scan);
    if (ground.found) {
      InitialPoseResult r = search_hypotheses(aligner, scan, initial_pose_hypotheses(around, o, ground.up), o);
      r.leveled = true;
      return r;
    }
    detail::log().warn("initial pose search: no ground plane in the scan ({} points); keeping the rough pose's roll "
                       "and pitch", ground.points);
  }
  return search_hypotheses(aligner, scan, initial_pose_hypotheses(around, o), o);
}

InitialPoseResult search_hypotheses(Aligner& aligner, PointCloudView scan, const std::vector<Pose6>& hypotheses,
                                    const InitialPoseOptions& o) {
  NDTCU_NVTX_RANGE("search_hypotheses");
  const auto t0 = std::chrono::steady_clock::now();
  validate(o);
  if (!aligner.has_target()) {
    throw Error("hypothesis search: the aligner has no target map (call Aligner::set_target first)");
  }
  if (hypotheses.empty()) throw Error("hypothesis search: no hypotheses");
  if (hypotheses.size() > o.max_hypotheses) {
    throw Error(fmt::format("hypothesis search: {} hypotheses exceed the limit of {}", hypotheses.size(), o.max_hypotheses));
  }

  // Coarse pass: the same aligner (map and backend) with fewer iterations.
  BatchOptions coarse;
  coarse.localizability = false;  // ranked only
  coarse.max_iterations = o.coarse_iterations;
  coarse.step_size = o.coarse_step_size;

  InitialPoseResult result;
  auto t = std::chrono::steady_clock::now();
  // A wide search is screened first (InitialPoseOptions::screen_above): every hypothesis
  // scored where it stands on a few points, the best screen_keep aligned.
  const std::vector<Pose6>* coarse_starts = &hypotheses;
  std::vector<Pose6> screened;
  PointCloud thinned_points;  // the screen's and the coarse pass's points, when the scan is thinned
  if (o.screen_above > 0 && hypotheses.size() > o.screen_above && hypotheses.size() > o.screen_keep) {
    const PointCloudView screened_points = detail::thinned(scan, o.screen_points, thinned_points);
    const std::vector<PoseScore> scores = aligner.score_batch(screened_points, hypotheses);
    const double points = static_cast<double>(screened_points.size());
    const auto coverage_nvtl = [points](const PoseScore& r) {
      if (std::isnan(r.nvtl) || r.matched_points == 0 || points == 0.0) return -1.0;
      return r.nvtl * static_cast<double>(r.matched_points) / points;
    };
    std::vector<std::size_t> rank(scores.size());
    std::iota(rank.begin(), rank.end(), std::size_t{0});
    std::partial_sort(rank.begin(), rank.begin() + static_cast<std::ptrdiff_t>(o.screen_keep), rank.end(),
                      [&](std::size_t a, std::size_t b) {
                        const double sa = coverage_nvtl(scores[a]), sb = coverage_nvtl(scores[b]);
                        return sa > sb || (sa == sb && a < b);  // ties by index: the same list, the same pick
                      });
    rank.resize(o.screen_keep);
    std::sort(rank.begin(), rank.end());  // the sweep's own order again
    screened.reserve(rank.size());
    for (std::size_t k : rank) screened.push_back(hypotheses[k]);
    coarse_starts = &screened;
    result.screened_hypotheses = hypotheses.size();
    result.screen_ms = detail::ms_since(t);
    t = std::chrono::steady_clock::now();
  }
  const std::vector<AlignResult> coarse_results =
      aligner.align_batch(detail::thinned(scan, o.coarse_points, thinned_points), *coarse_starts, coarse);
  result.coarse_ms = detail::ms_since(t);
  result.coarse_hypotheses = coarse_starts->size();

  // The best refine_count by NVTL, each distinct from those kept before it, so the
  // refinement looks at different places rather than one basin several times.
  std::vector<std::size_t> order(coarse_results.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return detail::nvtl_ranks_above(coarse_results[a], coarse_results[b]); });
  std::vector<std::size_t> kept;
  std::vector<bool> refined(coarse_results.size(), false);
  for (std::size_t k : order) {
    if (kept.size() >= static_cast<std::size_t>(o.refine_count)) break;
    const bool fresh = std::all_of(kept.begin(), kept.end(), [&](std::size_t q) {
      return detail::distinct_poses(coarse_results[k].pose, coarse_results[q].pose, o.ambiguity_distance, o.ambiguity_angle_deg * kDeg);
    });
    if (!fresh) continue;
    kept.push_back(k);
    refined[k] = true;
  }

  // Refinement from where the coarse pass stopped, with the aligner's own settings (its step
  // length unless refine_step_size says otherwise).
  std::vector<Pose6> starts;
  starts.reserve(kept.size());
  for (std::size_t k : kept) starts.push_back(coarse_results[k].pose);
  t = std::chrono::steady_clock::now();
  BatchOptions refine;
  refine.step_size = o.refine_step_size;
  std::vector<AlignResult> refined_results = aligner.align_batch(scan, starts, refine);
  // A refinement that ran out of iterations is a long correction still under way (a coarse
  // pose a metre off takes more than 30 steps of 0.1 m when the steps zigzag): it goes on
  // from where it stopped, as the localizer's retries do, in one more batch of those still
  // under way, up to kRefineContinuations times (the narrow Livox Avia scans' right
  // rotation hypotheses can take more than twice Autoware's 30 iterations).
  constexpr int kRefineContinuations = 3;
  std::size_t resumed_total = 0;
  for (int round = 0; round < kRefineContinuations; ++round) {
    std::vector<std::size_t> unfinished;
    std::vector<Pose6> resumed;
    for (std::size_t r = 0; r < refined_results.size(); ++r) {
      if (refined_results[r].reason == StopReason::MaxIterations) {
        unfinished.push_back(r);
        resumed.push_back(refined_results[r].pose);
      }
    }
    if (resumed.empty()) break;
    resumed_total += resumed.size();
    std::vector<AlignResult> more = aligner.align_batch(scan, resumed, refine);
    for (std::size_t u = 0; u < unfinished.size(); ++u) {
      AlignResult& r = refined_results[unfinished[u]];
      more[u].iterations += r.iterations;
      r = std::move(more[u]);
    }
  }
  result.refine_ms = detail::ms_since(t);
  result.refined_hypotheses = starts.size() + resumed_total;
  result.hypotheses_aligned = result.coarse_hypotheses + result.refined_hypotheses;

  // Winner: the refined result of highest NVTL, converged or not. A hypothesis that kept
  // stepping to and fro about its optimum through both passes (BALM: 4 cm from the
  // reference at NVTL 2.94 after 60 iterations) is still the best place, and a converged
  // one that scores lower is not; its `converged` says which it is (verdict() then says
  // not_converged, and the localizer, which rejects unconverged alignments, does not take
  // it).
  std::size_t winner = 0;
  for (std::size_t r = 1; r < refined_results.size(); ++r) {
    if (detail::nvtl_ranks_above(refined_results[r], refined_results[winner])) winner = r;
  }
  result.best = refined_results[winner];

  // Rival: the best hypothesis that ended at a distinct place, among the refined results
  // and the coarse results that were not refined (a refined one is represented by where
  // its refinement ended).
  const double angle = o.ambiguity_angle_deg * kDeg;
  for (std::size_t r = 0; r < refined_results.size(); ++r) {
    if (r != winner) detail::offer_rival(result, refined_results[r], o.ambiguity_distance, angle);
  }
  for (std::size_t k = 0; k < coarse_results.size(); ++k) {
    if (!refined[k]) detail::offer_rival(result, coarse_results[k], o.ambiguity_distance, angle);
  }
  detail::settle_ambiguity(result, o.ambiguity_margin);
  detail::rank_candidates(result, refined_results, o.ambiguity_distance, angle);
  result.time_ms = detail::ms_since(t0);
  detail::log().debug("hypothesis search: {} screened ({:.1f} ms), {} coarse ({:.1f} ms) + {} refined ({:.1f} ms) "
                      "hypotheses, NVTL {:.4f}{}",
              result.screened_hypotheses, result.screen_ms, result.coarse_hypotheses, result.coarse_ms,
              result.refined_hypotheses, result.refine_ms,
              result.best.nvtl, result.ambiguous ? ", ambiguous" : "");
  return result;
}

}  // namespace ndtcu
