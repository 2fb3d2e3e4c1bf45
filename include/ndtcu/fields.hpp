#pragma once
/// \file
/// One list of the fields of AlignSettings, ExecutionOptions, LocalizerSettings and
/// AlignResult: name, member, a line of documentation and, for a number, its valid range.
/// The range checks of validate(AlignSettings) and validate(ExecutionOptions), the
/// command-line options, the JSON the tool writes, the Python
/// attributes, keywords and `__repr__`, and the Autoware parameter mapping are made from
/// it, so a new setting is one line here plus its use.
///
///     visit_fields<AlignSettings>([&](const auto& f) { std::cout << f.name << " = " << s.*f.member; });
///
/// Not listed (a struct, not one value): AlignSettings::prior, LocalizerSettings::align,
/// and AlignResult's localizability, trace and timings; nor ExecutionOptions::cuda_stream
/// (a handle the caller owns, which no file or command line can name).

#include <ndtcu/error.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/text.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace ndtcu {

/// The values a number field may hold; unbounded by default. A bounded double must also
/// be finite.
struct FieldRange {
  double lo = -std::numeric_limits<double>::infinity();  ///< lower bound
  double hi = std::numeric_limits<double>::infinity();   ///< upper bound
  bool lo_open = false;                                  ///< lo itself is outside
  bool hi_open = false;                                  ///< hi itself is outside
  const char* note = nullptr;  ///< what a special value means ("0 = one per hardware thread"), or null
  bool finite = false;         ///< without bounds: still a finite number

  /// Whether any bound is set.
  bool bounded() const { return std::isfinite(lo) || std::isfinite(hi); }
  /// Whether values are checked at all (a bound, or finite).
  bool checked() const { return bounded() || finite; }
  /// Whether `v` lies in the range (and is finite when the range is checked).
  bool contains(double v) const {
    if (!checked()) return true;
    if (!std::isfinite(v)) return false;
    const bool above = lo_open ? v > lo : v >= lo;
    const bool below = hi_open ? v < hi : v <= hi;
    return above && below;
  }
  /// "> 0", ">= 0", "in [1, 1000]", "in (0, 1)", "<= 5" (empty when unbounded).
  std::string text() const {
    const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
    if (has_lo && has_hi) {
      return std::string("in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + (hi_open ? ")" : "]");
    }
    if (has_lo) return std::string(lo_open ? "> " : ">= ") + number_text(lo);
    if (has_hi) return std::string(hi_open ? "< " : "<= ") + number_text(hi);
    return finite ? "finite" : "";
  }
};

/// A range [lo, hi].
inline FieldRange range_closed(double lo, double hi, const char* note = nullptr) { return {lo, hi, false, false, note}; }
/// A range (lo, hi).
inline FieldRange range_open(double lo, double hi) { return {lo, hi, true, true, nullptr}; }
/// A range (lo, inf).
inline FieldRange range_above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, false, nullptr}; }
/// Any finite number.
inline FieldRange range_finite() {
  FieldRange r;
  r.finite = true;
  return r;
}
/// A range [lo, inf).
inline FieldRange range_at_least(double lo, const char* note = nullptr) {
  return {lo, std::numeric_limits<double>::infinity(), false, false, note};
}

/// One field of `S`: its name (the JSON key, the Python attribute, the CLI option with '_'
/// spelt '-'), the member it names, one line for --help and docstrings, and its range.
template <typename S, typename T>
struct Field {
  using Struct = S;  ///< the struct the field belongs to
  using Type = T;    ///< the member's type
  const char* name;  ///< snake_case name
  T S::*member;      ///< the member
  const char* doc;   ///< one line of documentation
  FieldRange range;  ///< valid values of a number (unbounded for others)
};

/// Makes a Field (the types from the member pointer).
template <typename S, typename T>
Field<S, T> make_field(const char* name, T S::*member, const char* doc, FieldRange range = {}) {
  return {name, member, doc, range};
}

/// The names and parser of an enum a field holds (specialised for each).
template <typename E>
struct EnumValues;

#define NDTCU_ENUM_VALUES(E, parser, ...)                          \
  template <>                                                      \
  struct EnumValues<E> {                                           \
    static std::vector<E> all() { return {__VA_ARGS__}; }          \
    static E parse(const std::string& name) { return parser(name); } \
  }
