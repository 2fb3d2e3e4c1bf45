#pragma once
// The Localizer's state (Localizer::Impl) and what a frame's stages share with it:
// localizer.cpp holds the settings checks, the maps, the prediction and the preprocessing;
// frame_attempts.cpp a frame's attempts, recovery searches and check.
#include <ndtcu/global_search.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/localizer.hpp>

#include "deskew.hpp"

#include <Eigen/Eigenvalues>
#include <Eigen/Geometry>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace ndtcu {

namespace detail {

class GpuFilterPool;  // localizer.cpp

inline constexpr double kPi = 3.14159265358979323846;

// A failed NDT run (empty source, no voxel, no correspondence, singular Hessian) gives no
// pose at all; the others give one to check.
inline bool has_pose(const AlignResult& r) {
  return (r.reason == StopReason::Converged || r.reason == StopReason::MaxIterations) && r.transform.allFinite();
}

// The angles of a pose difference brought into (-pi, pi].
inline Pose6 wrapped(Pose6 d) {
  for (int a = 3; a < 6; ++a) d(a) = std::remainder(d(a), 2.0 * kPi);
  return d;
}

// A covariance's pseudo-inverse: directions of (numerically) zero variance get zero
// information, so they are left out of the gate and the prior rather than taken as certain.
inline Eigen::Matrix<double, 6, 6> information_of(const Eigen::Matrix<double, 6, 6>& covariance) {
  const Eigen::SelfAdjointEigenSolver<Eigen::Matrix<double, 6, 6>> eig(covariance);
  const Eigen::Matrix<double, 6, 1> v = eig.eigenvalues();
  const double floor = 1e-12 * std::max(v.cwiseAbs().maxCoeff(), 0.0);
  Eigen::Matrix<double, 6, 1> inv = Eigen::Matrix<double, 6, 1>::Zero();
  for (int i = 0; i < 6; ++i) {
    if (v(i) > floor && v(i) > 0.0) inv(i) = 1.0 / v(i);
  }
  Eigen::Matrix<double, 6, 6> out = eig.eigenvectors() * inv.asDiagonal() * eig.eigenvectors().transpose();
  return 0.5 * (out + out.transpose());
}

// The constant twist that moves by `delta` in `dt` seconds (SE(3) logarithm over dt).
math::Twist twist_of(const Eigen::Matrix4d& delta, double dt);

// Translation (m) and rotation (rad) between two transforms (frame_attempts.cpp).
double translation_gap(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b);
double rotation_gap(const Eigen::Matrix4d& a, const Eigen::Matrix4d& b);

// How IMU samples cover a sweep [begin, end] (s), and their mean angular rate over it.
struct ImuSweepRate {
  ImuCoverage coverage = ImuCoverage::Missing;
  Eigen::Vector3d rate = Eigen::Vector3d::Zero();  // rad/s, the IMU's frame
  double longest_gap = 0.0;  // the longest stretch of the sweep without a sample (s)
};


// The samples `samples[0, n)` (in time order) over [begin, end]: Missing when none lies
// within `max_gap` of it, Gap when a stretch of it longer than `max_gap` has none (see
// LocalizerSettings::imu_max_gap), else Covered with the mean of the rate interpolated
// linearly between samples (held at the first and last beyond them) over [begin, end]
// (the trapezoid rule, exact for that interpolation); at begin == end, the rate there.
ImuSweepRate imu_sweep_rate(const ImuSample* samples, std::size_t n, double begin, double end, double max_gap);

// The caller's motion over a sweep (Localizer::localize with a SweepMotion or
// SweepMotionParts), checked: its mean twist over the sweep (the parts' weighed by their
// durations; one part's own), and each part's begin (s from the scan's time) and twist when
// there are two or more.
struct GivenSweep {
  math::Twist mean;
  std::vector<std::pair<double, math::Twist>> parts;
};

}  // namespace detail

