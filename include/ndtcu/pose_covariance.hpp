#pragma once
/// \file
/// Covariance of an aligned pose, the three estimates of Autoware's ndt_scan_matcher
/// (autoware_core, localization/autoware_ndt_scan_matcher: ndt_omp/estimate_covariance and
/// ndt_scan_matcher_core's estimate_covariance), formulas restated here:
///
/// - Laplace: the score s is maximised, so -H (its Hessian at the result) plays the
///   information matrix; covariance = (-H)^-1. Autoware publishes only x-y and takes it from
///   the x-y block of H alone: C_xy = -(H_xy)^-1, the covariance of x-y with the other four
///   entries held at the result (smaller than or equal to the x-y block of (-H)^-1, which lets
///   them vary).
/// - MultiNdt: offsets o_k (x = 0 0 0.5 -0.5 1 -1, y = 0.5 -0.5 0 0 0 0 m) turned by the
///   result's rotation, r_k = R_2x2 o_k (R_2x2 the top-left 2x2 block of the result's
///   rotation, the heading's rotation when roll and pitch are zero), are added to the
///   result's x and y; six alignments start there (one batch); the seven poses p_0 (the
///   result) and p_1..p_6 (the six ends) get weights 1/n, n = 7:
///   mean m = sum p_i / n, C = (n - 1)/n * sum (p_i - m)(p_i - m)' / n. The factor (n - 1)/n
///   is Autoware's (its comment calls it the unbiased correction; the unbiased estimator
///   would be n/(n - 1)), so C is 36/49 of the plain sample covariance with 1/(n - 1).
/// - MultiNdtScore: no alignment. The NVTL at the result and at the six offset poses,
///   s_0..s_6, give softmax weights w_i = exp((s_i - max s)/T) / sum_j exp((s_j - max s)/T),
///   T = 0.05; m = sum w_i p_i, C = sum w_i (p_i - m)(p_i - m)' over the seven x-y
///   positions (no further factor).
///
/// And one that is not Autoware's:
/// - Sandwich: the covariance of an M-estimator (Huber 1967; White 1982),
///   C = A^-1 B A^-1 with A = -sum_i H_i, the points' Hessians, and B = sum_i g_i g_i', their
///   gradients' scatter, both at the result (Aligner::score_scatter), and a prior's
///   information L (the aligner's, when active) added to both: A + L, B + L. Laplace is
///   the case B = A, true when the score is the log-likelihood of independent points;
///   the NDT score's scale (d1, d2) is a fitting constant, which the sandwich does not
///   depend on. Its x-y covariance is the x-y block of C.
///
/// What Autoware then publishes (not done here, see floor_xy_covariance): C_xy times its
/// scale_factor (1.0), its diagonal raised in the vehicle frame to at least
/// output_pose_covariance's (0.0225 m^2 each), in the 6x6 matrix whose other entries are
/// that fixed output_pose_covariance.

#include <ndtcu/aligner.hpp>
#include <ndtcu/localizability.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace ndtcu {

/// The terms of a calibrated pose covariance (calibrated_pose_covariance), and which of them
/// dominated a frame's (LocalizationResult::covariance_term).
enum class CovarianceTerm {
  None,          ///< "none": no covariance (lost frames, or no Laplace estimate)
  Laplace,       ///< "laplace": (-H)^-1 of the NDT score, as estimated
  Sparsity,      ///< "sparsity": the floor from the matched point count
  Residual,      ///< "residual": the Laplace estimate scaled by the residuals' spread
  Disagreement,  ///< "disagreement": between resolutions or between the two best hypotheses
  Localizability,  ///< "localizability": along the direction the scan holds least
  Deskew,          ///< "deskew": the sweep's motion, as far as the de-skew did not know it
};

/// "none", "laplace", "sparsity", "residual", "disagreement", "localizability", "deskew".
const char* to_string(CovarianceTerm term);
/// The CovarianceTerm named by to_string(); throws Error naming the value and the choices.
CovarianceTerm covariance_term_from_string(const std::string& name);

