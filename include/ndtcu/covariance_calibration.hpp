#pragma once
/// \file
/// Whether a reported pose covariance is honest: each frame's error against a reference
/// pose, weighed by the covariance the frame reported, as the normalised estimation error
/// squared NEES = e' C^-1 e (Bar-Shalom, Li and Kirubarajan 2001, sec. 5.4). For an honest
/// covariance of a d-entry error, NEES follows chi-square with d degrees of freedom: mean d,
/// and the error lies inside the p ellipse {e : e' C^-1 e <= chi2_p(d)} on a fraction p of
/// frames. A mean far above d, or few frames inside the ellipses, is a covariance that
/// claims more certainty than the pose has (a filter downstream then trusts a wrong pose).
///
/// Read from `ndtcu localize`'s output folder (frames.csv) by read_localize_frames(), and
/// measured by `ndtcu eval covariance` and `ndtcu localize --reference`.

#include <ndtcu/result.hpp>
#include <ndtcu/trajectory.hpp>

#include <Eigen/Core>

#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ndtcu {

/// The frames.csv column names of a frame's 6x6 pose covariance, its upper triangle row by
/// row: cov_x_x, cov_x_y, ..., cov_x_yaw, cov_y_y, ..., cov_yaw_yaw (21 names).
std::vector<std::string> covariance6_columns();

/// P(X <= x) for X chi-square with `dof` degrees of freedom (the regularised lower
/// incomplete gamma function P(dof/2, x/2)); 0 for x <= 0. Throws Error for dof < 1 or a
/// NaN x.
double chi_square_cdf(double x, double dof);

/// The x with chi_square_cdf(x, dof) = p, to a relative 1e-12. Throws Error for p outside
/// (0, 1) or dof < 1.
double chi_square_quantile(double p, double dof);

/// e' C^-1 e, or NaN when C is not symmetric positive definite (its Cholesky factorisation
/// fails or gives a non-finite result) or e is not finite. e and C of one size.
double nees(const Eigen::VectorXd& error, const Eigen::MatrixXd& covariance);

/// The standard deviation (m) the x-y covariance `c` gives along the direction of the x-y
/// error `e`: sqrt(u' C u), u = e/|e|; sqrt of the larger eigenvalue when e is zero.
double sigma_along(const Eigen::Vector2d& e, const Eigen::Matrix2d& c);

/// One frame's error and the covariance it reported.
struct CovarianceSample {
  std::size_t frame = 0;  ///< position in the sequence
  double time = 0.0;      ///< s
  std::string status;     ///< the frame's status as frames.csv writes it (tracked, recovered, degenerate)
  /// Estimate minus reference, [x y z roll pitch yaw] (m, rad; map frame; the angles'
  /// differences brought into (-pi, pi]).
  Pose6 error = Pose6::Zero();
  /// The reported x-y covariance (m^2; AlignResult::covariance_xy), if any.
  std::optional<Eigen::Matrix2d> covariance_xy;
  /// The reported 6x6 covariance (LocalizationResult::covariance), if any.
  std::optional<Eigen::Matrix<double, 6, 6>> covariance;
};

/// The error of `estimate` against `reference` as CovarianceSample::error: the difference
/// of their [x y z roll pitch yaw] (matrix_to_pose), the angles brought into (-pi, pi].
Pose6 pose_error(const Eigen::Matrix4d& estimate, const Eigen::Matrix4d& reference);

/// What to count as a confident error, and how many of the worst frames to keep.
struct CovarianceCalibrationOptions {
  /// A frame farther than this from its reference in x-y is `far` (m): localize's success radius.
  double far_m = 0.10;
  /// A far frame whose x-y standard deviation along its error is below this is a
  /// confident wrong pose (m).
  double small_sigma_m = 0.03;
  /// How many of the most over-confident frames to list.
  std::size_t worst = 10;
  /// The reference poses' own standard deviation in x, y and z (m) and in roll, pitch and yaw
  /// (rad), independent of the estimate's errors: the error is the difference of two
  /// estimates, so its covariance is the reported one plus the reference's,
  /// diag(p^2, p^2, p^2, a^2, a^2, a^2), in the NEES and the ellipses (0, 0: exact truth, as
  /// the simulator's). The far-and-confident count and each frame's sigma along its error
  /// stay the reported covariance's alone.
  double reference_sigma_m = 0.0;
  double reference_sigma_rad = 0.0;
};

/// NEES of one error dimension over the frames that had it.
struct NeesStats {
  int dof = 0;              ///< degrees of freedom (the error's entries)
  std::size_t frames = 0;   ///< frames with a usable covariance (positive definite)
  std::size_t invalid = 0;  ///< frames whose covariance was not positive definite (left out)
  double mean = 0.0, median = 0.0, max = 0.0;  ///< of the frames' NEES (0 without frames)
  /// The mean's 95% bounds for an honest covariance: chi2 quantiles 0.025 and 0.975 of
  /// frames * dof degrees of freedom, divided by frames (0 without frames).
  double mean_low95 = 0.0, mean_high95 = 0.0;
  /// Fractions of the frames whose error lies inside the 95% and 99% ellipses (chi2 quantiles
  /// of dof; 0 without frames).
  double within95 = 0.0, within99 = 0.0;
};