struct Localizer::Impl {
  LocalizerSettings settings;
  Aligner aligner;
  bool initialized = false;
  Eigen::Matrix4d initial = Eigen::Matrix4d::Identity();  // the guess for the first frame
  // The last two good poses and their times; `known` says how many there are (0-2). The
  // initial pose is not one of them: it is a guess for the first frame, not a pose at a
  // time, so the first velocity comes from the first two localized frames.
  Eigen::Matrix4d last = Eigen::Matrix4d::Identity(), before_last = Eigen::Matrix4d::Identity();
  double last_time = 0.0, before_last_time = 0.0;
  int known = 0;
  // The same two poses at their sweeps' mean point times (the pose times exp(t_mean xi), xi
  // the motion the scan was de-skewed with; the pose itself for a scan without times), and
  // those times: what a swept scan pins whatever its de-skew's motion got wrong. A motion
  // off by d moves the pose at the scan's time by about t_mean d, and the pose at t_mean
  // hardly at all; the de-skew's constant velocity comes from these (sweep_velocity), so a
  // motion's error does not return in the next frame's.
  Eigen::Matrix4d last_mid = Eigen::Matrix4d::Identity(), before_last_mid = Eigen::Matrix4d::Identity();
  double last_mid_time = 0.0, before_last_mid_time = 0.0;
  // The newest pose's sweep at the middle of its last part, and that time, where a turn
  // began within the sweep (a candidate turn, see localize_points); last_mid otherwise. The
  // next frame's passes take their rotation from it: from last_mid, a turn's rate would be
  // averaged with the motion before it began.
  Eigen::Matrix4d last_turn = Eigen::Matrix4d::Identity();
  double last_turn_time = 0.0;
  // The frame being localized: exp(t_mean xi) of the motion its scan is de-skewed with (the
  // identity when it is not), and t_mean (s); advance() takes them. Reset once the frame is done.
  Eigen::Matrix4d frame_mid = Eigen::Matrix4d::Identity();
  double frame_mid_time = 0.0;
  // The same at the middle of the sweep's last part, for last_turn: frame_mid unless a turn
  // began within the sweep (frame_turn_set).
  Eigen::Matrix4d frame_turn = Eigen::Matrix4d::Identity();
  double frame_turn_time = 0.0;
  bool frame_turn_set = false;
  // The covariance of `last` (the frame's reported one): the motion model's prediction
  // starts from it, so along a degenerate stretch's weak directions it keeps growing.
  Eigen::Matrix<double, 6, 6> last_covariance = Eigen::Matrix<double, 6, 6>::Zero();
  // The time of the first frame since set_initial_pose (NaN before it): before the first
  // good pose, the searches widen with the time since then.
  double first_time = std::numeric_limits<double>::quiet_NaN();
  // set_initial_region's search, run on every frame until one is accepted.
  std::optional<InitialPoseOptions> initial_search;
  // set_initial_global: the global search on every frame until one is accepted.
  bool initial_global = false;
  // The global search of the map (stage 4 and set_initial_global), built on first use and
  // dropped when the map changes.
  std::unique_ptr<InitialPoseSearch> global;
  bool global_unavailable = false;  // the map cannot be searched (warned once)
  InitialPoseSearch* global_search();
  void drop_global() {
    global.reset();
    global_unavailable = false;
  }
  int consecutive_lost = 0;
  // A re-de-skew pass starts from a pose a search confirmed against the gate (the frame
  // before the pass came from one): the pass is not held to the gate again (localizer.cpp).
  bool pass_from_search = false;
  // The sweep's own motion that a frame's passes found (localizer.cpp, sweep_motion), and
  // that frame's time: the next frame's constant-velocity motion, in place of the motion
  // between two good poses that is not there yet (the first frame) or spans a lost stretch.
  std::optional<math::Twist> sweep_twist;
  double sweep_twist_time = 0.0;
  // The frames' times disagreed with their points' (localizer.cpp, kTimeScaleRatio): no
  // motion is taken from the poses at the frames' times for the de-skew (constant
  // velocity, the passes from the last good pose) until set_initial_pose.
  bool frame_times_disagree = false;
  // The running mean of the accepted frames' NVTL (NaN before the first), the reference of
  // settings.search_nvtl_ratio.
  double typical_nvtl = std::numeric_limits<double>::quiet_NaN();