/// The constants of calibrated_pose_covariance. The defaults were fitted by the Gaussian
/// likelihood of the errors on half of the real frames and one simulated drive, and checked
/// on the rest (docs/library.md, "The calibrated covariance").
struct CalibratedCovarianceSettings {
  /// Sparsity floor in position: a standard deviation of this many resolutions over
  /// sqrt(matched points) in x, y and z (0: no floor; 0.3 with 2 m voxels and 500 matched
  /// points is 2.7 cm). Fitted to 0: with the residual term in, a floor in position made
  /// the fit's likelihood no better.
  double sparsity_translation = 0.0;
  /// Sparsity floor in roll, pitch and yaw: this many radians over sqrt(matched points)
  /// (fitted: 0.0037, 0.17 mrad at 500 points).
  double sparsity_rotation = 0.0037;
  /// The residual term of a pose at the map's resolution (not refined): the Laplace estimate
  /// times this and the points' mean squared Mahalanobis distance to their voxel, as the
  /// NVTL gives it (0: no term). 1.0: a right pose (NVTL 3.0-3.3 in 2 m voxels, m2 2.0-2.8)
  /// reports about 3 times the Laplace variance; the smallest scale that keeps the real
  /// sets' refined errors within the 99% ellipse on 95% of their frames (0.5: BALM 93.3%,
  /// the Livox set 93.9%), and honest against exact truth for the unrefined pose (the
  /// simulator's drives: mean 6-D NEES 5.9).
  double residual_scale = 1.0;
  /// The same for a pose the finer voxels refined (CovarianceEvidence::refined): the
  /// refinement removed most of the coarse voxels' bias this term stands for. Fitted with the
  /// localizability term against the simulator's exact truth (docs/library.md, "The
  /// calibrated covariance").
  double refined_residual_scale = 0.065;
  /// The two best hypotheses' weights, Autoware's softmax of their NVTL at this temperature.
  double hypothesis_temperature = 0.05;
  /// The localizability term: along each direction the scan holds weakly (eigenvalue ratio
  /// rho, the direction scaled to move the points by 1 m RMS), a variance of
  /// c^2 (1 / rho - 1 / rho_c) metres^2 of point motion, c this, rho_c weak_direction_ratio
  /// (0: none). An NDT optimum slides along a direction the scan holds little (a street's
  /// axis), biased by the voxels, further than the Laplace estimate's curvature says. Fitted
  /// with refined_residual_scale so that the simulator's drives are honest against exact
  /// truth (docs/library.md, "The calibrated covariance"): on the fit drives a mean 6-D NEES
  /// of 5.89, on held-out seeds 5.94. A ratio of 0.04 gives 2.4 cm, 0.3 gives 0.6 cm.
  double weak_direction_sigma = 0.005;
  /// The eigenvalue ratio below which a direction is weak for the localizability term (at
  /// most 1; 0: no term). Every direction below it counts, not only the weakest: down a
  /// street the weakest turns between the street's axis and across it from frame to frame.
  double weak_direction_ratio = 0.5;
  /// The de-skew term: CovarianceEvidence::deskew times this (0: no term). 1: the motion's
  /// uncertainty as the localizer states it (the change of the motion from one sweep to the
  /// next); on the simulator's fast drive (0.1 s sweeps, 20-25 m/s, 4 m corners) that brought
  /// the 6-D NEES of constant velocity's frames from 63-177 to 8-13, and on its plain drive,
  /// not fitted, from 26-40 to 6-7 (docs/library.md, "The calibrated covariance").
  double deskew_scale = 1.0;
};

