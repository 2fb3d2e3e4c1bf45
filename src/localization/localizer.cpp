#include <ndtcu/error.hpp>
#include <ndtcu/fields.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/text.hpp>

#include "localizer_impl.hpp"

#include "../cuda/cuda_filter.hpp"
#include "../ndt/pose_search.hpp"
#include "../log.hpp"
#include "../nvtx.hpp"
#include "../pose_matrix_check.hpp"
#include "../filters/voxel_lattice.hpp"
#include "deskew.hpp"

#include <fmt/format.h>

#include <Eigen/Eigenvalues>
#include <Eigen/Geometry>
#include <Eigen/LU>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ndtcu {

namespace {

// Throws unless `m` is a finite rigid transform (matrix_to_pose checks both).
void check_rigid(const Eigen::Matrix4d& m, const char* what) {
  try {
    (void)matrix_to_pose(m);
  } catch (const Error& e) {
    throw Error(std::string(what) + ": " + e.what());
  }
}

// The rigid motion `delta` scaled by `s`: rotation angle and translation times s. For the
// small inter-frame motions this extrapolates, this first-order split differs from the
// exact screw motion by far less than the alignment's capture range.
Eigen::Matrix4d scale_motion(const Eigen::Matrix4d& delta, double s) {
  const Eigen::AngleAxisd aa(Eigen::Matrix3d(delta.topLeftCorner<3, 3>()));
  Eigen::Matrix4d out = Eigen::Matrix4d::Identity();
  out.topLeftCorner<3, 3>() = Eigen::AngleAxisd(aa.angle() * s, aa.axis()).toRotationMatrix();
  out.topRightCorner<3, 1>() = s * delta.topRightCorner<3, 1>();
  return out;
}

// How far (m) a twist's change may move a scan's points before another re-de-skew pass
// runs (LocalizerSettings::deskew_passes): 1 cm, the simulator's range noise and a hundredth
// of the scan's 1 m voxel leaf, below which the filtered scan and its alignment barely move.
constexpr double kDeskewPassTolerance = 0.01;

// A scan's sweep as the de-skew sees it: its largest |time| (s), its first and last time
// (s), its points' mean and mean squared time (s, s^2), and their largest and RMS range (m)
// within `max_range` (the arms of a twist's angular part). All 0 for a scan whose times are
// all zero or not finite.
struct SweepExtent {
  double t_max = 0.0, t_first = 0.0, t_last = 0.0, t_mean = 0.0, t2_mean = 0.0, r_max = 0.0, r_rms = 0.0;
};

SweepExtent sweep_extent(PointCloudView scan, const float* times, double max_range) {
  SweepExtent e;
  double r2_max = 0.0, r2_sum = 0.0, t_sum = 0.0, t2_sum = 0.0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < scan.size(); ++i) {
    if (!std::isfinite(times[i])) continue;
    e.t_max = std::max(e.t_max, static_cast<double>(std::abs(times[i])));
    e.t_first = n > 0 ? std::min(e.t_first, static_cast<double>(times[i])) : times[i];
    e.t_last = n > 0 ? std::max(e.t_last, static_cast<double>(times[i])) : times[i];
    t_sum += times[i];
    t2_sum += static_cast<double>(times[i]) * times[i];
    const double r2 = std::min(static_cast<double>(scan.points[i].squaredNorm()), max_range * max_range);
    r2_max = std::max(r2_max, r2);
    r2_sum += r2;
    ++n;
  }
  e.r_max = std::sqrt(r2_max);
  e.r_rms = n > 0 ? std::sqrt(r2_sum / static_cast<double>(n)) : 0.0;
  if (!(e.t_max > 0.0)) e.t_first = e.t_last = 0.0;
  e.t_mean = n > 0 && e.t_max > 0.0 ? t_sum / static_cast<double>(n) : 0.0;
  e.t2_mean = n > 0 && e.t_max > 0.0 ? t2_sum / static_cast<double>(n) : 0.0;
  return e;
}

// The sensor's pose s seconds into a sweep along `path`, relative to its pose at the scan's
// time (what deskew_point undoes).
Eigen::Matrix4d sweep_pose(const math::SweepPath& path, double s) {
  double r[9], o[3];
  math::path_motion(path, s, r, o);
  Eigen::Matrix4d m = Eigen::Matrix4d::Identity();
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m(i, j) = r[3 * i + j];
    m(i, 3) = o[i];
  }
  return m;
}

// exp(s xi): the same along a sweep of constant motion xi.
Eigen::Matrix4d sweep_pose(const math::Twist& xi, double s) { return sweep_pose(math::constant_path(xi), s); }

// The standard deviation (m/s) of the translation of a sweep's own motion, from its halves
// aligned apart (sweep_motion), for a frame with no motion before it: the halves hold a
// sideways velocity and a yaw rate only together, and settle to one side. On the
// simulator's fast drives (seeds 1-6, HDL-32 and VLP-16, at 21-25 m/s) they settled 0.7-3.0
// m/s sideways, and the first frames were 2.8-18.8 cm off (9.4 cm RMS over 15 drives) where
// the motion model's 1 m/s said 5.6-6.7 cm.
constexpr double kSweepOwnMotionSigma = 2.0;

// The standard deviation of each component ([v w], sensor frame) of the motion a swept frame
// is de-skewed with, `twist` (none: the scan used as read), for the calibrated covariance's
// de-skew term (LocalizerSettings::covariance_deskew_scale): its change from the motion the
// frame before was de-skewed with, `previous` (a constant motion lags the sweep by about a
// frame; a mean over the sweep misses how the motion changes within it); the motion model's
// own sigmas per second where nothing came before it or no motion was taken; none for the
// caller's parts (`all_known`), and the gyro's bias for the IMU's rate (`rotation_known`).
// The change is taken times `lag`, the share of the frames' spacing by which the motion
// misses the sweep's (1 at 10 Hz frames of a 0.1 s sweep); over that lag, `lag` times the
// frames' `spacing` (s), the velocity may also change in a way the change before does not
// show: an acceleration that changed since, by LocalizerSettings::covariance_deskew_jerk
// per second of the spacing (in quadrature). A sweep's own motion (`own`: its halves aligned
// apart) with nothing before it takes kSweepOwnMotionSigma in translation.
Eigen::Matrix<double, 6, 1> deskew_sigma(const std::optional<math::Twist>& twist,
                                         const std::optional<math::Twist>& previous, bool rotation_known,
                                         bool all_known, double lag, double spacing, bool own,
                                         const LocalizerSettings& s) {
  Eigen::Matrix<double, 6, 1> sigma = Eigen::Matrix<double, 6, 1>::Zero();
  if (all_known) return sigma;
  if (twist && previous) {
    // The velocity's change over the lag that the change before does not show: the
    // acceleration's change over the spacing (covariance_deskew_jerk) over the lag.
    const double unseen =
        spacing > 0.0 && std::isfinite(spacing) ? s.covariance_deskew_jerk * spacing * (lag * spacing) : 0.0;
    for (int i = 0; i < 3; ++i) {
      sigma(i) = std::hypot(lag * std::abs(twist->v[i] - previous->v[i]), unseen);
      sigma(3 + i) = lag * std::abs(twist->w[i] - previous->w[i]);
    }
  } else {
    const double v = own ? std::max(s.motion_translation_sigma, kSweepOwnMotionSigma) : s.motion_translation_sigma;
    sigma << v, v, v, s.motion_rotation_sigma, s.motion_rotation_sigma, s.motion_rotation_sigma;
  }
  // The IMU's rate, part by part: as uncertain as the gyro's bias (covariance_imu_rate_sigma).
  if (rotation_known) sigma.tail<3>().setConstant(s.covariance_imu_rate_sigma);
  return sigma;
}

// The most a twist change of 1 (m/s in v, rad/s in w) moves a point of the scan: the
// largest |time| times (1 + the farthest range, the arm of the angular part).
double deskew_reach(const SweepExtent& e) { return e.t_max * (1.0 + e.r_max); }

// How far the de-skew with `twist` moves the scan's points at its latest time, at the RMS
// range (m): what the refinement (LocalizerSettings::refine_ratio) weighs it against.
double deskew_shift(const SweepExtent& e, const math::Twist& twist) {
  const Eigen::Vector3d v(twist.v[0], twist.v[1], twist.v[2]);
  const Eigen::Vector3d w(twist.w[0], twist.w[1], twist.w[2]);
  return e.t_max * (v.norm() + w.norm() * e.r_rms);
}

// The larger of the two parts of a twist's change: |dv| (m/s) and |dw| (rad/s).
double twist_change(const math::Twist& a, const math::Twist& b) {
  const Eigen::Vector3d dv(a.v[0] - b.v[0], a.v[1] - b.v[1], a.v[2] - b.v[2]);
  const Eigen::Vector3d dw(a.w[0] - b.w[0], a.w[1] - b.w[1], a.w[2] - b.w[2]);
  return std::max(dv.norm(), dw.norm());
}