  // What a frame changes of the motion model and the scene's score: a re-de-skew pass
  // (settings.deskew_passes) puts it back and runs the frame again on the scan de-skewed anew.
  struct FrameState {
    Eigen::Matrix4d last, before_last;
    double last_time, before_last_time;
    Eigen::Matrix4d last_mid, before_last_mid;
    double last_mid_time, before_last_mid_time;
    Eigen::Matrix4d last_turn;
    double last_turn_time;
    int known;
    Eigen::Matrix<double, 6, 6> last_covariance;
    double first_time;
    int consecutive_lost;
    double typical_nvtl;
  };
  FrameState frame_state() const {
    return {last,          before_last,          last_time, before_last_time, last_mid,         before_last_mid,
            last_mid_time, before_last_mid_time, last_turn, last_turn_time,   known,            last_covariance,
            first_time,    consecutive_lost,     typical_nvtl};
  }
  void restore(const FrameState& f) {
    last = f.last;
    before_last = f.before_last;
    last_time = f.last_time;
    before_last_time = f.before_last_time;
    last_mid = f.last_mid;
    before_last_mid = f.before_last_mid;
    last_mid_time = f.last_mid_time;
    before_last_mid_time = f.before_last_mid_time;
    last_turn = f.last_turn;
    last_turn_time = f.last_turn_time;
    known = f.known;
    last_covariance = f.last_covariance;
    first_time = f.first_time;
    consecutive_lost = f.consecutive_lost;
    typical_nvtl = f.typical_nvtl;
  }

  // Where a retry starts: the last good pose, or the initial guess before the first one.
  const Eigen::Matrix4d& anchor() const { return known > 0 ? last : initial; }

  // The constant-velocity motion model: the motion between the last two good poses and the
  // seconds it took (known == 2). The prediction extrapolates it; the de-skew takes
  // sweep_velocity's.
  void velocity(Eigen::Matrix4d& delta, double& gap) const {
    delta = before_last.inverse() * last;
    gap = last_time - before_last_time;
  }
  // The same between the two poses at their sweeps' mean times (last_mid): the de-skew's
  // constant velocity. For scans without times, velocity() itself.
  void sweep_velocity(Eigen::Matrix4d& delta, double& gap) const {
    delta = before_last_mid.inverse() * last_mid;
    gap = last_mid_time - before_last_mid_time;
  }

  // The sensor's motion over the sweep of a scan at `time` whose points' times span
  // [time_min, time_max] (settings.deskew; `prediction`: the caller's, or null): no twist
  // when the mode has none to give; where it came from, and how the IMU covered the sweep
  // (imu_deskew.cpp).
  struct DeskewMotion {
    std::optional<math::Twist> twist;
    Deskew source = Deskew::Off;
    ImuCoverage imu = ImuCoverage::NotUsed;
    double imu_gap = 0.0;  // the longest stretch without a sample (s), for the warning
    // The motion part by part over the sweep, each part's begin (s from the scan's time)
    // and twist, two or more parts (none: `twist` throughout): the caller's (source
    // Odometry, SweepMotionParts), whole; or, with `rotation_only`, the IMU's mean rate over
    // each of equal parts of the sweep in the sensor frame (source Imu, one part per sample
    // inside the sweep and one more), the translation being the de-skew twist's.
    std::vector<std::pair<double, math::Twist>> parts;
    bool rotation_only = false;
  };
  // The path a frame's points are de-skewed along: `motion`'s parts (with `twist`'s
  // translation where they give only the rotation), else `twist` throughout.
  static math::SweepPath sweep_path(const math::Twist& twist, const DeskewMotion& motion);
  // The motion a frame de-skews with (imu_deskew.cpp): `given`, the caller's over the sweep,
  // or null. Its parts are the IMU's (rotation only) or, with the odometry's source, the
  // caller's.
  DeskewMotion deskew_motion(double time, const Eigen::Matrix4d* prediction, const detail::GivenSweep* given,
                             double time_min, double time_max) const;
  // Counts a frame's IMU coverage, and warns at the first that fell back (imu_deskew.cpp).
  void note_imu_coverage(const DeskewMotion& motion, double time, double time_min, double time_max);

  // The IMU samples (Localizer::add_imu), in time order, the last kImuKeepSeconds of them.
  std::vector<ImuSample> imu;
  std::size_t imu_front = 0;  // samples before it are dropped (compacted now and then)
  ImuStats imu_counts;
  bool imu_fallback_warned = false, imu_order_warned = false;

