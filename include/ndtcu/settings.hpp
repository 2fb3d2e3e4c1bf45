#pragma once
/// \file
/// Settings of an NDT alignment: plain structs with documented defaults, and the two
/// presets (`autoware`, the default, and `pcl`). What is computed only: how it runs (backend,
/// threads, device, stream) is an ExecutionOptions (ndtcu/execution.hpp).

#include <ndtcu/execution.hpp>

#include <Eigen/Core>

#include <string>

namespace ndtcu {

/// How the voxels around a transformed source point are found.
enum class SearchMethod {
  /// Every voxel whose centroid lies closer than the resolution: what PCL and Autoware do
  /// (with a kd-tree); here a 3x3x3 lattice block plus the same float distance test.
  Radius,
  Direct27,  ///< the 27 lattice cells around the point's cell (ndt_omp's DIRECT26 + centre)
  Direct7,   ///< the point's cell and its 6 face neighbours (ndt_omp's DIRECT7)
  Direct1,   ///< the point's cell only (ndt_omp's DIRECT1)
};

/// How the length of each Newton step is chosen.
enum class LineSearch {
  /// More-Thuente line search as PCL: mu 1e-4, nu 0.9, at most 10 trials, step length in
  /// [epsilon / 2, step_size].
  MoreThuente,
  /// Autoware's default: no search, the Newton step's length clamped to
  /// [epsilon / 2, step_size].
  Fixed,
};

/// How the Newton direction is taken from the Hessian H and gradient g of the score (which
/// is maximised).
enum class NewtonDirection {
  /// PCL's and Autoware's: H dp = -g solved by SVD as it is. Where H is not negative
  /// definite (the score is convex along some direction, e.g. across a voxel boundary) the
  /// solution heads for a saddle; the step rule reverses it when it does not ascend, and
  /// the fixed step can then go back and forth at full length. The default, for parity.
  Pcl,
  /// Saddle-free Newton: H's eigenvalues lambda replaced by -|lambda|, so the direction
  /// always ascends and is scaled by the curvature's magnitude. The same step as Pcl
  /// wherever H is negative definite.
  SaddleFree,
};

/// When the Newton iterations stop (besides max_iterations).
enum class ConvergenceRule {
  /// PCL 1.13: when the last step's squared translation is <= epsilon (a squared length
  /// compared with epsilon, rotation ignored); with epsilon 0.01 and step 0.1 it stops
  /// after one iteration. Kept for parity only.
  Pcl,
  /// Autoware: when the last step's length |dp| (all six entries) is below epsilon.
  Autoware,
};

/// How each voxel's covariance is estimated from its n points (S = scatter sum of
/// (x - mu)(x - mu)'); the two are different score functions.
enum class CovarianceMode {
  /// PCL 1.13's VoxelGridCovariance: S / (n - 1), computed single-pass as
  /// (sum x x' - sum x mu') / (n - 1).
  Pcl,
  /// Autoware's multigrid NDT: each voxel's sum starts at the identity, so (S + I) / (n - 1).
  Autoware,
};


/// How align() estimates the covariance of the pose it returns (AlignResult::covariance),
/// after Autoware's ndt_scan_matcher (covariance_estimation_type, with FIXED_VALUE as None).
/// See ndtcu/pose_covariance.hpp for the formulas.
enum class PoseCovariance {
  /// None: the result's covariance stays zero (Autoware's FIXED_VALUE publishes its
  /// configured matrix instead of an estimate).
  None,
  /// Laplace approximation: (-H)^-1 of the score's Hessian at the result (Autoware's
  /// LAPLACE_APPROXIMATION, whose x-y block is -(H_xy)^-1). No extra alignment.
  Laplace,
  /// Autoware's MULTI_NDT: six more alignments started 0.5-1 m from the result (offsets
  /// turned by its heading), and the spread of the seven end poses. Six aligns more.
  MultiNdt,
  /// Autoware's MULTI_NDT_SCORE: NVTL at the result and at the six offset poses (no
  /// alignment), softmax weights (temperature 0.05) and the weighted spread of the seven
  /// poses. Six evaluations more.
  MultiNdtScore,
  /// The sandwich (robust) covariance of an M-estimator: A^-1 B A^-1, A = -(the points'
  /// Hessian sum), B = sum_i g_i g_i' over the points' gradients, both at the result (plus a
  /// prior's information in each when the aligner has one). Unlike Laplace it does not take
  /// the NDT score for a log-likelihood, whose scale (d1, d2) is a fitting constant: scaling
  /// the score leaves it unchanged. One pass over the scan on the host.
  Sandwich,
  /// The Laplace estimate calibrated (calibrated_pose_covariance in ndtcu/pose_covariance.hpp,
  /// PoseCovarianceOptions::calibrated; the constants a Localizer's frames use by default):
  /// widened by the residuals' spread, the scan's sparsity and its weak directions, which
  /// the alignment's own curvature does not see (the Laplace estimate alone is several times
  /// too small against real errors). One pass over the scan's points more than Laplace. A
  /// Localizer's frames calibrate with more of what the frame knows (the refinement's gap,
  /// a search's rival): with this mode there it attaches Laplace and calibrates that.
  Calibrated,
};

/// Most Newton iterations an alignment may ask for (AlignSettings::max_iterations,
/// BatchOptions::max_iterations, InitialPoseOptions::coarse_iterations). Autoware runs 30
/// and PCL's tutorial 35; 1,000 steps of Autoware's 0.1 m cover 100 m, far past any basin
/// of convergence. The CUDA loop keeps a trace of max_iterations entries (64 bytes) per
/// hypothesis, so the limit also bounds what a batch with a trace takes (64 KB each); a
/// mistyped 1e8 would ask for gigabytes before the first iteration.
inline constexpr int kMaxIterations = 1000;

/// A prior on the pose an alignment returns: a quadratic term added to the NDT score
/// (which is maximised), score - 1/2 r' L r with r the difference of the pose and `pose`
/// (angles wrapped) and L = `information` + Autoware's longitudinal regularization term.
/// Where the scan pins the pose, a weak prior changes little; along a direction the scan
/// does not constrain (a corridor, a road between flat walls) the solution follows the
/// prior. Applied in every Newton iteration of align(), align_from_pose() and align_batch()
/// on both backends; the result's score and Hessian (so its localizability and Laplace
/// covariance) then include the prior's term, its NVTL does not, and evaluate() never does.
///
/// The translation part holds the world position at which the transform puts the source
/// cloud's origin: the sensor's position for a scan in its sensor frame (origin zero, as
/// the readers leave a cloud whose coordinates stay within 10 km).
struct PosePrior {
  /// Centre [x y z roll pitch yaw] (m, rad), world frame, as align_from_pose's guess.
  Eigen::Matrix<double, 6, 1> pose = Eigen::Matrix<double, 6, 1>::Zero();
  /// Information (inverse covariance) in the pose's units, symmetric positive
  /// semi-definite; zero (the default) adds nothing. Directions the prior does not know
  /// get zero information, not the inverse of a huge variance.
  Eigen::Matrix<double, 6, 6> information = Eigen::Matrix<double, 6, 6>::Zero();
  /// Autoware's GNSS regularization (ndt.regularization.scale_factor c; 0: off, Autoware's
  /// default 0.01): the score loses c * N * d^2, N the point-voxel pairs and d the
  /// longitudinal distance from `pose` (along its heading, in x-y). Autoware weights it
  /// the same way but takes the heading of the current pose.
  double regularization_scale_factor = 0.0;