// The acceleration (m/s^2) a sweep's own motion, found for a lost frame, may take from the
// motion before it: a car brakes and corners at up to about 1 g. On the simulator's fast
// drives the motions found right (1-13 cm off) changed speed by at most 1.9 m/s over the 0.2
// s between the two motions' mean times (braking into a corner), those found 29-49 cm off
// by 3.0-7.0 m/s (a half scan's yaw rate taken for speed) or turned their velocity 87-88 deg.
constexpr double kMaxSweepAcceleration = 12.0;

// The frames' times against their points': a sweep's own motion (its halves, from the
// points' times) and the mean speed between its pose and the next frame's (from the frames'
// times) disagree by more than this ratio and this margin (m/s) only when one of the two
// clocks is wrong, e.g. scans numbered at a --period ten times too short: their motion
// between frames then reads ten times too fast and bends every sweep it de-skews (the
// simulator's 1 Hz kidnap drive taken at 0.1 s: 2 frames accepted 37-39 cm off). A sweep's
// own speed is good to about kSweepOwnMotionSigma, and at the 1 Hz drives' 6 m/s^2 the
// mean over the next second is within half of it.
constexpr double kTimeScaleRatio = 3.0;
constexpr double kTimeScaleMargin = 3.0;

// Whether the motion `found` for a lost frame's sweep could follow `before`, `dt` seconds
// apart (their mean times): its speed within kMaxSweepAcceleration dt of the one before,
// and its velocity within that plus what the faster of the two turn rates swings the
// velocity before through in dt (both are in the sensor's frame, which turns).
bool plausible_change(const math::Twist& before, const math::Twist& found, double dt, double time) {
  const Eigen::Vector3d v0(before.v[0], before.v[1], before.v[2]), v1(found.v[0], found.v[1], found.v[2]);
  const double w = std::max(Eigen::Vector3d(before.w[0], before.w[1], before.w[2]).norm(),
                            Eigen::Vector3d(found.w[0], found.w[1], found.w[2]).norm());
  const double speed = std::abs(v1.norm() - v0.norm()), change = (v1 - v0).norm();
  const double bound = kMaxSweepAcceleration * dt;
  const bool ok = speed <= bound && change <= bound + v0.norm() * w * dt;
  if (!ok) {
    detail::log().debug("localizer: frame at t={}: its sweep's own motion v ({:.2f}, {:.2f}, {:.2f}) m/s is not one the "
                        "motion before it, v ({:.2f}, {:.2f}, {:.2f}) m/s, reaches in {:.3f} s (speed changed by {:.2f} "
                        "m/s, velocity by {:.2f}); the frame stays lost",
                        time, v1[0], v1[1], v1[2], v0[0], v0[1], v0[2], dt, speed, change);
  }
  return ok;
}

// Adds the alignments `earlier` ran (an attempt of the same frame whose verdict `to` replaces
// or keeps) to `to`'s counts and time.
void add_work(LocalizationResult& to, const LocalizationResult& earlier) {
  to.attempts += earlier.attempts;
  to.hypotheses += earlier.hypotheses;
  to.screened += earlier.screened;
  to.iterations_total += earlier.iterations_total;
  to.evaluations += earlier.evaluations;
  to.align_ms += earlier.align_ms;
}

// Whether `stage` is one of the hypothesis searches (they confirm a pose the gate refused).
bool is_search(FrameStage stage) {
  switch (stage) {
    case FrameStage::HeadingSearch:
    case FrameStage::RotationSearch:
    case FrameStage::PositionSearch:
    case FrameStage::WideSearch:
    case FrameStage::GlobalSearch: return true;
    default: return false;
  }
}

// The points of a sweep's halves fewer than this (after the filter) give no motion: a half
// scan that small pins no pose.
constexpr std::size_t kSweepHalfMinPoints = 100;
// The share of the halves' correction each pass takes, and the passes a first frame runs at
// least (with LocalizerSettings::deskew_passes above 0). A half scan holds a yaw rate and
// a sideways velocity only together, so the full correction overshoots one into the other
// and swings from pass to pass (on the simulator's fast drive v_y went 0.5, -4.6, -0.8,
// -2.6 m/s where the truth was 0.1); 0.7 of it settled each start tried (HDL-32 and VLP-16,
// seeds 1 and 2, on the straight and in a 1.3 rad/s turn), where taking the full correction
// left one start 44 cm off on the frames after, and translation alone 47-52 cm in the turn.
// The halves see only part of the motion's error each time (from 0, a first frame at 23 m/s
// found 7.5, 12.2, 14.9 m/s): three passes left seed 6's first frame 30-31 cm off (accepted
// on the VLP-16) and seed 2's at 25 m/s 15-16 cm; up to eight (fewer once the motion settles,
// kDeskewPassTolerance) 17-18 and 4-6 cm, and 20 frames of seeds 1-6 (HDL-32; VLP-16 on 1, 2,
// 6) 2.5-5.1 cm where three gave 3.3-7.6 (seeds 3 and 4 0.2-0.5 cm worse, the rest better).
constexpr double kSweepMotionStep = 0.7;
constexpr int kSweepMotionPasses = 8;
// With the sideways velocity held at 0 (LocalizerSettings::deskew_forward) nothing swings
// into it, and the halves' full correction settles faster: 20 frames of the fast drive's
// HDL-32 seeds 1-6, VLP-16 1, 2, 6 and OS1-64 1 at 1.8-2.7 cm where 0.7 of it left 1.8-3.0
// (seed 6's first frame, 8 passes short of its 20.8 m/s, 8.6 cm off where it was 10.2);
// 1.3 of it overshot (seeds 2 and 5 24-34 cm off).
constexpr double kForwardMotionStep = 1.0;
// A sweep's own sideways velocity (m/s) above which, when it is also above kSidewaysShare of
// the forward speed (14 deg off the x axis), LocalizerSettings::deskew_forward keeps it: a
// sensor mounted across the way it moves. The halves' own settled 1.6-2.4 m/s sideways at
// 24 m/s on the fast drive.
constexpr double kSidewaysSpeed = 3.0;
constexpr double kSidewaysShare = 0.25;
// The continuations a half's alignment runs when it stops at the iteration limit: 1 from a
// pose found (the passes), 3 from a lost frame's prediction, further off (the fast drive's
// corner frame on the VLP-16: its early half still under way after 60 iterations).
constexpr int kLostHalfContinuations = 3;
// The rates (rad/s) a swept frame still lost tries added to its motion's turn about the
// sensor's z axis (see localize_points): up to 2 rad/s (115 deg/s) either way, 0.5 rad/s
// apart, which leaves at most 0.25 rad/s (1.4 deg over a 0.1 s sweep) unmodelled.
constexpr double kTurnRates[] = {-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0};
// Where in the sweep (its share from its first point's time to its last's) a turn of
// kTurnRates may begin: 0, a turn under way for the whole sweep, else a step of the rate
// within it.
constexpr double kTurnOnsets[] = {0.0, 0.25, 0.5, 0.75};
// The refinement of the grid's best turn (see localize_points): its first steps (half the
// grid's), the rounds it runs (each up to four runs of the frame) until the rate's step is
// below the last, and its bounds.
constexpr double kTurnRefineRateStep = 0.25;
constexpr double kTurnRefineOnsetStep = 0.125;
constexpr int kTurnRefineRounds = 14;
constexpr double kTurnRefineMinRateStep = 0.03;  // 0.17 deg over a 0.1 s sweep
constexpr double kTurnRefineMaxRate = 2.5;
constexpr double kTurnRefineMaxOnset = 0.9;
// How far the lost frame's best attempt must lie from its prediction for the candidate
// turns to run once more from it, when none from the prediction passed.
constexpr double kTurnRestartDistance = 0.5;  // m
constexpr double kTurnRestartAngle = 0.1;     // rad, 5.7 deg