  // The searches' options: InitialPoseOptions' (32 places refined). A frame's searches
  // start near the prediction, where few places compete, and every millisecond counts (on
  // BALM at 1 Hz, an H100: 440-480 frames per second with 8, 300-360 with 16); but a
  // narrow or sparse scan's right rotation ranks low after the coarse pass: with 16, the
  // Livox Avia set's frame 5 (17 deg off, mostly in pitch) was lost after 1,734
  // alignments and the simulator's Avia turns lost one frame; with 32 both are found, and
  // the Livox run aligns 4,121 hypotheses instead of 5,829 (fewer frames go on to the
  // position and wide searches).
  InitialPoseOptions search_options = [this] {
    InitialPoseOptions o;
    o.refine_step_size = settings.search_step_size;
    return o;
  }();

  // The rotation search's offsets (fixed by the settings): made once, not per lost frame.
  std::vector<Eigen::Vector3d> turns =
      settings.recovery == Recovery::Hypotheses
          ? rotation_offsets(settings.rotation_search_range_deg, settings.rotation_search_step_deg)
          : std::vector<Eigen::Vector3d>{};

  // Stage 1a's turns about the vertical: every heading_search_step_deg up to
  // rotation_search_range_deg either way (the centre, tried already, is not among them),
  // applied about the map's vertical.
  std::vector<Eigen::Vector3d> headings = [this] {
    std::vector<Eigen::Vector3d> out;
    if (settings.recovery != Recovery::Hypotheses) return out;
    const double step = settings.heading_search_step_deg * detail::kPi / 180.0;
    const double range = settings.rotation_search_range_deg * detail::kPi / 180.0;
    for (int k = 1; k * step <= range + 1e-9; ++k) {
      out.emplace_back(0.0, 0.0, k * step);
      out.emplace_back(0.0, 0.0, -k * step);
    }
    return out;
  }();

  // Seconds from the last good pose (or, before the first, from the first frame) to `time`;
  // 0 for stamps that do not increase.
  double since_last_good(double time) const {
    const double from = known > 0 ? last_time : first_time;
    return std::isfinite(time) && std::isfinite(from) && time > from ? time - from : 0.0;
  }

  // The position searches' options for a frame `since` seconds after the last good pose
  // at `radius` (m): yaws every search_yaw_step_deg over +-(rotation range + turn rate x
  // since), a grid of search_position_step (coarser only where a radius the settings allow
  // would exceed the hypothesis limit), the coarse pass in the search's steps.
  InitialPoseOptions position_search(double radius, double since) const {
    InitialPoseOptions o = search_options;
    o.radius = radius;
    o.coarse_step_size = settings.search_step_size;
    o.yaw_step_deg = settings.search_yaw_step_deg;
    o.yaw_range_deg = std::min(360.0, 2.0 * (settings.rotation_search_range_deg + settings.max_turn_rate_deg * since));
    o.yaw_range_deg = std::max(o.yaw_range_deg, o.yaw_step_deg);
    const double yaws = std::floor(o.yaw_range_deg / o.yaw_step_deg) + 1.0;
    const double positions = static_cast<double>(o.max_hypotheses) / yaws;
    o.position_step = std::max(settings.search_position_step, 1.05 * radius * std::sqrt(detail::kPi / positions));
    return o;
  }

  // The crop and voxel filter on the GPU (gpu_preprocess with the CUDA backend), else null.
  std::unique_ptr<detail::GpuFilterPool> gpu_filters;