/// What a calibrated covariance is made from: one alignment's Laplace estimate and fit, and
/// what else the frame knows.
struct CovarianceEvidence {
  /// The Laplace covariance (-H)^-1 and whether it is one (-H positive definite).
  Eigen::Matrix<double, 6, 6> laplace = Eigen::Matrix<double, 6, 6>::Zero();
  bool laplace_valid = false;
  double resolution = 2.0;      ///< the map's voxel size (m)
  double outlier_ratio = 0.55;  ///< the score's outlier ratio (with resolution: d1, d2)
  std::size_t matched_points = 0;  ///< scan points with a voxel at the pose
  double nvtl = 0.0;               ///< NVTL at the pose
  /// Mean squared distance of a point from a rotation axis through the sensor (m^2), which
  /// makes rotations comparable with translations when the dominant term is chosen
  /// (2/3 E|x|^2; 0: translations only).
  double rotation_arm2 = 0.0;
  /// The pose at another resolution minus this pose ([x y z roll pitch yaw], angles
  /// wrapped), when the frame has one (LocalizerSettings::refine_ratio): the two optima disagree by it.
  bool has_resolution_gap = false;
  Pose6 resolution_gap = Pose6::Zero();
  /// The pose is the finer voxels' (the refinement was taken): the residual term takes
  /// CalibratedCovarianceSettings::refined_residual_scale.
  bool refined = false;
  /// The best distinct rival hypothesis minus this pose, and its NVTL below this pose's,
  /// when a search found one.
  bool has_rival = false;
  Pose6 rival_gap = Pose6::Zero();
  double rival_nvtl_drop = 0.0;
  /// Other optima of the same scan, each its pose minus this pose and its NVTL below this
  /// pose's: the candidate motions a swept frame was de-skewed with, when it found its own
  /// (Localizer: a turn that began within the sweep). Weighed with the rival.
  std::vector<std::pair<Pose6, double>> alternatives;
  /// The alignment's localizability (AlignResult::localizability), when it has one: its
  /// weak directions and their eigenvalue ratios give the localizability term.
  Localizability localizability;
  /// The pose's covariance from the de-skew ([x y z roll pitch yaw]), when the scan was
  /// swept: a motion over the sweep off by a twist d (sensor frame, [v w]) moves a point
  /// taken at time s by about s d, and the whole scan, aligned, by about its points' RMS time
  /// times d. With S the covariance of d and B = diag(R, R) for the pose's rotation R:
  /// E[s^2] B S B'. Localizer::localize gives it (docs/library.md, "The calibrated covariance").
  bool has_deskew = false;
  Eigen::Matrix<double, 6, 6> deskew = Eigen::Matrix<double, 6, 6>::Zero();
};

/// A calibrated covariance, its terms and the dominant one.
struct CalibratedCovariance {
  bool valid = false;  ///< false without a Laplace estimate (every matrix zero then)
  /// laplace + sparsity + residual + disagreement + localizability + deskew ([x y z roll pitch
  /// yaw], m and rad).
  Eigen::Matrix<double, 6, 6> covariance = Eigen::Matrix<double, 6, 6>::Zero();
  Eigen::Matrix<double, 6, 6> laplace = Eigen::Matrix<double, 6, 6>::Zero();    ///< (-H)^-1
  /// diag((a r)^2 / N x3, b^2 / N x3): a = sparsity_translation, b = sparsity_rotation, r the
  /// resolution, N the matched points.
  Eigen::Matrix<double, 6, 6> sparsity = Eigen::Matrix<double, 6, 6>::Zero();
  /// s x m2 x laplace, s the residual_scale (refined_residual_scale for a refined pose), m2
  /// the mean squared Mahalanobis distance the NVTL implies:
  /// m2 = -2 ln(NVTL / -d1) / d2 (a point at its voxel's mean scores -d1).
  Eigen::Matrix<double, 6, 6> residual = Eigen::Matrix<double, 6, 6>::Zero();
  /// g g' / 4 for the gap g to the other resolution's pose (the two weighed alike), plus the
  /// weighted spread of this pose, the rival and the alternatives, each weighed
  /// e^{-drop / T} (its NVTL drop below this pose's, T = hypothesis_temperature; this pose
  /// 1): sum w_i (h_i - m)(h_i - m)' over the normalized weights w_i of the gaps h_i (0 for
  /// this pose), m = sum w_i h_i. With the rival alone, w (1 - w) h h', w = 1 / (1 + e^{drop / T}).
  Eigen::Matrix<double, 6, 6> disagreement = Eigen::Matrix<double, 6, 6>::Zero();
  /// sum over the directions v_i with rho_i < rho_c of c^2 (1 / rho_i - 1 / rho_c) v_i v_i':
  /// v_i a direction of the localizability (moving the points by 1 m RMS), rho_i its
  /// eigenvalue over the largest, c = weak_direction_sigma, rho_c = weak_direction_ratio
  /// (zero without a localizability; a direction with rho_i not above 0 is left out: such a
  /// frame is degenerate, and the localizer keeps the alignment's own estimate along the
  /// directions its probe found).
  Eigen::Matrix<double, 6, 6> localizability = Eigen::Matrix<double, 6, 6>::Zero();
  /// deskew_scale x CovarianceEvidence::deskew (zero for a scan not swept).
  Eigen::Matrix<double, 6, 6> deskew = Eigen::Matrix<double, 6, 6>::Zero();
  double mean_squared_mahalanobis = 0.0;  ///< m2 above
  /// The term of largest trace(W T), W = diag(1, 1, 1, arm2, arm2, arm2) (None when not valid).
  CovarianceTerm dominant = CovarianceTerm::None;
};