// The sweep's own motion, for a frame with no motion to take (the first, or the first after
// lost frames) or lost on the one it took (see localize_points): the filtered scan,
// de-skewed with `current`, split at its median time into an early and a late half, each
// aligned on its own from `pose` (continued up to `continuations` times). Were `current` the sweep's
// motion, both halves would find the reference time's pose; a remaining error d of the
// twist leaves the half of mean time t at about pose exp(t d), so the two poses' gap over
// the gap of their mean times is d, and current + kSweepMotionStep d the motion. With
// `forward` (LocalizerSettings::deskew_forward) current + kForwardMotionStep d, its sideways
// velocity (y) 0 unless above kSidewaysSpeed and kSidewaysShare of the forward speed. Empty when the scan has no
// times, a half is too small, or either half's alignment fails the frame's checks (`accepted`).
template <typename Accepted>
std::optional<math::Twist> sweep_motion(Accepted accepted, Aligner& aligner, const PointCloud& filtered,
                                        const Eigen::Matrix4d& pose, const math::Twist& current, int continuations,
                                        bool forward) {
  if (!filtered.has_time()) return std::nullopt;
  std::vector<float> order;
  order.reserve(filtered.size());
  for (const float t : filtered.time) {
    if (std::isfinite(t)) order.push_back(t);
  }
  if (order.size() < 2 * kSweepHalfMinPoints) return std::nullopt;
  const auto middle = order.begin() + static_cast<std::ptrdiff_t>(order.size() / 2);
  std::nth_element(order.begin(), middle, order.end());
  const float split = *middle;
  PointCloud early, late;
  early.origin = late.origin = filtered.origin;  // the halves' poses are the scan's
  double t_early = 0.0, t_late = 0.0;
  Eigen::Vector2d look_early = Eigen::Vector2d::Zero(), look_late = Eigen::Vector2d::Zero();
  for (std::size_t i = 0; i < filtered.size(); ++i) {
    const float t = filtered.time[i];
    if (!std::isfinite(t)) continue;
    // Where the point lies from the sensor, looked at only when the sideways velocity is held.
    Eigen::Vector2d look = Eigen::Vector2d::Zero();
    if (forward) {
      const Eigen::Vector3d p = filtered.world(i);
      const double r = std::hypot(p.x(), p.y());
      if (r > 0.0) look = Eigen::Vector2d(p.x() / r, p.y() / r);
    }
    if (t < split) {
      early.points.push_back(filtered.points[i]);
      t_early += t;
      look_early += look;
    } else {
      late.points.push_back(filtered.points[i]);
      t_late += t;
      look_late += look;
    }
  }
  if (early.size() < kSweepHalfMinPoints || late.size() < kSweepHalfMinPoints) return std::nullopt;
  t_early /= static_cast<double>(early.size());
  t_late /= static_cast<double>(late.size());
  if (!(t_late > t_early)) return std::nullopt;
  // A spinning sensor's halves look opposite ways, and each holds the sideways velocity only
  // with the yaw rate; halves that look the same way (a forward-looking pattern swept over
  // its whole view, as a Livox Avia's) see it whole and set it themselves.
  if (look_early.dot(look_late) > 0.0) forward = false;
  const AlignResult a = detail::align_continued(aligner, early, pose, continuations);
  if (!detail::has_pose(a) || !accepted(a)) return std::nullopt;
  const AlignResult b = detail::align_continued(aligner, late, pose, continuations);
  if (!detail::has_pose(b) || !accepted(b)) return std::nullopt;
  const math::Twist d = detail::twist_of(a.transform.inverse() * b.transform, t_late - t_early);
  const double step = forward ? kForwardMotionStep : kSweepMotionStep;
  math::Twist out = current;
  for (int i = 0; i < 3; ++i) {
    out.v[i] += step * d.v[i];
    out.w[i] += step * d.w[i];
  }
  const double sideways = std::abs(out.v[1]);
  if (forward && !(sideways > kSidewaysSpeed && sideways > kSidewaysShare * std::abs(out.v[0]))) out.v[1] = 0.0;
  return out;
}

static_assert(SweepMotionParts::kMaxParts == static_cast<std::size_t>(math::SweepPath::kMaxSegments),
              "a sweep's parts are the path's segments");

// The caller's motion over a sweep, checked (Error naming what is wrong).
detail::GivenSweep given_sweep_motion(const SweepMotionParts& sweep) {
  const std::size_t n = sweep.motion.size();
  if (n == 0 || n > SweepMotionParts::kMaxParts) {
    throw Error(fmt::format("localize: the sweep's motion has {} parts (1 to {})", n, SweepMotionParts::kMaxParts));
  }
  if (sweep.begin.size() != n) {
    throw Error(fmt::format("localize: the sweep's motion has {} begins for {} parts", sweep.begin.size(), n));
  }
  const char* axes[] = {"x", "y", "z"};
  const auto where = [n](std::size_t k) { return n > 1 ? fmt::format(" (part {})", k) : std::string(); };
  std::vector<math::Twist> twists(n);
  for (std::size_t k = 0; k < n; ++k) {
    const SweepMotion& m = sweep.motion[k];
    for (int i = 0; i < 3; ++i) {
      if (!std::isfinite(m.linear[i])) {
        throw Error(fmt::format("localize: the sweep's motion{}: linear.{} is {}", where(k), axes[i], m.linear[i]));
      }
      if (!std::isfinite(m.angular[i])) {
        throw Error(fmt::format("localize: the sweep's motion{}: angular.{} is {}", where(k), axes[i], m.angular[i]));
      }
      twists[k].v[i] = m.linear[i];
      twists[k].w[i] = m.angular[i];
    }
  }
  detail::GivenSweep given;
  if (n == 1) {
    given.mean = twists[0];
    return given;
  }
  for (std::size_t k = 0; k < n; ++k) {
    const double next = k + 1 < n ? sweep.begin[k + 1] : sweep.end;
    if (!std::isfinite(sweep.begin[k]) || !std::isfinite(next) || !(next > sweep.begin[k])) {
      throw Error(fmt::format("localize: the sweep's motion{}: begins at {} and ends at {} s: the parts must be finite "
                              "and follow each other in time",
                              where(k), sweep.begin[k], next));
    }
  }
  const double span = sweep.end - sweep.begin[0];
  for (std::size_t k = 0; k < n; ++k) {
    const double weight = ((k + 1 < n ? sweep.begin[k + 1] : sweep.end) - sweep.begin[k]) / span;
    for (int i = 0; i < 3; ++i) {
      given.mean.v[i] += weight * twists[k].v[i];
      given.mean.w[i] += weight * twists[k].w[i];
    }
    given.parts.emplace_back(sweep.begin[k], twists[k]);
  }
  return given;
}

}  // namespace

namespace detail {

// GPU preprocessing: one CudaScanFilter per concurrent preprocess() caller, each on its
// own stream. A caller takes an idle filter (or makes one, on the device of the first)
// and gives it back, so the pool grows to the number of reader threads and no further,
// and callers never wait for each other beyond taking a filter.
class GpuFilterPool {
 public:
  // Makes the first filter on the aligner's device (ExecutionOptions::device; -1: the calling
  // thread's current one), so a CUDA failure surfaces when the Localizer is built, not on
  // a reader thread.
  explicit GpuFilterPool(int device) {
    idle_.push_back(std::make_unique<detail::CudaScanFilter>(device));
    device_ = idle_.back()->device();
  }

  PointCloud run(PointCloudView scan, const float* intensity, const float* time, const math::SweepPath* path,
                 const LocalizerSettings& s, double leaf) {
    std::unique_ptr<detail::CudaScanFilter> filter = take();
    // Back to the pool on every exit: after an Error (a leaf too small for the scan) the
    // filter is intact, and after a CudaError its next call first waits for what it left
    // queued.
    struct GiveBack {
      GpuFilterPool& pool;
      std::unique_ptr<detail::CudaScanFilter>& filter;
      ~GiveBack() { pool.give(std::move(filter)); }
    } give_back{*this, filter};
    return filter->crop_and_downsample(scan, intensity, s.min_range, s.max_range, leaf, time, path);
  }

 private:
  std::unique_ptr<detail::CudaScanFilter> take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        std::unique_ptr<detail::CudaScanFilter> f = std::move(idle_.back());
        idle_.pop_back();
        return f;
      }
    }
    return std::make_unique<detail::CudaScanFilter>(device_);  // outside the lock: it allocates on the device
  }

  void give(std::unique_ptr<detail::CudaScanFilter> filter) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      idle_.push_back(std::move(filter));
    } catch (...) {
      // Out of host memory: the filter is released and the next caller makes a new one.
    }
  }

  std::mutex mutex_;
  std::vector<std::unique_ptr<detail::CudaScanFilter>> idle_;
  int device_ = 0;
};

}  // namespace detail

double min_voxel_leaf(const LocalizerSettings& s) {
  if (!std::isfinite(s.max_range) || !(s.max_range > 0.0)) return 0.0;
  // The filter may shrink the leaf by 0.7 four times for a sparse scan (preprocess_points).
  const double shrink = s.min_scan_points > 0 ? 0.7 * 0.7 * 0.7 * 0.7 : 1.0;
  return 2.0 * s.max_range / kMaxScanVoxelCellsPerAxis / shrink;
}