NDTCU_ENUM_VALUES(SearchMethod, search_method_from_string, SearchMethod::Radius, SearchMethod::Direct27,
                  SearchMethod::Direct7, SearchMethod::Direct1);
NDTCU_ENUM_VALUES(LineSearch, line_search_from_string, LineSearch::MoreThuente, LineSearch::Fixed);
NDTCU_ENUM_VALUES(ConvergenceRule, convergence_rule_from_string, ConvergenceRule::Pcl, ConvergenceRule::Autoware);
NDTCU_ENUM_VALUES(NewtonDirection, newton_direction_from_string, NewtonDirection::Pcl, NewtonDirection::SaddleFree);
NDTCU_ENUM_VALUES(CovarianceMode, covariance_mode_from_string, CovarianceMode::Pcl, CovarianceMode::Autoware);
NDTCU_ENUM_VALUES(Backend, backend_from_string, Backend::Cpu, Backend::Cuda, Backend::Auto);
NDTCU_ENUM_VALUES(GpuNewtonLoop, gpu_loop_from_string, GpuNewtonLoop::Device, GpuNewtonLoop::Host);
NDTCU_ENUM_VALUES(PoseCovariance, pose_covariance_from_string, PoseCovariance::None, PoseCovariance::Laplace,
                  PoseCovariance::MultiNdt, PoseCovariance::MultiNdtScore, PoseCovariance::Sandwich,
                  PoseCovariance::Calibrated);
NDTCU_ENUM_VALUES(Recovery, recovery_from_string, Recovery::None, Recovery::LastGood, Recovery::Hypotheses);
NDTCU_ENUM_VALUES(Deskew, deskew_from_string, Deskew::Off, Deskew::Auto, Deskew::ConstantVelocity, Deskew::Odometry,
                  Deskew::Imu);
NDTCU_ENUM_VALUES(FrameCheck, frame_check_from_string, FrameCheck::Passed, FrameCheck::DegeneracyProbe,
                  FrameCheck::TooFewPoints, FrameCheck::NoPose, FrameCheck::NotConverged, FrameCheck::MatchedRatio,
                  FrameCheck::Nvtl, FrameCheck::TypicalNvtl, FrameCheck::MahalanobisGate, FrameCheck::Ambiguous,
                  FrameCheck::ProbeFoundBetter, FrameCheck::CovarianceBound);
NDTCU_ENUM_VALUES(CovarianceTerm, covariance_term_from_string, CovarianceTerm::None, CovarianceTerm::Laplace,
                  CovarianceTerm::Sparsity, CovarianceTerm::Residual, CovarianceTerm::Disagreement,
                  CovarianceTerm::Localizability, CovarianceTerm::Deskew);
NDTCU_ENUM_VALUES(FrameStage, frame_stage_from_string, FrameStage::None, FrameStage::Prediction,
                  FrameStage::Continuation, FrameStage::LastGood, FrameStage::Probe, FrameStage::HeadingSearch,
                  FrameStage::RotationSearch, FrameStage::PositionSearch, FrameStage::WideSearch,
                  FrameStage::InitialSearch, FrameStage::GlobalSearch, FrameStage::SweepMotion);
#undef NDTCU_ENUM_VALUES

/// The names of every value of enum E, in declaration order (to_string's spelling).
template <typename E>
std::vector<std::string> enum_names() {
  std::vector<std::string> names;
  for (E e : EnumValues<E>::all()) names.emplace_back(to_string(e));
  return names;
}

/// The value of E whose to_string is `name`, from the one list of its values above. Throws
/// Error "WHAT 'NAME' is not one of A, B, C" otherwise, every value named.
template <typename E>
E enum_from_name(const std::string& name, const char* what) {
  for (E e : EnumValues<E>::all()) {
    if (name == to_string(e)) return e;
  }
  std::string choices;
  for (const std::string& n : enum_names<E>()) choices += (choices.empty() ? "" : ", ") + n;
  throw Error(std::string(what) + " '" + name + "' is not one of " + choices);
}

/// The fields of `S`, in the order of the struct (specialised for each struct listed).
template <typename S>
struct FieldList;