/// A frame whose error is large against the x-y standard deviation it reported.
struct OverConfidentFrame {
  std::size_t frame = 0;
  double time = 0.0;
  std::string status;
  double error_xy_m = 0.0;  ///< |x-y error|
  double sigma_m = 0.0;     ///< the reported x-y standard deviation along the error (sigma_along)
  double nees_xy = 0.0;     ///< the x-y NEES
};

/// The calibration of a run's reported covariance.
struct CovarianceCalibration {
  std::size_t frames = 0;  ///< frames with an error and at least one covariance
  NeesStats xy;            ///< x-y error against the reported x-y covariance (2 dof)
  NeesStats pose;          ///< the six entries against the 6x6 covariance (6 dof)
  /// Each entry alone against its variance (1 dof), from the 6x6 covariance; x and y from
  /// the x-y covariance for frames without one.
  std::array<NeesStats, 6> axis;
  std::size_t far = 0;            ///< frames with an x-y covariance more than far_m off in x-y
  std::size_t far_confident = 0;  ///< of them, those reporting sigma_along below small_sigma_m
  /// The most over-confident frames, the largest x-y NEES first (at most options.worst).
  std::vector<OverConfidentFrame> worst;
  CovarianceCalibrationOptions options;  ///< what it was measured with
};

/// Measures a covariance's calibration frame by frame, keeping per frame only the NEES (for
/// the medians) and the worst frames: memory stays small over a run of any length.
class CovarianceCalibrationAccumulator {
 public:
  /// Throws Error for options that are not finite and positive.
  explicit CovarianceCalibrationAccumulator(const CovarianceCalibrationOptions& options = {});
  /// Adds one frame (one without any covariance is not counted).
  void add(const CovarianceSample& sample);
  /// The calibration of the frames added so far.
  CovarianceCalibration result() const;

 private:
  CovarianceCalibrationOptions options_;
  std::size_t frames_ = 0, far_ = 0, far_confident_ = 0;
  std::vector<float> xy_, pose_;
  std::array<std::vector<float>, 6> axis_;
  std::size_t xy_invalid_ = 0, pose_invalid_ = 0;
  std::array<std::size_t, 6> axis_invalid_{};
  std::vector<OverConfidentFrame> worst_;  // a heap, the least over-confident on top
};

/// The calibration of `samples` (CovarianceCalibrationAccumulator over them).
CovarianceCalibration calibrate_covariance(const std::vector<CovarianceSample>& samples,
                                           const CovarianceCalibrationOptions& options = {});

/// One row of `ndtcu localize`'s frames.csv: what evaluating its pose needs.
struct LocalizeFrame {
  std::size_t frame = 0;
  double time = 0.0;
  std::string status;
  std::optional<Pose6> pose;  ///< [x y z roll pitch yaw]; none for lost and skipped frames
  std::optional<Eigen::Matrix2d> covariance_xy;
  std::optional<Eigen::Matrix<double, 6, 6>> covariance;  ///< none in files written before it had these columns
};

/// Reads OUT/frames.csv of `ndtcu localize --out OUT` row by row (RFC 4180 quoting, columns
/// found by their header names), calling `frame` for each: one row is held at a time.
/// Throws IoError naming the file, the line and the column for a file that cannot be read,
/// a missing column, a row of another width or a field that is not a number where one is due.
void for_each_localize_frame(const std::string& frames_csv, const std::function<void(const LocalizeFrame&)>& frame);

/// Every row of frames.csv (for_each_localize_frame).
std::vector<LocalizeFrame> read_localize_frames(const std::string& frames_csv);

/// The error sample of `frame` against `reference` (in time order), matched as
/// `ndtcu localize --reference` matches it: by index when the reference has exactly
/// `frames_listed` poses (the run's listed scans), else the nearest reference pose within
/// `max_time_difference` s (nearest_in_time). Nullopt for a frame without a pose or a match.
std::optional<CovarianceSample> covariance_sample(const LocalizeFrame& frame, const Trajectory& reference,
                                                 std::size_t frames_listed, double max_time_difference);

/// covariance_sample() of each frame, those without a pose or a match left out.
std::vector<CovarianceSample> covariance_samples(const std::vector<LocalizeFrame>& frames, const Trajectory& reference,
                                                 std::size_t frames_listed, double max_time_difference);

/// The calibration of a `ndtcu localize` run, and how many of its frames it covers.
struct LocalizeRunCalibration {
  std::size_t frames = 0;     ///< rows of frames.csv
  std::size_t with_pose = 0;  ///< of them, frames with a pose (not lost, not skipped)
  std::size_t matched = 0;    ///< of them, frames matched to a reference pose
  CovarianceCalibration calibration;  ///< over the matched frames that reported a covariance
};

/// The calibration of the run whose frames.csv is `frames_csv` against `reference` (in time
/// order), read row by row (for_each_localize_frame, covariance_sample): what
/// `ndtcu eval covariance` and `ndtcu localize --reference` report.
LocalizeRunCalibration calibrate_localize_run(const std::string& frames_csv, const Trajectory& reference,
                                              std::size_t frames_listed, double max_time_difference,
                                              const CovarianceCalibrationOptions& options = {});

}  // namespace ndtcu