void validate(const LocalizerSettings& s) {
  validate(s.align);
  // Each number against its range in the one list of fields (ndtcu/fields.hpp).
  check_ranges(s, [](const std::string& name, const std::string& value, bool real, const FieldRange& range) {
    const bool half = range.bounded() && !(std::isfinite(range.lo) && std::isfinite(range.hi));
    throw Error("localizer " + name + " must be " + (real && half ? "finite and " : "") + range.text() +
                (range.note ? std::string(" (") + range.note + ")" : std::string()) + ", got " + value);
  });
  // The rules between two settings.
  if (s.search_step_size > 0.0 && 2.0 * s.search_step_size < s.align.epsilon) {
    // Steps are kept in [epsilon / 2, step]: an empty range (see validate(AlignSettings)).
    throw Error("localizer search_step_size must be 0 or at least half of epsilon (" +
                ndtcu::number_text(0.5 * s.align.epsilon) + " m), got " + ndtcu::number_text(s.search_step_size));
  }
  if (!(s.max_range > s.min_range)) {
    throw Error("localizer max_range must exceed min_range (" + ndtcu::number_text(s.min_range) + "), got " +
                ndtcu::number_text(s.max_range));
  }
  if (s.voxel_leaf > 0.0 && s.voxel_leaf < min_voxel_leaf(s)) {
    // Checked here, before any scan: the filter refuses such a leaf on every frame, and a
    // run of frames all skipped would say nothing of why.
    throw Error(fmt::format("localizer voxel_leaf {} m is below the smallest leaf {} m for max_range {} m (at most "
                            "1,000,000 cells along each axis of the crop's 2 x max_range{})",
                            s.voxel_leaf, min_voxel_leaf(s), s.max_range,
                            s.min_scan_points > 0 ? ", at the leaf shrunk to 0.7^4 for min_scan_points" : ""));
  }
  if (!(s.max_search_radius >= s.search_radius)) {
    throw Error("localizer max_search_radius must be in [search_radius = " + ndtcu::number_text(s.search_radius) +
                ", 200] m, got " + ndtcu::number_text(s.max_search_radius));
  }
  if (s.recovery != Recovery::None && s.recovery != Recovery::LastGood && s.recovery != Recovery::Hypotheses) {
    throw Error("localizer recovery must be none, last-good or hypotheses, got " +
                std::to_string(static_cast<int>(s.recovery)));
  }
  if (s.refine_ratio > 0.0) {  // the finer map's resolution must be one a map can have
    AlignSettings fine = s.align;
    fine.resolution = s.refine_ratio * s.align.resolution;
    try {
      validate(fine);
    } catch (const Error& e) {
      throw Error(std::string("localizer refine_ratio ") + number_text(s.refine_ratio) + " x resolution " +
                  number_text(s.align.resolution) + ": " + e.what());
    }
  }
  if (s.align.prior.active()) {
    throw Error("localizer: align.prior is set, but the localizer sets each frame's prior itself (prediction_prior, "
                "regularization_scale_factor); leave align.prior empty");
  }
}

const char* to_string(Recovery recovery) {
  switch (recovery) {
    case Recovery::None: return "none";
    case Recovery::LastGood: return "last-good";
    case Recovery::Hypotheses: return "hypotheses";
  }
  return "?";
}

Recovery recovery_from_string(const std::string& name) {
  return enum_from_name<Recovery>(name, "recovery");
}

const char* to_string(Deskew deskew) {
  switch (deskew) {
    case Deskew::Off: return "off";
    case Deskew::Auto: return "auto";
    case Deskew::ConstantVelocity: return "constant-velocity";
    case Deskew::Odometry: return "odometry";
    case Deskew::Imu: return "imu";
  }
  return "?";
}

Deskew deskew_from_string(const std::string& name) {
  return enum_from_name<Deskew>(name, "deskew");
}

const char* to_string(FrameStatus status) {
  switch (status) {
    case FrameStatus::Tracked: return "tracked";
    case FrameStatus::Recovered: return "recovered";
    case FrameStatus::Lost: return "lost";
    case FrameStatus::Degenerate: return "degenerate";
    case FrameStatus::Uncertain: return "uncertain";
  }
  return "?";
}

const char* to_string(FrameCheck check) {
  switch (check) {
    case FrameCheck::Passed: return "passed";
    case FrameCheck::DegeneracyProbe: return "degeneracy probe";
    case FrameCheck::TooFewPoints: return "too few points";
    case FrameCheck::NoPose: return "no pose";
    case FrameCheck::NotConverged: return "not converged";
    case FrameCheck::MatchedRatio: return "matched ratio";
    case FrameCheck::Nvtl: return "nvtl";
    case FrameCheck::TypicalNvtl: return "typical nvtl";
    case FrameCheck::MahalanobisGate: return "mahalanobis gate";
    case FrameCheck::Ambiguous: return "ambiguous";
    case FrameCheck::ProbeFoundBetter: return "probe found better";
    case FrameCheck::CovarianceBound: return "covariance bound";
  }
  return "?";
}

const char* to_string(FrameStage stage) {
  switch (stage) {
    case FrameStage::None: return "none";
    case FrameStage::Prediction: return "prediction";
    case FrameStage::Continuation: return "continuation";
    case FrameStage::LastGood: return "last-good";
    case FrameStage::Probe: return "probe";
    case FrameStage::HeadingSearch: return "heading search";
    case FrameStage::RotationSearch: return "rotation search";
    case FrameStage::PositionSearch: return "position search";
    case FrameStage::WideSearch: return "wide search";
    case FrameStage::InitialSearch: return "initial search";
    case FrameStage::GlobalSearch: return "global search";
    case FrameStage::SweepMotion: return "sweep motion";
  }
  return "?";
}

FrameCheck frame_check_from_string(const std::string& name) {
  return enum_from_name<FrameCheck>(name, "frame check");
}

FrameStage frame_stage_from_string(const std::string& name) {
  return enum_from_name<FrameStage>(name, "frame stage");
}

Localizer::Impl::Impl(const LocalizerSettings& s, const ExecutionOptions& e)
    : settings(s), aligner(s.align, e) {
  if (s.gpu_preprocess && aligner.backend() == Backend::Cuda) {
    gpu_filters = std::make_unique<detail::GpuFilterPool>(e.device);
  }
}
Localizer::Impl::~Impl() = default;

Localizer::Localizer(const LocalizerSettings& settings, const ExecutionOptions& execution) {
  validate(settings);
  validate(execution);
  impl_ = std::make_unique<Impl>(settings, execution);
  if (settings.align.covariance != CovarianceMode::Autoware) {
    detail::log().warn("localizer: NVTL threshold {} was tuned with the autoware covariance, not '{}'",
                       settings.nvtl_threshold, to_string(settings.align.covariance));
  }
}
Localizer::~Localizer() = default;
Localizer::Localizer(Localizer&&) noexcept = default;
Localizer& Localizer::operator=(Localizer&&) noexcept = default;

const LocalizerSettings& Localizer::settings() const noexcept { return impl_->settings; }
const ExecutionOptions& Localizer::execution() const noexcept { return impl_->aligner.execution(); }
Backend Localizer::backend() const noexcept { return impl_->aligner.backend(); }
Backend Localizer::preprocess_backend() const noexcept { return impl_->gpu_filters ? Backend::Cuda : Backend::Cpu; }
const Aligner& Localizer::aligner() const noexcept { return impl_->aligner; }

void Localizer::set_map(PointCloudView map) {
  Impl& m = *impl_;
  m.aligner.set_target(map);
  if (m.settings.refine_ratio > 0.0) {
    if (!m.fine) m.fine.emplace(m.fine_settings(), m.aligner.execution());
    try {
      m.fine->set_target(map);
    } catch (const CudaError&) {
      throw;
    } catch (const Error& e) {
      // The finer map is the refine ratio's: say so (a resolution the user never gave).
      throw Error("localizer refine_ratio " + number_text(m.settings.refine_ratio) + " x resolution " +
                  number_text(m.settings.align.resolution) + ": " + e.what());
    }
  }
  m.typical_nvtl = std::numeric_limits<double>::quiet_NaN();  // another map, other scores
  m.drop_global();
}
// A map given as voxels has no finer voxels: its frames are not refined (refine_ratio).
void Localizer::set_map(std::shared_ptr<const VoxelMap> map) {
  impl_->aligner.set_target(std::move(map));
  impl_->fine.reset();
  impl_->typical_nvtl = std::numeric_limits<double>::quiet_NaN();
  impl_->drop_global();
}
void Localizer::set_map(std::shared_ptr<TiledVoxelMap> tiles) {
  impl_->aligner.set_target(std::move(tiles));
  impl_->fine.reset();
  impl_->typical_nvtl = std::numeric_limits<double>::quiet_NaN();
  impl_->drop_global();
}
void Localizer::update_map(std::shared_ptr<const VoxelMap> map) {
  impl_->aligner.set_target(std::move(map));
  impl_->fine.reset();  // its voxels are those of the map before
  impl_->drop_global();
}
void Localizer::stage_map(std::shared_ptr<const VoxelMap> map) { impl_->aligner.stage_target(std::move(map)); }
bool Localizer::refines() const noexcept { return impl_->fine.has_value(); }

void Localizer::set_initial_pose(const Eigen::Matrix4d& pose) {
  check_rigid(pose, "initial pose");
  impl_->initial = pose;
  impl_->known = 0;
  impl_->sweep_twist.reset();
  impl_->frame_times_disagree = false;
  impl_->last_covariance.setZero();
  impl_->initialized = true;
  impl_->consecutive_lost = 0;
  impl_->first_time = std::numeric_limits<double>::quiet_NaN();
  impl_->initial_search.reset();
  impl_->initial_global = false;
}

void Localizer::set_initial_global() {
  Impl& m = *impl_;
  if (!m.aligner.has_target()) throw Error("localizer: set_initial_global needs a map (call set_map first)");
  m.global_unavailable = false;
  if (!m.global) m.global = std::make_unique<InitialPoseSearch>(m.aligner);  // throws for a map it cannot search
  set_initial_pose(Eigen::Matrix4d::Identity());
  m.initial_global = true;
}

InitialPoseSearch* Localizer::Impl::global_search() {
  if (global || global_unavailable) return global.get();
  try {
    global = std::make_unique<InitialPoseSearch>(aligner);
  } catch (const Error& e) {
    global_unavailable = true;
    detail::log().warn("localizer: no global search of this map: {}", e.what());
  }
  return global.get();
}