template <>
struct FieldList<AlignSettings> {
  /// Calls v(field) for each.
  template <typename V>
  static void visit(V&& v) {
    using S = AlignSettings;
    v(make_field("resolution", &S::resolution, "NDT voxel size (m), also the search radius", range_above(0.0)));
    v(make_field("step_size", &S::step_size, "largest step |dp| per Newton iteration", range_above(0.0)));
    v(make_field("epsilon", &S::epsilon, "convergence threshold (see convergence)", range_at_least(0.0)));
    v(make_field("max_iterations", &S::max_iterations, "Newton iterations at most", range_closed(1, kMaxIterations)));
    v(make_field("outlier_ratio", &S::outlier_ratio, "outlier ratio of the score's mixture (Magnusson eq. 6.7)",
            range_open(0.0, 1.0)));
    v(make_field("search", &S::search, "neighbour search"));
    v(make_field("line_search", &S::line_search, "step length rule"));
    v(make_field("convergence", &S::convergence, "stopping rule"));
    v(make_field("newton_direction", &S::newton_direction,
            "Newton direction: H dp = -g as PCL and Autoware solve it, or saddle-free (|eigenvalues|)"));
    v(make_field("covariance", &S::covariance, "voxel covariance convention"));
    v(make_field("min_points_per_voxel", &S::min_points_per_voxel, "voxels with fewer points are not used",
            range_at_least(3)));
    v(make_field("eigenvalue_ratio", &S::eigenvalue_ratio,
            "voxel covariance eigenvalues below this times the largest are raised to it", range_closed(0.0, 1.0)));
    v(make_field("pose_covariance", &S::pose_covariance,
            "covariance of the aligned pose, as Autoware estimates it: none, laplace ((-H)^-1 of the score), "
            "multi-ndt (6 more aligns from 0.5-1 m offsets), multi-ndt-score (NVTL-weighted offsets)"));
  }
};

template <>
struct FieldList<ExecutionOptions> {
  /// Calls v(field) for each.
  template <typename V>
  static void visit(V&& v) {
    using S = ExecutionOptions;
    v(make_field("backend", &S::backend, "backend (auto: CUDA when a device is present)"));
    v(make_field("threads", &S::threads, "CPU threads for the alignment",
                 range_closed(0, kMaxThreads, "0 = one per hardware thread")));
    v(make_field("device", &S::device, "CUDA device index the CUDA backend runs on",
                 range_at_least(-1, "-1 = the current CUDA device")));
    v(make_field("gpu_loop", &S::gpu_loop,
                 "CUDA, fixed step: Newton loop in one device graph, or one host round trip per iteration"));
  }
};