/// The calibrated covariance of `evidence` (see CalibratedCovariance for each term). Throws
/// Error for settings that are negative or not finite.
CalibratedCovariance calibrated_pose_covariance(const CovarianceEvidence& evidence,
                                                const CalibratedCovarianceSettings& settings = {});

/// The largest position standard deviation (m) a 6x6 covariance gives: the square root of
/// the largest eigenvalue of its x-y-z block (LocalizerSettings::max_position_sigma).
double max_position_sigma(const Eigen::Matrix<double, 6, 6>& covariance);

/// Autoware's covariance_estimation parameters (ndt_scan_matcher.param.yaml), the defaults
/// being Autoware's.
struct PoseCovarianceOptions {
  /// Offsets of the extra starts along the result's own x axis (m): initial_pose_offset_model_x.
  std::vector<double> offset_x = {0.0, 0.0, 0.5, -0.5, 1.0, -1.0};
  /// Offsets along the result's own y axis (m), as many as offset_x: initial_pose_offset_model_y.
  std::vector<double> offset_y = {0.5, -0.5, 0.0, 0.0, 0.0, 0.0};
  /// MultiNdtScore's softmax temperature (NVTL units): Autoware's `temperature`.
  double temperature = 0.05;
  /// Calibrated: the constants of calibrated_pose_covariance (the Localizer's defaults).
  CalibratedCovarianceSettings calibrated;
};

/// One pose covariance estimate and what it was made from.
struct PoseCovarianceResult {
  PoseCovariance mode = PoseCovariance::None;  ///< which estimate this is
  /// False for None, and for Laplace when -H is not positive definite (then both matrices
  /// are zero).
  bool valid = false;
  /// [x y z roll pitch yaw] covariance (m, rad): see AlignResult::covariance.
  Eigen::Matrix<double, 6, 6> covariance = Eigen::Matrix<double, 6, 6>::Zero();
  /// x-y covariance (m^2) as Autoware's estimator computes it: see AlignResult::covariance_xy.
  Eigen::Matrix2d covariance_xy = Eigen::Matrix2d::Zero();
  /// Weighted mean of the seven x-y positions (multi-NDT modes; the result's x-y otherwise).
  Eigen::Vector2d mean_xy = Eigen::Vector2d::Zero();
  /// The six offset poses, in the offsets' order (multi-NDT modes; empty otherwise).
  std::vector<Pose6> start_poses;
  /// MultiNdt: the six alignments' end poses. MultiNdtScore: the offset poses themselves.
  std::vector<Pose6> end_poses;
  /// MultiNdtScore: NVTL of the result, then at each offset pose (seven). Empty otherwise.
  std::vector<double> scores;
  /// Multi-NDT modes: the weight of the result, then of each end pose (seven, sum 1).
  std::vector<double> weights;
  int alignments = 0;       ///< extra alignments run (MultiNdt: one per offset)
  int evaluations = 0;      ///< extra score evaluations run (MultiNdtScore: one per offset)
  /// Calibrated: the term of the calibrated covariance that dominated (CalibratedCovariance::
  /// dominant); None otherwise.
  CovarianceTerm dominant = CovarianceTerm::None;
  double elapsed_ms = 0.0;  ///< wall time of the estimate
};