void Localizer::set_initial_region(const Eigen::Matrix4d& around, double radius, double yaw_range_deg) {
  check_rigid(around, "initial region");
  InitialPoseOptions o;  // find_initial_pose's defaults: 32 places refined, a 1 m and 15 deg grid
  o.radius = radius;
  o.yaw_range_deg = yaw_range_deg;
  (void)initial_pose_hypotheses(matrix_to_pose(around), o);  // throws for a region the search refuses
  set_initial_pose(around);
  impl_->initial_search = o;
}

bool Localizer::initialized() const noexcept { return impl_->initialized; }
int Localizer::consecutive_lost() const noexcept { return impl_->consecutive_lost; }
bool Localizer::frame_times_disagree() const noexcept { return impl_->frame_times_disagree; }

PointCloud Localizer::preprocess(const PointCloud& scan) const {
  return preprocess_points(scan, scan.intensity_or_null(), scan.time_or_null());
}

PointCloud Localizer::preprocess(PointCloudView scan) const { return preprocess_points(scan, nullptr); }

PointCloud Localizer::preprocess_points(PointCloudView scan, const float* intensity, const float* time,
                                         const math::SweepPath* path) const {
  NDTCU_NVTX_RANGE("preprocess");
  const auto& s = impl_->settings;
  if (!time || !path || !math::moves(*path)) path = nullptr;  // nothing to de-skew: the points as given
  // On the CPU, the de-skewed scan (every point moved to the reference time, before the
  // crop as on the GPU), which the crop then reads in place of the scan.
  std::vector<Eigen::Vector3f> deskewed;
  if (path && !impl_->gpu_filters) {
    NDTCU_NVTX_RANGE("deskew");
    deskewed.assign(scan.points, scan.points + scan.size());
    for (std::size_t i = 0; i < deskewed.size(); ++i) {
      math::deskew_point(*path, time[i], deskewed[i].x(), deskewed[i].y(), deskewed[i].z());
    }
    scan.points = deskewed.data();
  }
  // The filter at `leaf`: on the GPU (crop and de-skew included), or the CPU's crop done once.
  std::optional<PointCloud> cropped;
  const auto filter = [&](double leaf) {
    if (impl_->gpu_filters) return impl_->gpu_filters->run(scan, intensity, time, path, s, leaf);
    if (!cropped) cropped = detail::crop_points(scan, intensity, time, s.min_range, s.max_range);
    return leaf > 0.0 ? voxel_downsample(*cropped, leaf) : *cropped;
  };
  double leaf = s.voxel_leaf;
  PointCloud out = filter(leaf);
  // Sparse scans: a smaller leaf until min_scan_points survive (or every point the crop
  // kept has), bounded (see LocalizerSettings::min_scan_points).
  for (int k = 0; k < 4 && leaf > 0.0 && out.size() < s.min_scan_points; ++k) {
    const std::size_t before = out.size();
    leaf *= 0.7;
    PointCloud finer = filter(leaf);
    if (finer.size() <= before) break;  // every point the crop kept is in its own cell already
    out = std::move(finer);
  }
  return out;
}

Eigen::Matrix4d Localizer::predict(double time) const {
  const Impl& m = *impl_;
  if (!m.initialized) throw Error("localizer: predict before set_initial_pose");
  if (m.known < 2) return m.anchor();
  Eigen::Matrix4d delta;
  double gap = 0.0;
  m.velocity(delta, gap);
  double s = 1.0;
  // Scale the motion by elapsed time when the stamps allow it (frames lost in between, or
  // an uneven rate); equal, decreasing or non-finite stamps predict one frame's motion.
  if (gap > 0.0 && std::isfinite(gap) && std::isfinite(time) && time > m.last_time) s = (time - m.last_time) / gap;
  s = std::min(s, m.settings.max_prediction_scale);
  return m.last * scale_motion(delta, s);
}

LocalizationResult Localizer::localize(const PointCloud& scan, double time) {
  return localize_points(scan, scan.intensity_or_null(), scan.time_or_null(), time, nullptr, nullptr);
}

LocalizationResult Localizer::localize(PointCloudView scan, double time) {
  return localize_points(scan, nullptr, nullptr, time, nullptr, nullptr);
}