template <>
struct FieldList<LocalizerSettings> {
  /// Calls v(field) for each.
  template <typename V>
  static void visit(V&& v) {
    using S = LocalizerSettings;
    v(make_field("min_range", &S::min_range, "scan points closer than this to the sensor are dropped (m)",
                 range_at_least(0.0)));
    v(make_field("max_range", &S::max_range, "scan points farther than this are dropped (m)"));
    v(make_field("voxel_leaf", &S::voxel_leaf, "voxel-filter leaf for the scan (m)", range_at_least(0.0, "0: no filter")));
    v(make_field("min_scan_points", &S::min_scan_points,
            "shrink the scan's leaf (by 0.7, at most 4 times) while fewer points than this are left (0: fixed leaf)"));
    v(make_field("min_frame_points", &S::min_frame_points,
            "a frame with fewer points after the filter is lost at once (0: align whatever is left)",
            range_closed(0, 10000000)));
    v(make_field("gpu_preprocess", &S::gpu_preprocess, "crop and filter scans on the GPU with the CUDA backend"));
    v(make_field("deskew", &S::deskew,
            "move each point of a scan with per-point times to the scan's reference time: off, auto (constant "
            "velocity when the scan has times; imu once IMU samples were given), constant-velocity, odometry (the "
            "prediction given with the scan), imu (the IMU's angular rate, the prediction's or constant-velocity "
            "translation)"));
    v(make_field("imu_roll_deg", &S::imu_roll_deg, "the IMU's orientation on the LiDAR: roll (deg)", range_closed(-180.0, 180.0)));
    v(make_field("imu_pitch_deg", &S::imu_pitch_deg, "the IMU's orientation on the LiDAR: pitch (deg)", range_closed(-180.0, 180.0)));
    v(make_field("imu_yaw_deg", &S::imu_yaw_deg, "the IMU's orientation on the LiDAR: yaw (deg)", range_closed(-180.0, 180.0)));
    v(make_field("imu_max_gap", &S::imu_max_gap,
            "imu de-skew: the longest stretch of a sweep without an IMU sample (s); beyond it the frame falls back "
            "to constant velocity", range_closed(0.0, 1.0)));
    v(make_field("deskew_passes", &S::deskew_passes,
            "re-de-skew passes after the alignment: the scan de-skewed again with the motion from the last good pose "
            "to the pose found, and aligned again from it (0: none)",
            range_closed(0, 5)));
    v(make_field("deskew_forward", &S::deskew_forward,
            "a sweep's own motion (its halves aligned apart) moves along the sensor's x axis: its sideways velocity "
            "stays 0 unless the halves find it clearly sideways (false: the halves set it)"));
    v(make_field("nvtl_threshold", &S::nvtl_threshold, "a pose is valid when its NVTL reaches this", range_finite()));
    v(make_field("min_matched_ratio", &S::min_matched_ratio, "... and when this share of its points found a map voxel",
            range_closed(0.0, 1.0)));
    v(make_field("reject_max_iterations", &S::reject_max_iterations,
            "reject an alignment that used every iteration without converging"));
    v(make_field("recovery", &S::recovery, "what a frame whose first attempt fails does"));
    v(make_field("recovery_attempts", &S::recovery_attempts, "retries after a failed first attempt", range_closed(0, 10)));
    v(make_field("rotation_search_range_deg", &S::rotation_search_range_deg, "heading and rotation searches: turns up to this either way (deg)",
            range_closed(0.0, 180.0)));
    v(make_field("rotation_search_step_deg", &S::rotation_search_step_deg, "rotation search: grid step (deg)",
            range_closed(1.0, 180.0)));
    v(make_field("heading_search_step_deg", &S::heading_search_step_deg, "heading search: step between turns about the vertical (deg)",
            range_closed(1.0, 180.0)));
    v(make_field("search_radius", &S::search_radius, "position search radius around the prediction (m)",
            range_closed(0.0, 200.0)));
    v(make_field("search_position_step", &S::search_position_step, "position searches: grid spacing (m)",
            range_closed(0.1, 50.0)));
    v(make_field("search_yaw_step_deg", &S::search_yaw_step_deg, "position searches: step between yaws (deg)",
            range_closed(1.0, 180.0)));
    v(make_field("max_speed", &S::max_speed, "fastest the sensor moves (m/s), sizing the wide search",
            range_closed(0.0, 100.0)));
    v(make_field("max_turn_rate_deg", &S::max_turn_rate_deg, "fastest the sensor turns (deg/s)", range_closed(0.0, 3600.0)));
    v(make_field("max_search_radius", &S::max_search_radius, "widest position search (m; at least search_radius)", range_closed(0.0, 200.0)));
    v(make_field("global_search_interval", &S::global_search_interval,
            "search the whole map when the wide search fails too, on every this many lost frames",
            range_closed(0, 1000, "0: never")));
    v(make_field("search_nvtl_ratio", &S::search_nvtl_ratio, "an alignment is taken only when its NVTL also reaches this share of the accepted frames' (0: no check)",
            range_closed(0.0, 1.0)));
    v(make_field("search_step_size", &S::search_step_size, "largest Newton step of the searches' refinement (m)",
            range_closed(0.0, 10.0, "0: the aligner's step_size")));
    v(make_field("max_prediction_scale", &S::max_prediction_scale, "largest prediction step, in multiples of the last inter-frame motion",
            range_at_least(1.0)));
    v(make_field("degeneracy_probe_m", &S::degeneracy_probe_m, "probe distance along a weak direction (m)",
            range_closed(0.0, 100.0, "0: no probe")));
    v(make_field("degeneracy_margin", &S::degeneracy_margin, "a probe within this NVTL of the pose's marks a direction the scan does not pin",
            range_at_least(0.0)));
    v(make_field("refine_ratio", &S::refine_ratio,
            "polish a valid frame's pose against the map's voxels at this share of the resolution",
            range_closed(0.0, 0.9, "0: no refinement")));
    v(make_field("refine_min_support", &S::refine_min_support,
            "take the refinement only when the finer voxels hold this share of the points the map's voxels held",
            range_closed(0.0, 1.0, "0: no such rule")));
    v(make_field("motion_translation_sigma", &S::motion_translation_sigma, "the constant-velocity prediction's position standard deviation per second (m/s)",
            range_at_least(0.0)));
    v(make_field("motion_rotation_sigma", &S::motion_rotation_sigma, "... and its angles' (rad/s)", range_at_least(0.0)));
    v(make_field("gate_chi2", &S::gate_chi2, "Mahalanobis gate of a correction under the prediction's covariance (0: no gate)",
            range_at_least(0.0)));
    v(make_field("prediction_prior", &S::prediction_prior, "align the first attempt and its retries with the prediction as a pose prior"));
    v(make_field("regularization_scale_factor", &S::regularization_scale_factor,
            "Autoware's GNSS regularization about the prediction (0: off)", range_at_least(0.0)));
    v(make_field("covariance_sparsity_translation", &S::covariance_sparsity_translation,
                 "calibrated covariance: position floor, resolutions over sqrt(matched points) (0: none)",
                 range_closed(0.0, 100.0)));
    v(make_field("covariance_sparsity_rotation", &S::covariance_sparsity_rotation,
                 "calibrated covariance: angle floor, rad over sqrt(matched points) (0: none)", range_closed(0.0, 100.0)));
    v(make_field("covariance_residual_scale", &S::covariance_residual_scale,
                 "calibrated covariance: Laplace times this and the residuals' mean squared Mahalanobis distance (0: none)",
                 range_closed(0.0, 100.0)));
    v(make_field("covariance_refined_residual_scale", &S::covariance_refined_residual_scale,
                 "calibrated covariance: the residual term's scale for a refined pose (0: none)",
                 range_closed(0.0, 100.0)));
    v(make_field("covariance_hypothesis_temperature", &S::covariance_hypothesis_temperature,
                 "calibrated covariance: softmax temperature (NVTL) weighing the search's best rival (0: left out)",
                 range_closed(0.0, 10.0)));
    v(make_field("covariance_weak_direction_sigma", &S::covariance_weak_direction_sigma,
                 "calibrated covariance: c (m of point motion) of the localizability term, a variance "
                 "c^2 (1/rho - 1/rho_c) along each direction of eigenvalue ratio rho below rho_c (0: none)",
                 range_closed(0.0, 10.0)));
    v(make_field("covariance_weak_direction_ratio", &S::covariance_weak_direction_ratio,
                 "calibrated covariance: rho_c, the eigenvalue ratio below which a direction counts in the "
                 "localizability term (0: none)",
                 range_closed(0.0, 1.0)));
    v(make_field("covariance_deskew_scale", &S::covariance_deskew_scale,
                 "calibrated covariance: the de-skew term's scale (the sweep's motion as far as it was not known; "
                 "0: none)",
                 range_closed(0.0, 100.0)));
    v(make_field("covariance_deskew_jerk", &S::covariance_deskew_jerk,
                 "calibrated covariance: the jerk (m/s^3) the de-skew term allows: the acceleration's change over "
                 "the frames' spacing, over the motion's lag behind the sweep (0: none)",
                 range_closed(0.0, 100.0)));
    v(make_field("covariance_imu_rate_sigma", &S::covariance_imu_rate_sigma,
                 "calibrated covariance: the de-skew term's sigma (rad/s) of the IMU's rate, each axis (the gyro's "
                 "bias; 0: taken as exact)",
                 range_closed(0.0, 10.0)));
    v(make_field("max_position_sigma", &S::max_position_sigma,
                 "a frame whose calibrated position sigma exceeds this (m) is uncertain, not valid (0: no bound)",
                 range_closed(0.0, 1000.0)));
  }
};