  /// Whether the prior adds anything: non-zero information or regularization.
  bool active() const { return regularization_scale_factor > 0.0 || !(information.array() == 0.0).all(); }
};

/// Everything an alignment computes with besides the clouds: the NDT math. How it runs
/// (backend, threads, CUDA device and stream) is an ExecutionOptions, given to the Aligner.
struct AlignSettings {
  /// Voxel edge length (m), also the radius of the radius search. Used as float, as PCL
  /// and Autoware store it.
  double resolution = 2.0;
  double step_size = 0.1;     ///< largest step length |dp| per iteration
  double epsilon = 0.01;      ///< convergence threshold (see ConvergenceRule)
  int max_iterations = 30;    ///< Newton iterations at most, in [1, kMaxIterations]
  double outlier_ratio = 0.55;  ///< outlier ratio of the score's mixture (Magnusson eq. 6.7)
  SearchMethod search = SearchMethod::Radius;            ///< neighbour search
  LineSearch line_search = LineSearch::Fixed;            ///< step length rule
  ConvergenceRule convergence = ConvergenceRule::Autoware;  ///< stopping rule
  NewtonDirection newton_direction = NewtonDirection::Pcl;  ///< direction from H and g
  CovarianceMode covariance = CovarianceMode::Autoware;     ///< voxel covariance convention
  int min_points_per_voxel = 6;   ///< voxels with fewer points are not used (PCL, Autoware: 6)
  double eigenvalue_ratio = 0.01;  ///< eigenvalues below this times the largest are raised to it
  /// Whether and how the pose covariance of an alignment is estimated
  /// (AlignResult::covariance, covariance_xy). The Aligner itself never estimates one: its
  /// callers do, after the alignment, with attach_pose_covariance (ndtcu/pose_covariance.hpp),
  /// as the one-shot align(), the CLI, the Python module, the PCL drop-in and the Localizer
  /// (for its accepted alignment) do. None costs nothing, MultiNdt six more alignments per
  /// result, MultiNdtScore six more score evaluations.
  PoseCovariance pose_covariance = PoseCovariance::None;
  /// The pose prior (PosePrior); none by default (PosePrior::active() false), the results
  /// then bit for bit those without one. Aligner::set_prior replaces it between calls.
  PosePrior prior;
};

/// Whether settings and execution ask for a Newton loop the device can run
/// (ExecutionOptions::gpu_loop Device with the fixed step and NewtonDirection::Pcl); the
/// CUDA backend then runs it there when the driver allows, and on the host otherwise.
bool wants_device_loop(const AlignSettings& settings, const ExecutionOptions& execution);

/// Autoware's ndt_scan_matcher defaults: resolution 2.0, step 0.1, epsilon 0.01,
/// 30 iterations, radius search, fixed step, Autoware convergence and covariance.
AlignSettings autoware_preset();

/// PCL's NormalDistributionsTransform as the tutorials use it: resolution 1.0, step 0.1,
/// epsilon 0.01, 35 iterations, radius search, More-Thuente, PCL convergence and covariance.
AlignSettings pcl_preset();

/// The preset named "autoware" or "pcl"; throws Error otherwise.
AlignSettings preset(const std::string& name);

/// "radius", "direct27", "direct7", "direct1".
const char* to_string(SearchMethod m);
/// "more-thuente", "fixed".
const char* to_string(LineSearch l);
/// "pcl", "autoware".
const char* to_string(ConvergenceRule c);
/// "pcl", "saddle-free".
const char* to_string(NewtonDirection d);
/// "pcl", "autoware".
const char* to_string(CovarianceMode c);
/// "none", "laplace", "multi-ndt", "multi-ndt-score".
const char* to_string(PoseCovariance c);

/// Parses a SearchMethod name (see to_string); throws Error otherwise.
SearchMethod search_method_from_string(const std::string& name);
/// Parses a LineSearch name; throws Error otherwise.
LineSearch line_search_from_string(const std::string& name);
/// Parses a NewtonDirection name; throws Error otherwise.
NewtonDirection newton_direction_from_string(const std::string& name);
/// Parses a ConvergenceRule name; throws Error otherwise.
ConvergenceRule convergence_rule_from_string(const std::string& name);
/// Parses a CovarianceMode name; throws Error otherwise.
CovarianceMode covariance_mode_from_string(const std::string& name);

/// Parses a PoseCovariance name; throws Error otherwise (naming the value and the choices).
PoseCovariance pose_covariance_from_string(const std::string& name);

/// Throws Error naming the first setting out of range (resolution, step size, epsilon,
/// iterations in [1, kMaxIterations], outlier ratio, points per voxel, eigenvalue ratio),
/// an epsilon above twice the step size (step lengths are kept in [epsilon / 2,
/// step_size], an empty range then: the steps would be epsilon / 2 long and
/// "converge" anywhere), or an enum holding a value that is none of its names (e.g. a
/// PoseCovariance cast from an int), a prior whose pose is not finite or whose
/// information is not finite, not symmetric or not positive semi-definite, or whose
/// regularization scale factor is negative or not finite.
void validate(const AlignSettings& settings);
/// Throws Error naming what is wrong with `prior` (see validate(AlignSettings)).
void validate(const PosePrior& prior);

}  // namespace ndtcu