LocalizationResult Localizer::localize_points(PointCloudView scan, const float* intensity, const float* times,
                                              double time, const Eigen::Matrix4d* prediction,
                                              const Eigen::Matrix<double, 6, 6>* covariance,
                                              const SweepMotionParts* sweep) {
  const auto t0 = std::chrono::steady_clock::now();
  if (prediction) {
    check_rigid(*prediction, "localize: the prediction");
    detail::check_pose_matrix(*covariance, "localize: the prediction's covariance");
  }
  // The caller's motion over the sweep: its parts (two or more), and their mean over the
  // sweep (what the passes, the refinement's rule and the IMU's translation weigh).
  std::optional<detail::GivenSweep> given;
  if (sweep) given = given_sweep_motion(*sweep);
  Impl::DeskewMotion motion;
  if (times && impl_->settings.deskew != Deskew::Off && impl_->initialized) {
    // The sweep's span (the finite times; deskew_point skips the others), which only the
    // IMU's mean rate needs.
    double t_min = 0.0, t_max = 0.0;
    const Deskew mode = impl_->settings.deskew;
    if (mode == Deskew::Imu || (mode == Deskew::Auto && impl_->imu_counts.added > 0)) {
      time_span(times, scan.size(), t_min, t_max);
    }
    motion = impl_->deskew_motion(time, prediction, given ? &*given : nullptr, t_min, t_max);
    impl_->note_imu_coverage(motion, time, t_min, t_max);
    const auto part_moves = [](const std::pair<double, math::Twist>& part) { return math::moves(part.second); };
    if (motion.twist && !math::moves(*motion.twist) && std::none_of(motion.parts.begin(), motion.parts.end(), part_moves)) {
      motion.twist.reset();
    }
  }
  std::optional<math::Twist> twist = motion.twist;  // the re-de-skew passes replace it
  // The points' path: the twist, or the IMU's rate part by part with the twist's translation.
  const auto path_of = [&motion](const math::Twist& xi) { return Impl::sweep_path(xi, motion); };
  PointCloud filtered = [&] {
    if (!twist) return preprocess_points(scan, intensity, times);
    const math::SweepPath path = path_of(*twist);
    return preprocess_points(scan, intensity, times, &path);
  }();
  Impl& m = *impl_;
  const SweepExtent extent = times ? sweep_extent(scan, times, m.settings.max_range) : SweepExtent{};
  double pre_ms = detail::ms_since(t0);
  const Impl::FrameState before = m.frame_state();
  // What the frame's refinement weighs (Impl::deskew_shift); 0 again once the frame is done.
  struct ShiftReset {
    double& shift;
    ~ShiftReset() { shift = 0.0; }
  } shift_reset{m.deskew_shift};
  // A sweep whose motion is not known whole (no twist yet, or the IMU's rotation before
  // a translation is: no prediction given and fewer than two good poses) may be bent by
  // anything: it is not refined either. A motion the caller gave for the sweep
  // (SweepMotion) is its whole motion.
  const bool motion_given = given && twist && motion.source != Deskew::ConstantVelocity;
  const bool whole_motion = twist && (prediction || before.known >= 2 || motion_given);
  m.deskew_shift = extent.t_max > 0.0 && m.settings.deskew != Deskew::Off && !whole_motion
                       ? std::numeric_limits<double>::infinity()
                       : (twist ? deskew_shift(extent, *twist) : 0.0);
  // The de-skew term of the frame's covariance, and its pose at its sweep's mean time that
  // the motion model keeps (Impl::last_mid), for each pass's motion; reset once the frame is
  // done, which leaves its motion for the next frame to be held against.
  struct DeskewTermReset {
    Impl& m;
    ~DeskewTermReset() {
      m.deskew_term = false;
      m.frame_alternatives.clear();
      m.frame_mid.setIdentity();
      m.frame_mid_time = 0.0;
      m.frame_turn_set = false;
    }
  } deskew_term_reset{m};
  const bool swept = extent.t_max > 0.0 && m.settings.deskew != Deskew::Off;
  const bool previous_known = m.deskew_previous && before.known > 0 && before.consecutive_lost == 0 &&
                              m.deskew_previous_time == before.last_time;
  const bool rotation_known = motion.source == Deskew::Imu && motion.imu == ImuCoverage::Covered;
  // The frame before took its sweep's own motion (Impl::sweep_twist), which this frame's
  // first pass takes for constant velocity's.
  const bool own_before = m.sweep_twist && before.known > 0 && before.consecutive_lost == 0 &&
                          before.last_time == m.sweep_twist_time;
  const bool all_known = motion_given && motion.source == Deskew::Odometry && !motion.parts.empty();
  // A motion made from the localizer's own poses `gap` seconds apart (MotionOrigin
  // Prediction and PoseMids, below) carries their errors too (Impl::deskew_pose_noise).
  //
  // The motion changed by d from the last frame's, `spacing` seconds before. A motion from
  // poses or a prediction (the mean since the last pose) lags the sweep (0 to t_max after
  // the frame's time) by about half the spacing and half the sweep: it misses d (spacing +
  // t_max) / (2 spacing). A motion given over the sweep is its mean there and misses how it
  // changes within it: d t_max / spacing. Both are d at 10 Hz frames of a 0.1 s sweep, and
  // shrink for frames further apart (1 Hz: 0.55 d and 0.1 d). A motion between two poses at
  // their sweeps' mean times (constant velocity, a pass from the last good pose:
  // Impl::last_mid) is centred half the spacing before the sweep's: it misses d / 2.
  const double spacing = time - before.last_time;
  double lag = 1.0;
  if (spacing > 0.0 && std::isfinite(spacing) && extent.t_max > 0.0) {
    lag = std::min(1.0, motion_given ? extent.t_max / spacing : 0.5 * (spacing + extent.t_max) / spacing);
  }
  const double mid_lag = std::min(lag, 0.5);
  // exp(t_mean xi): the scan de-skewed with `xi` (or used as read) pins the pose at its
  // sweep's mean time whatever `xi` gets wrong.
  const auto mid_of = [&extent](const std::optional<math::Twist>& xi) {
    return xi ? sweep_pose(*xi, extent.t_mean) : Eigen::Matrix4d::Identity();
  };
  // Where the motion a sweep is de-skewed with came from, for its de-skew term.
  enum class MotionOrigin {
    Other,       // given with the scan, the frame before's own motion, or none
    Prediction,  // from the last good pose to the caller's prediction, `gap` seconds on
    PoseMids,    // between two good poses at their sweeps' mean times, `gap` seconds apart
    OwnSweep,    // the sweep's own: its halves aligned apart, or a candidate turn
  };
  const auto set_deskew_term = [&](const std::optional<math::Twist>& xi, MotionOrigin origin, double gap) {
    const bool from_poses = origin == MotionOrigin::Prediction || origin == MotionOrigin::PoseMids;
    const bool own = origin == MotionOrigin::OwnSweep;
    m.frame_mid = mid_of(xi);
    m.frame_mid_time = extent.t_mean;
    m.frame_turn_set = false;
    m.deskew_term = swept;
    m.deskew_time2 = extent.t2_mean;
    // Once every sweep takes its own motion (Impl::frame_times_disagree), one frame's is no
    // check on the next's: both come from halves that settle alike (at rest on the 1 Hz
    // stop-and-go drive, 9.5 cm off reporting 0.8 cm), and each takes the halves' own sigma.
    const bool after_own = own && m.frame_times_disagree;
    m.deskew_sigma = deskew_sigma(xi, previous_known && !after_own ? m.deskew_previous : std::nullopt, rotation_known,
                                  all_known, origin == MotionOrigin::PoseMids ? mid_lag : lag, spacing, own,
                                  m.settings);
    m.deskew_pose_noise.setZero();
    if (xi && from_poses && gap > 0.0 && std::isfinite(gap) && before.last_covariance.allFinite()) {
      m.deskew_pose_noise = extent.t2_mean / (gap * gap) * before.last_covariance;
      if (rotation_known) {
        m.deskew_pose_noise.bottomRows<3>().setZero();
        m.deskew_pose_noise.rightCols<3>().setZero();
      }
    }
  };
  {
    // The first pass's motion: constant velocity's (or the IMU's translation) from the last
    // two good poses, unless it is the frame before's own sweep motion; odometry's from the
    // last good pose to the prediction, unless given over the sweep.
    const bool from_odometry = prediction && (motion.source == Deskew::Odometry || motion.source == Deskew::Imu);
    MotionOrigin origin = MotionOrigin::Other;
    double gap = 0.0;
    if (motion_given) {
      origin = MotionOrigin::Other;
    } else if (from_odometry && before.known > 0) {
      origin = MotionOrigin::Prediction;
      gap = time - before.last_time;
    } else if ((motion.source == Deskew::ConstantVelocity || motion.source == Deskew::Imu) && !own_before &&
               before.known == 2) {
      origin = MotionOrigin::PoseMids;
      gap = before.last_time - before.before_last_time;
    }
    set_deskew_term(twist, origin, gap);
  }
  LocalizationResult r = localize_frame(filtered, time, prediction, covariance);
  r.deskewed = twist.has_value();
  // A swept frame lost on its first motion: a turn that began within the sweep bends it
  // away from every motion before it. Its own motion, from its halves aligned apart from the
  // prediction (each held to the frame's checks; not from any attempt's pose, towards which
  // the motion would bend the scan), de-skews it anew, and the frame runs once more from the
  // prediction; the checks judge that run. Only with a motion before it, which the one found
  // must plausibly follow (plausible_change): a half scan holds a yaw rate and a sideways
  // velocity only together, and one taken for the other is a motion no vehicle makes.
  bool motion_found = false;
  bool turn_found = false;  // by a candidate turn (below), which runs no pass after it
  // The IMU's rotation, when it covered the sweep, is kept: a motion the frame finds (here
  // and in the passes below) mends the translation.
  const bool imu_rotation = motion.twist && motion.source == Deskew::Imu && motion.imu == ImuCoverage::Covered;
  const bool may_find_motion = twist && times && m.settings.deskew != Deskew::Off && m.settings.deskew_passes > 0 &&
                               !motion_given && deskew_reach(extent) > 0.0 && spacing > 0.0 && std::isfinite(spacing);
  // The frame run once more, from the state before it, on `bent`: the scan de-skewed with
  // `xi`, a motion it found itself. Its checks judge that run.
  // With `path`, the scan was de-skewed along it (its pose at the sweep's mean time is the
  // one kept), not along `xi`.
  const auto run_on_own_motion = [&](const math::Twist& xi, const PointCloud& bent, const Eigen::Matrix4d& start,
                                     const math::SweepPath* path = nullptr) {
    m.restore(before);
    m.deskew_shift = deskew_shift(extent, xi);
    set_deskew_term(xi, MotionOrigin::OwnSweep, 0.0);
    if (path) {
      m.frame_mid = sweep_pose(*path, extent.t_mean);
      if (path->segments > 1) {  // a turn that began within the sweep (Impl::last_turn)
        m.frame_turn_time = 0.5 * (path->begin[path->segments - 1] + extent.t_last);
        m.frame_turn = sweep_pose(*path, m.frame_turn_time);
        m.frame_turn_set = true;
      }
    }
    return localize_frame(bent, time, prediction, covariance, &start);
  };
  // The frame found on its own motion `xi` (the scan de-skewed with it, `bent`) replaces the
  // lost one: recovered (an uncertain verdict stays), its stage SweepMotion.
  const auto take_own_motion = [&](LocalizationResult&& found, const math::Twist& xi, PointCloud&& bent) {
    add_work(found, r);
    if (found.status == FrameStatus::Tracked) found.status = FrameStatus::Recovered;
    found.stage = FrameStage::SweepMotion;
    found.deskewed = true;
    found.deskew_passes = 1;
    r = std::move(found);
    twist = xi;
    filtered = std::move(bent);
    motion_found = true;
  };
  if (r.status == FrameStatus::Lost && may_find_motion) {
    const Eigen::Matrix4d start = r.prediction;
    const auto accepted = [&m](const AlignResult& a) { return m.accept(a); };
    math::Twist xi = *twist;
    PointCloud bent = filtered;
    for (int pass = 0; pass < kSweepMotionPasses; ++pass) {
      const std::optional<math::Twist> own = sweep_motion(accepted, m.aligner, bent, start, xi, kLostHalfContinuations,
                                                                  m.settings.deskew_forward);
      if (!own) {
        detail::log().debug("localizer: frame at t={} lost; its halves, pass {}, gave no motion", time, pass + 1);
        break;
      }
      const bool settled = twist_change(*own, xi) * deskew_reach(extent) <= kDeskewPassTolerance;
      xi = *own;
      if (imu_rotation) std::copy(std::begin(motion.twist->w), std::end(motion.twist->w), std::begin(xi.w));
      const auto t1 = std::chrono::steady_clock::now();
      const math::SweepPath path = path_of(xi);
      bent = preprocess_points(scan, intensity, times, &path);
      pre_ms += detail::ms_since(t1);
      if (settled) break;
    }
    if (twist_change(xi, *twist) > 0.0 && plausible_change(*twist, xi, spacing + extent.t_max, time)) {
      const Impl::FrameState after = m.frame_state();
      LocalizationResult again = run_on_own_motion(xi, bent, start);
      detail::log().debug("localizer: frame at t={} lost; on its own motion v ({:.3f}, {:.3f}, {:.3f}) m/s, w ({:.4f}, "
                          "{:.4f}, {:.4f}) rad/s: {}",
                          time, xi.v[0], xi.v[1], xi.v[2], xi.w[0], xi.w[1], xi.w[2], to_string(again.status));
      if (again.status == FrameStatus::Lost) {
        m.restore(after);
        add_work(r, again);
      } else {
        take_own_motion(std::move(again), xi, std::move(bent));
      }
    }
  }
  // A swept frame still lost: a turn that began within its sweep or just before it, whose
  // rate the halves took for a sideways velocity (plausible_change refused it). The fast
  // drive's corners step from 0 to 73-109 deg/s about the sensor's z axis at 5-7 m/s: the
  // sweep bends by up to 11 deg, which neither the searches (on the bent scan) nor the halves
  // mend. Each candidate turn, kTurnRates added to the motion's rate about z from one of
  // kTurnOnsets of the sweep on, de-skews the scan anew and the frame runs once from the
  // prediction; the checks judge each run, and the best NVTL of the runs they take is kept.
  // Not with the IMU's rotation, which measured the turn.
  if (r.status == FrameStatus::Lost && may_find_motion && !motion_found && !imu_rotation) {
    Eigen::Matrix4d start = r.prediction;
    const Impl::FrameState lost_state = m.frame_state();
    std::optional<LocalizationResult> best;
    std::vector<std::pair<Pose6, double>> tried;  // each candidate's pose and NVTL
    std::size_t best_tried = 0;
    math::Twist best_xi = *twist;
    math::SweepPath best_path;
    PointCloud best_bent;
    double best_onset = 0.0;
    double best_rate = 0.0;
    std::vector<std::pair<double, double>> turns_run;  // each candidate's onset and rate, run once
    // One candidate: the turn `rate` added from `onset` of the sweep on. True when the checks
    // took it with a better NVTL than the best so far (which it then replaces).
    const auto try_turn = [&](double onset, double rate) {
      const auto same = [&](const std::pair<double, double>& t) {
        return std::abs(t.first - onset) < 1e-9 && std::abs(t.second - rate) < 1e-9;
      };
      if (std::any_of(turns_run.begin(), turns_run.end(), same)) return false;
      turns_run.emplace_back(onset, rate);
      math::Twist xi = *twist;
      xi.w[2] += rate;
      math::SweepPath path = path_of(xi);
      if (onset > 0.0) {
        path = math::SweepPath{};
        path.segments = 2;
        path.begin[0] = extent.t_first;
        path.begin[1] = extent.t_first + onset * (extent.t_last - extent.t_first);
        path.twist[0] = *twist;
        path.twist[1] = xi;
        math::anchor_path(path);
      }
      const auto t1 = std::chrono::steady_clock::now();
      PointCloud bent = preprocess_points(scan, intensity, times, &path);
      pre_ms += detail::ms_since(t1);
      LocalizationResult again = run_on_own_motion(xi, bent, start, &path);
      if (detail::has_pose(again.alignment)) {
        tried.emplace_back(matrix_to_pose(again.alignment.transform), again.alignment.nvtl);
      }
      detail::log().debug("localizer: frame at t={} lost; turning {:+.3f} rad/s more about z from {:.3f} of the "
                          "sweep on: {} (NVTL {:.3f}, {})",
                          time, rate, onset, to_string(again.status), again.alignment.nvtl,
                          to_string(again.decided_by));
      if (again.status == FrameStatus::Lost || (best && !(again.alignment.nvtl > best->alignment.nvtl))) {
        add_work(r, again);
        return false;
      }
      if (best) add_work(r, *best);
      best = std::move(again);
      best_tried = tried.size() - 1;
      best_xi = xi;
      best_path = path;
      best_bent = std::move(bent);
      best_onset = onset;
      best_rate = rate;
      return true;
    };
    const auto run_grid = [&] {
      for (const double onset : kTurnOnsets) {
        for (const double rate : kTurnRates) try_turn(onset, rate);
      }
    };
    run_grid();
    // None taken from the prediction: once more from the lost frame's best attempt, when it
    // lies further from the prediction than a candidate's alignment reaches. At 1 Hz a turn
    // that began after the frame before leaves the prediction 1 m and 12-28 deg off (the
    // stop-and-go drive's corner): every candidate stopped at the iteration limit there,
    // while the searches had found the place, on a scan the turn bent below the NVTL the
    // checks ask for. Each run is judged by every check, as from the prediction.
    if (!best && detail::has_pose(r.alignment)) {
      const Eigen::Matrix4d& found = r.alignment.transform;
      if (detail::translation_gap(found, r.prediction) > kTurnRestartDistance ||
          detail::rotation_gap(r.prediction, found) > kTurnRestartAngle) {
        start = found;
        turns_run.clear();
        run_grid();
      }
    }
    // The grid's best, refined: a turn between its points fits the sweep much better than
    // the nearest of them (the fast drive's corner, HDL-32 seed 2 frame 55: NVTL 3.07 on the
    // grid against 3.22 de-skewed with the true motion). A pattern search about the best:
    // the rate and the onset each a step either way, a step that gains taken, the steps
    // halved when none does.
    if (best) {
      double rate_step = kTurnRefineRateStep;
      double onset_step = kTurnRefineOnsetStep;
      for (int round = 0; round < kTurnRefineRounds && rate_step >= kTurnRefineMinRateStep; ++round) {
        const double centre_rate = best_rate;
        const double centre_onset = best_onset;
        bool gained = false;
        for (const double dr : {-rate_step, rate_step}) {
          if (std::abs(centre_rate + dr) > kTurnRefineMaxRate) continue;
          if (try_turn(centre_onset, centre_rate + dr)) gained = true;
        }
        for (const double don : {-onset_step, onset_step}) {
          const double onset = centre_onset + don;
          if (onset < 0.0 || onset > kTurnRefineMaxOnset) continue;
          if (try_turn(onset, centre_rate)) gained = true;
        }
        if (!gained) {
          rate_step *= 0.5;
          onset_step *= 0.5;
        }
      }
    }
    if (best) {
      // The best once more, with the poses the other candidates found weighed in its
      // covariance (their spread, by NVTL): a turn the sweep holds only loosely is reported
      // as loosely known, and a frame whose candidates disagree by more than
      // max_position_sigma is uncertain.
      for (std::size_t k = 0; k < tried.size(); ++k) {
        if (k != best_tried) m.frame_alternatives.push_back(tried[k]);
      }
      LocalizationResult again = run_on_own_motion(best_xi, best_bent, start, &best_path);
      m.frame_alternatives.clear();
      add_work(again, *best);
      best = std::move(again);
      if (best->status == FrameStatus::Lost) {  // (the same run as before: not expected)
        add_work(r, *best);
        best.reset();
      }
    }
    if (best) {
      // The next frame takes the motion since the turn began.
      take_own_motion(std::move(*best), best_xi, std::move(best_bent));
      turn_found = true;
    } else {
      m.restore(lost_state);
    }
  }
  // A frame after one that took its sweep's own motion, found near its prediction: the speed
  // between the two poses at the frames' times against that sweep's own (kTimeScaleRatio).
  // Once they disagree, no motion is taken from the frames' times again (Impl::
  // frame_times_disagree): every sweep is de-skewed with its own motion, as a first frame is.
  if (r.valid && times && m.settings.deskew != Deskew::Off && !m.frame_times_disagree && !prediction && !motion_given &&
      own_before && r.stage != FrameStage::WideSearch && r.stage != FrameStage::GlobalSearch && spacing > 0.0 &&
      std::isfinite(spacing)) {
    const double between =
        (r.pose.topRightCorner<3, 1>() - before.last.topRightCorner<3, 1>()).norm() / spacing;
    const double own = Eigen::Vector3d(m.sweep_twist->v[0], m.sweep_twist->v[1], m.sweep_twist->v[2]).norm();
    if (between > kTimeScaleRatio * own + kTimeScaleMargin || own > kTimeScaleRatio * between + kTimeScaleMargin) {
      m.frame_times_disagree = true;
      detail::log().warn("frames at t={:.6f} and t={:.6f} are {:.2f} m apart, {:.1f} m/s by their times, but the "
                         "first's sweep moved at {:.1f} m/s by its points' times: the frames' times (their stamps, "
                         "or the scan period they were numbered at) or the points' do not match; from here on each "
                         "sweep is de-skewed with its own motion, none from the frames' times",
                         before.last_time, time, between * spacing, between, own);
    }
  }
  // Re-de-skew (LocalizerSettings::deskew_passes): the motion from the last good pose to the
  // pose found, over the time between them, de-skews the same raw scan again, and the frame
  // runs once more from that pose; its checks judge the last pass. A first frame (no good
  // pose before it) and the first after lost frames (whose last good pose is from before a
  // stretch the motion may have turned through: the fast drive's 90 deg corner) take the
  // sweep's own motion instead (sweep_motion), when no prediction is given. A frame given
  // its sweep's motion runs none: the passes would estimate what was given.
  const bool from_last = before.known > 0 && before.consecutive_lost == 0 && !motion_found && !m.frame_times_disagree;
  const bool own_motion = (!from_last && !prediction) || motion_found;
  if (times && m.settings.deskew != Deskew::Off && m.settings.deskew_passes > 0 && (from_last || own_motion) &&
      !motion_given) {
    const double gap = time - before.last_time;
    const double reach = deskew_reach(extent);
    bool own_taken = motion_found;  // the sweep's own motion was kept (found above, or by a pass)
    const int passes = own_motion ? std::max(m.settings.deskew_passes, kSweepMotionPasses) : m.settings.deskew_passes;
    for (int pass = 0; pass < passes; ++pass) {
      // Only from a pose the checks took: the motion to a lost frame's best attempt, when
      // that pose is wrong, bends the scan towards fitting it, and a pass from it could
      // confirm it.
      if (r.status == FrameStatus::Lost || !(reach > 0.0) || turn_found) break;
      if (from_last && (!(gap > 0.0) || !std::isfinite(gap))) break;
      const Eigen::Matrix4d start = r.pose;
      math::Twist next;
      if (from_last) {
        // From the last good pose at its sweep's mean time to this one's (Impl::last_mid).
        const double mid_gap = time + extent.t_mean - before.last_mid_time;
        if (!(mid_gap > 0.0) || !std::isfinite(mid_gap)) break;
        const Eigen::Matrix4d mid = start * mid_of(twist);
        next = detail::twist_of(before.last_mid.inverse() * mid, mid_gap);
        const double turn_gap = time + extent.t_mean - before.last_turn_time;
        if (before.last_turn_time != before.last_mid_time && turn_gap > 0.0 && std::isfinite(turn_gap)) {
          // The frame before turned within its sweep (Impl::last_turn): the rate since then.
          const math::Twist turn = detail::twist_of(before.last_turn.inverse() * mid, turn_gap);
          std::copy(std::begin(turn.w), std::end(turn.w), std::begin(next.w));
        }
      } else {
        const auto accepted = [&m](const AlignResult& a) { return m.accept(a); };
        const std::optional<math::Twist> own =
            sweep_motion(accepted, m.aligner, filtered, start, twist ? *twist : math::Twist{}, 1,
                         m.settings.deskew_forward);
        if (!own) break;
        next = *own;
        detail::log().debug("localizer: frame at t={} pass {}: the sweep's own motion v ({:.3f}, {:.3f}, {:.3f}) m/s, "
                            "w ({:.4f}, {:.4f}, {:.4f}) rad/s",
                            time, pass + 1, next.v[0], next.v[1], next.v[2], next.w[0], next.w[1], next.w[2]);
      }
      if (imu_rotation) std::copy(std::begin(motion.twist->w), std::end(motion.twist->w), std::begin(next.w));
      if (twist_change(next, twist ? *twist : math::Twist{}) * reach <= kDeskewPassTolerance) break;
      twist = next;
      const auto t1 = std::chrono::steady_clock::now();
      const math::SweepPath path = path_of(*twist);
      filtered = preprocess_points(scan, intensity, times, &path);
      pre_ms += detail::ms_since(t1);
      const Impl::FrameState after = m.frame_state();
      m.restore(before);
      m.deskew_shift = deskew_shift(extent, *twist);
      set_deskew_term(twist, from_last ? MotionOrigin::PoseMids : MotionOrigin::OwnSweep, gap);
      // A pose a search found was confirmed against the gate by that search: the pass from
      // it, on the same scan de-skewed anew, is not held to the gate again.
      LocalizationResult again = [&] {
        m.pass_from_search = is_search(r.stage);
        struct SearchReset {
          bool& flag;
          ~SearchReset() { flag = false; }
        } search_reset{m.pass_from_search};
        return localize_frame(filtered, time, prediction, covariance, &start);
      }();
      if (again.status == FrameStatus::Lost) {
        // The checks refused this pass: the frame stays as the pass before left it (its
        // verdict, and the motion model it advanced).
        m.restore(after);
        add_work(r, again);
        r.deskew_passes += 1;
        break;
      }
      add_work(again, r);
      again.deskew_passes = r.deskew_passes + 1;
      if (again.status == FrameStatus::Tracked && again.stage == FrameStage::Prediction && r.stage != FrameStage::Prediction) {
        // Its start came from the pass before's retry or search: that is what found it.
        again.status = FrameStatus::Recovered;
        again.stage = r.stage;
      }
      if (motion_found) {
        // Whatever the pass's own stage, the frame was found on its own motion.
        again.stage = FrameStage::SweepMotion;
        if (again.status == FrameStatus::Tracked) again.status = FrameStatus::Recovered;
      }
      again.deskewed = math::moves(*twist);
      r = std::move(again);
      own_taken = own_motion;
    }
    // The next frame de-skews with this one's own motion (Impl::sweep_twist).
    if (own_motion) {
      m.sweep_twist = own_taken && r.valid ? twist : std::nullopt;
      m.sweep_twist_time = time;
    }
  }
  if (swept) {
    m.deskew_previous = r.valid ? twist : std::nullopt;
    m.deskew_previous_time = time;
  }
  r.points_in = scan.size();
  r.preprocess_ms = pre_ms;
  r.deskew_motion = motion.twist ? motion.source : Deskew::Off;  // the first pass's motion
  r.imu_coverage = motion.imu;
  return r;
}