template <>
struct FieldList<AlignResult> {
  /// Calls v(field) for each.
  template <typename V>
  static void visit(V&& v) {
    using S = AlignResult;
    v(make_field("transform", &S::transform, "source-to-target transform (4x4, row-major in JSON)"));
    v(make_field("xyzrpy", &S::pose, "the same as [x y z roll pitch yaw] (m, rad)"));
    v(make_field("converged", &S::converged, "true only when the convergence rule stopped it"));
    v(make_field("reason", &S::reason, "why it stopped"));
    v(make_field("iterations", &S::iterations, "Newton iterations taken"));
    v(make_field("score", &S::score, "NDT score at the final pose (maximised)"));
    v(make_field("tp", &S::tp, "transform probability: score / source points"));
    v(make_field("nvtl", &S::nvtl, "nearest-voxel transformation likelihood"));
    v(make_field("hessian", &S::hessian, "the score's Hessian at the final pose (6x6, row-major in JSON)"));
    v(make_field("correspondences", &S::correspondences, "point-voxel pairs at the final pose"));
    v(make_field("matched_points", &S::matched_points, "source points with at least one voxel at the final pose"));
    v(make_field("source_points", &S::source_points, "points in the source cloud"));
    v(make_field("target_voxels", &S::target_voxels, "usable voxels in the target map"));
    v(make_field("oscillation_count", &S::oscillation_count, "Autoware's oscillation count"));
    v(make_field("covariance_mode", &S::covariance_mode, "which estimate filled covariance and covariance_xy"));
    v(make_field("covariance_valid", &S::covariance_valid, "whether the covariance estimate could be made"));
    v(make_field("covariance", &S::covariance, "pose covariance [x y z roll pitch yaw] (6x6, row-major in JSON)"));
    v(make_field("covariance_xy", &S::covariance_xy, "x-y covariance as Autoware estimates it (2x2, row-major in JSON)"));
    v(make_field("backend", &S::backend, "which backend ran (cpu or cuda)"));
  }
};