/// Where the multi-NDT modes start: `result_pose` with x and y moved by R_2x2 (offset_x[k],
/// offset_y[k]), R_2x2 the top-left 2x2 block of the pose's rotation (as Autoware's
/// propose_poses_to_search); z and the angles unchanged. Throws Error when the two offset
/// lists differ in length or hold a non-finite value, or the pose is not finite.
std::vector<Pose6> covariance_offset_poses(const Pose6& result_pose, const std::vector<double>& offset_x,
                                           const std::vector<double>& offset_y);

/// Autoware's softmax weights: exp((s_i - max s) / temperature), normalised to sum 1.
/// Throws Error for an empty list, a non-finite score or a temperature that is not > 0.
std::vector<double> softmax_weights(const std::vector<double>& scores, double temperature);

/// Autoware's Laplace x-y covariance -(H_xy)^-1, H_xy the top-left 2x2 block of `hessian`.
/// Not a covariance unless -H_xy is positive definite (check it, or use estimate_pose_covariance).
Eigen::Matrix2d laplace_xy_covariance(const Eigen::Matrix<double, 6, 6>& hessian);

/// Autoware's adjust_diagonal_covariance: `covariance_xy` turned into the frame of `pose`
/// (R' C R, R = R_2x2 of the pose), its diagonal raised to at least `min_xx` and `min_yy`
/// (m^2; Autoware uses output_pose_covariance's 0.0225 and 0.0225), turned back (R C R').
Eigen::Matrix2d floor_xy_covariance(const Eigen::Matrix2d& covariance_xy, const Pose6& pose, double min_xx,
                                    double min_yy);

/// Estimates the covariance of `result`, an alignment of `source` on `aligner`'s target
/// (see the file comment for the formulas). MultiNdt runs its alignments as one
/// Aligner::align_batch on `aligner` (its settings, its backend), MultiNdtScore its scores
/// with Aligner::evaluate (an Aligner never estimates a covariance itself). With a tiled
/// target, call it inside an Aligner::VersionHold taken right after the alignment
/// (attach_pose_covariance does) so that it sees the same map version. Throws Error
/// for bad options (see covariance_offset_poses, softmax_weights) and for what align and
/// evaluate reject (no target).
PoseCovarianceResult estimate_pose_covariance(Aligner& aligner, PointCloudView source, const AlignResult& result,
                                              PoseCovariance mode,
                                              const PoseCovarianceOptions& options = PoseCovarianceOptions{});

/// Fills `result`'s covariance_mode, covariance_valid, covariance and covariance_xy with
/// estimate_pose_covariance(aligner, source, result, mode) and adds its time to
/// timings.covariance_ms and total_ms; does nothing for None. Aligner::align and align_batch
/// never estimate a covariance: a caller that wants one (AlignSettings::pose_covariance)
/// calls this right after the alignment, with the same aligner and source:
///   AlignResult r = aligner.align(scan, guess);
///   attach_pose_covariance(aligner, scan, r);  // the aligner's pose_covariance
/// It holds the aligner's tiled target version (Aligner::hold_target_version) while it
/// estimates, so the estimate sees the map the alignment used last. Throws as
/// estimate_pose_covariance does.
void attach_pose_covariance(Aligner& aligner, PointCloudView source, AlignResult& result, PoseCovariance mode);
/// attach_pose_covariance with the aligner's own AlignSettings::pose_covariance.
void attach_pose_covariance(Aligner& aligner, PointCloudView source, AlignResult& result);
/// Each result of an align_batch of `source` gets the covariance of the aligner's own
/// AlignSettings::pose_covariance, all on one tiled map version.
void attach_pose_covariance(Aligner& aligner, PointCloudView source, std::vector<AlignResult>& results);

}  // namespace ndtcu