LocalizationResult Localizer::localize_preprocessed(PointCloudView filtered, double time) {
  return localize_frame(filtered, time, nullptr, nullptr);
}

LocalizationResult Localizer::localize(const PointCloud& scan, double time, const Eigen::Matrix4d& prediction,
                                       const Eigen::Matrix<double, 6, 6>& covariance) {
  return localize_points(scan, scan.intensity_or_null(), scan.time_or_null(), time, &prediction, &covariance);
}

LocalizationResult Localizer::localize(const PointCloud& scan, double time, const SweepMotion& motion) {
  return localize(scan, time, SweepMotionParts::whole(motion));
}

LocalizationResult Localizer::localize(const PointCloud& scan, double time, const Eigen::Matrix4d& prediction,
                                       const Eigen::Matrix<double, 6, 6>& covariance, const SweepMotion& motion) {
  return localize(scan, time, prediction, covariance, SweepMotionParts::whole(motion));
}

LocalizationResult Localizer::localize(const PointCloud& scan, double time, const SweepMotionParts& motion) {
  return localize_points(scan, scan.intensity_or_null(), scan.time_or_null(), time, nullptr, nullptr, &motion);
}

LocalizationResult Localizer::localize(const PointCloud& scan, double time, const Eigen::Matrix4d& prediction,
                                       const Eigen::Matrix<double, 6, 6>& covariance, const SweepMotionParts& motion) {
  return localize_points(scan, scan.intensity_or_null(), scan.time_or_null(), time, &prediction, &covariance, &motion);
}