  // settings.refine_ratio's aligner and its map (set_map of points), else empty; it runs
  // as `aligner` does.
  std::optional<Aligner> fine;
  double fine_resolution() const { return settings.refine_ratio * settings.align.resolution; }
  // How far the de-skew of the frame being localized moved its points (m, at the sweep's
  // latest time and the points' RMS range; 0 when it was not de-skewed, infinite for a
  // sweep de-skewed without its whole motion). A valid frame is not refined beyond half the
  // finer resolution (LocalizerSettings::refine_ratio): what the motion estimate gets wrong
  // of such a sweep is near the finer voxels' size.
  double deskew_shift = 0.0;
  // The de-skew term of the frame being localized (LocalizerSettings::covariance_deskew_scale):
  // whether it has one, the standard deviation of each component of the motion it was
  // de-skewed with (sensor frame, [v w]) and its points' mean squared time (s^2). Reset once
  // the frame is done.
  // A motion taken from the localizer's own poses carries their errors too: over a gap dt
  // between two poses each as uncertain as the last good one (covariance P), the motion is
  // off by their errors' difference over dt, of covariance about P / dt^2 (2 P less their
  // correlation: consecutive poses share most of their scene's bias; measured on the
  // simulator's fast drive, half), and the pose by that times the points' mean squared time,
  // in the pose's own axes (deskew_pose_noise). From the last good pose to a prediction
  // given: P / dt^2 too.
  bool deskew_term = false;
  Eigen::Matrix<double, 6, 1> deskew_sigma = Eigen::Matrix<double, 6, 1>::Zero();
  double deskew_time2 = 0.0;
  Eigen::Matrix<double, 6, 6> deskew_pose_noise = Eigen::Matrix<double, 6, 6>::Zero();
  // The poses (and their NVTL) the frame being localized found on the other motions it
  // was tried with, when it searched for its own (a turn within the sweep): the covariance's
  // disagreement term weighs them (CovarianceEvidence::alternatives). Reset once the frame
  // is done.
  std::vector<std::pair<Pose6, double>> frame_alternatives;
  // The motion the last frame was de-skewed with (its last pass's), when that frame was
  // valid, and its time: what the next frame's motion is held against.
  std::optional<math::Twist> deskew_previous;
  double deskew_previous_time = 0.0;
  // The settings of `fine`: the frame's NDT at fine_resolution(), without a prior or a
  // covariance (the frame's covariance is the accepted alignment's).
  AlignSettings fine_settings() const {
    AlignSettings f = settings.align;
    f.resolution = fine_resolution();
    f.prior = PosePrior{};
    f.pose_covariance = PoseCovariance::None;
    return f;
  }

  // One frame's attempts, retries and searches, and the check that decides it.
  class FrameAttempts;

  // Defined in localizer.cpp, where GpuFilterPool is.
  Impl(const LocalizerSettings& s, const ExecutionOptions& e);
  ~Impl();

  // The motion model takes `pose` at `time` as its newest pose (a valid or a degenerate frame).
  void advance(const Eigen::Matrix4d& pose, double time, const Eigen::Matrix<double, 6, 6>& covariance) {
    last_covariance = covariance;
    before_last = last;
    before_last_time = last_time;
    last = pose;
    last_time = time;
    before_last_mid = last_mid;
    before_last_mid_time = last_mid_time;
    last_mid = pose * frame_mid;
    last_mid_time = time + frame_mid_time;
    last_turn = frame_turn_set ? pose * frame_turn : last_mid;
    last_turn_time = frame_turn_set ? time + frame_turn_time : last_mid_time;
    known = std::min(known + 1, 2);  // before_last is meaningful from the second pose on
    consecutive_lost = 0;
  }

  // Whether `nvtl` reaches settings.search_nvtl_ratio of what the accepted frames score.
  bool typical(double nvtl) const {
    return std::isnan(typical_nvtl) || nvtl >= settings.search_nvtl_ratio * typical_nvtl;
  }

  // Whether at least settings.min_matched_ratio of the alignment's points found a voxel.
  bool matched_enough(const AlignResult& r) const {
    return static_cast<double>(r.matched_points) >= settings.min_matched_ratio * static_cast<double>(r.source_points);
  }

  // The score check an alignment fails first (NoPose, NotConverged, MatchedRatio, Nvtl), or
  // Passed.
  FrameCheck failed_check(const AlignResult& r) const {
    if (!detail::has_pose(r)) return FrameCheck::NoPose;
    if (settings.reject_max_iterations && !r.converged) return FrameCheck::NotConverged;
    if (!matched_enough(r)) return FrameCheck::MatchedRatio;
    return r.nvtl >= settings.nvtl_threshold ? FrameCheck::Passed : FrameCheck::Nvtl;
  }

  bool accept(const AlignResult& r) const { return failed_check(r) == FrameCheck::Passed; }