/// Calls `visit(field)` for every field of `S` (AlignSettings, ExecutionOptions,
/// LocalizerSettings or AlignResult), in the order of the struct.
template <typename S, typename V>
void visit_fields(V&& visit) {
  FieldList<S>::visit(visit);
}

/// The names of the fields of `S`, in order.
template <typename S>
std::vector<std::string> field_names() {
  std::vector<std::string> names;
  visit_fields<S>([&](const auto& f) { names.emplace_back(f.name); });
  return names;
}

/// The range of the field of `S` named `name` (unbounded when there is none).
template <typename S>
FieldRange field_range(const std::string& name) {
  FieldRange range;
  visit_fields<S>([&](const auto& f) {
    if (name == f.name) range = f.range;
  });
  return range;
}

/// Sets the field of `s` named `name` to `value` when there is one of type T; whether there was.
template <typename S, typename T>
bool set_field(S& s, const std::string& name, const T& value) {
  bool found = false;
  visit_fields<S>([&](const auto& f) {
    if constexpr (std::is_same_v<typename std::decay_t<decltype(f)>::Type, T>) {
      if (name == f.name) {
        s.*f.member = value;
        found = true;
      }
    }
  });
  return found;
}

/// Calls fail(name, value, real, range) for the first number field of `s` outside its
/// range (value as text; real: a floating-point field), which is expected to throw.
template <typename S, typename Fail>
void check_ranges(const S& s, Fail&& fail) {
  visit_fields<S>([&](const auto& f) {
    using T = typename std::decay_t<decltype(f)>::Type;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      const T value = s.*f.member;
      if (f.range.contains(static_cast<double>(value))) return;
      const bool real = std::is_floating_point_v<T>;
      fail(std::string(f.name), real ? number_text(static_cast<double>(value)) : std::to_string(value), real, f.range);
    }
  });
}

/// Throws Error for the first number field of `s` outside its range: "invalid setting NAME
/// (must be RULE): VALUE" for a real number, "invalid setting NAME: VALUE (must be RULE[,
/// NOTE])" for an integer.
template <typename S>
void validate_ranges(const S& s) {
  check_ranges(s, [](const std::string& name, const std::string& value, bool real, const FieldRange& range) {
    const std::string rule = range.text() + (range.note ? std::string(", ") + range.note : std::string());
    if (real) throw Error("invalid setting " + name + " (must be " + rule + "): " + value);
    throw Error("invalid setting " + name + ": " + value + " (must be " + rule + ")");
  });
}

}  // namespace ndtcu