SweepMotion sweep_motion_between(const Eigen::Matrix4d& from, const Eigen::Matrix4d& to, double dt) {
  check_rigid(from, "sweep_motion_between: `from`");
  check_rigid(to, "sweep_motion_between: `to`");
  if (!(dt > 0.0) || !std::isfinite(dt)) {
    throw Error(fmt::format("sweep_motion_between: dt must be positive and finite, got {}", dt));
  }
  const math::Twist xi = detail::twist_of(from.inverse() * to, dt);
  SweepMotion out;
  for (int i = 0; i < 3; ++i) {
    out.linear[i] = xi.v[i];
    out.angular[i] = xi.w[i];
  }
  return out;
}

SweepMotionParts sweep_motion_parts(const std::vector<double>& times, const std::vector<Eigen::Matrix4d>& poses,
                                    double scan_time) {
  if (times.size() != poses.size()) {
    throw Error(fmt::format("sweep_motion_parts: {} times for {} poses", times.size(), poses.size()));
  }
  if (poses.size() < 2) throw Error(fmt::format("sweep_motion_parts: {} poses (at least 2)", poses.size()));
  if (!std::isfinite(scan_time)) throw Error(fmt::format("sweep_motion_parts: scan_time is {}", scan_time));
  for (std::size_t k = 0; k < poses.size(); ++k) {
    if (!std::isfinite(times[k]) || (k > 0 && !(times[k] > times[k - 1]))) {
      throw Error(fmt::format("sweep_motion_parts: time {} ({}) is not finite and after the one before it", k, times[k]));
    }
    check_rigid(poses[k], fmt::format("sweep_motion_parts: pose {}", k).c_str());
  }
  // At most kMaxParts + 1 poses, spread evenly over those given, the first and last kept.
  const std::size_t n = poses.size(), keep = std::min(n, SweepMotionParts::kMaxParts + 1);
  std::vector<std::size_t> index(keep);
  for (std::size_t j = 0; j < keep; ++j) index[j] = j * (n - 1) / (keep - 1);
  SweepMotionParts out;
  for (std::size_t j = 0; j + 1 < keep; ++j) {
    const std::size_t a = index[j], b = index[j + 1];
    out.begin.push_back(times[a] - scan_time);
    out.motion.push_back(sweep_motion_between(poses[a], poses[b], times[b] - times[a]));
  }
  out.end = times.back() - scan_time;
  return out;
}

LocalizationResult Localizer::localize_preprocessed(PointCloudView filtered, double time,
                                                    const Eigen::Matrix4d& prediction,
                                                    const Eigen::Matrix<double, 6, 6>& covariance) {
  check_rigid(prediction, "localize: the prediction");
  detail::check_pose_matrix(covariance, "localize: the prediction's covariance");
  return localize_frame(filtered, time, &prediction, &covariance);
}

}  // namespace ndtcu