  // The estimate a frame attaches to its accepted alignment (settings.align.pose_covariance),
  // which the frame then calibrates: Laplace for PoseCovariance::Calibrated, which the frame
  // would otherwise calibrate twice.
  PoseCovariance estimate_mode() const {
    const PoseCovariance mode = settings.align.pose_covariance;
    return mode == PoseCovariance::Calibrated ? PoseCovariance::Laplace : mode;
  }

  // The constants of the frames' calibrated covariance (LocalizerSettings::covariance_*).
  CalibratedCovarianceSettings calibration() const {
    CalibratedCovarianceSettings c;
    c.sparsity_translation = settings.covariance_sparsity_translation;
    c.sparsity_rotation = settings.covariance_sparsity_rotation;
    c.residual_scale = settings.covariance_residual_scale;
    c.refined_residual_scale = settings.covariance_refined_residual_scale;
    c.hypothesis_temperature = settings.covariance_hypothesis_temperature;
    c.weak_direction_sigma = settings.covariance_weak_direction_sigma;
    c.weak_direction_ratio = settings.covariance_weak_direction_ratio;
    c.deskew_scale = settings.covariance_deskew_scale;
    return c;
  }

  // The constant-velocity prediction's covariance at `time`: the last pose's covariance
  // plus standard deviations of motion_*_sigma per second since it (one frame gap, or 1 s,
  // when the stamps do not increase). With one good pose only there is no velocity, and
  // the prediction (that pose) can be off by whatever the sensor can move: max_speed and
  // max_turn_rate_deg per second. Zero before the first good pose (no gate, no prior).
  Eigen::Matrix<double, 6, 6> motion_covariance(double time) const {
    Eigen::Matrix<double, 6, 6> c = Eigen::Matrix<double, 6, 6>::Zero();
    if (known == 0) return c;
    double dt = since_last_good(time);
    if (!(dt > 0.0)) dt = known == 2 && last_time > before_last_time ? last_time - before_last_time : 1.0;
    const bool velocity = known == 2;
    const double t = (velocity ? settings.motion_translation_sigma : settings.max_speed) * dt;
    const double r = (velocity ? settings.motion_rotation_sigma : settings.max_turn_rate_deg * detail::kPi / 180.0) * dt;
    c.diagonal() << t * t, t * t, t * t, r * r, r * r, r * r;
    return last_covariance + c;
  }
};

// The frame's prediction and what the checks and the prior take from it.
struct FramePrediction {
  Eigen::Matrix4d pose;
  Pose6 pose6;
  Eigen::Matrix<double, 6, 6> covariance;
  Eigen::Matrix<double, 6, 6> information;  // its pseudo-inverse
  bool has_covariance;

  FramePrediction(const Eigen::Matrix4d& p, const Eigen::Matrix<double, 6, 6>& c)
      : pose(p), pose6(matrix_to_pose(p)), covariance(c), information(detail::information_of(c)),
        has_covariance(!(c.array() == 0.0).all()) {}

  // d' C^+ d of `r`'s correction from the prediction; NaN without a covariance or a pose.
  double mahalanobis2(const AlignResult& r) const {
    if (!has_covariance || !detail::has_pose(r)) return std::numeric_limits<double>::quiet_NaN();
    const Pose6 d = detail::wrapped(r.pose - pose6);
    return d.dot(information * d);
  }
};

// Sets the aligner's prior for a frame's first attempt and retries, and removes it when the
// frame goes on to its searches (or leaves, by an exception).
class FramePrior {
 public:
  FramePrior(Aligner& aligner, const LocalizerSettings& s, const FramePrediction& p) : aligner_(aligner) {
    PosePrior prior;
    prior.pose = p.pose6;
    if (s.prediction_prior && p.has_covariance) prior.information = p.information;
    prior.regularization_scale_factor = s.regularization_scale_factor;
    if (prior.active()) {
      aligner_.set_prior(prior);
      set_ = true;
    }
  }
  ~FramePrior() { release(); }
  FramePrior(const FramePrior&) = delete;
  FramePrior& operator=(const FramePrior&) = delete;
  void release() {
    if (set_) aligner_.set_prior(PosePrior{});
    set_ = false;
  }
  // Whether the frame's attempts are aligned with a prior now (prediction_prior or the
  // regularization), not yet released for the searches.
  bool active() const { return set_; }

 private:
  Aligner& aligner_;
  bool set_ = false;
};

}  // namespace ndtcu
