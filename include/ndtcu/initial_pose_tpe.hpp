#pragma once
/// \file
/// Initial pose search with Autoware's tree-structured Parzen estimator (TPE), for users
/// who want its semantics (autoware_ndt_scan_matcher's `align_pose`, the `ndt_align`
/// service).
///
/// The method. Particles are poses (x, y, z, roll, pitch, yaw) with the heading convention
/// of ROS, R = Rz(yaw) Ry(pitch) Rx(roll). The first `startup_trials` are drawn from the
/// prior: x, y, z, roll and pitch from normal distributions around the rough pose with the
/// standard deviations of its covariance, the yaw uniformly over the full circle. Each
/// particle is aligned with the aligner's full settings and the *aligned* pose enters the
/// history with its transform probability as the objective. Every later particle is
/// proposed from the history: the best trials (a tenth of them, at most 10) form the good
/// set and the others the bad set, each a Parzen estimator (a mixture of Gaussian kernels
/// of fixed widths, 0.25 m in x and y and 2.5 deg in yaw; z, roll and pitch are left out);
/// `candidates` (100) poses drawn from the prior are ranked by log l(x) - 5 log g(x), l and
/// g the good and bad densities, and the best one is aligned next. The result is the
/// particle of highest NVTL (a converged one at its place before it when it did not
/// converge).
///
/// What ndtcu adds. The startup particles depend on no history, so they are aligned as one
/// batch (Autoware aligns them one by one); the proposals after them may be made and
/// aligned in small batches (TpeOptions::proposal_batch), and the search looks for a rival
/// and reports ambiguity as find_initial_pose() does.

#include <ndtcu/aligner.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace ndtcu {

/// How a TPE dimension is drawn: the prior of the startup trials, and of the candidates
/// every later proposal is chosen from.
enum class TpePrior {
  Normal,   ///< normal distribution: mean `center`, standard deviation `scale`
  Uniform,  ///< uniform distribution over [center - scale, center + scale)
};

/// One dimension of the space a TreeParzenEstimator searches.
struct TpeDimension {
  TpePrior prior = TpePrior::Normal;  ///< how values are drawn
  double center = 0.0;                ///< mean (Normal) or middle of the interval (Uniform)
  double scale = 1.0;                 ///< standard deviation (Normal) or half width (Uniform); >= 0
  /// Standard deviation of the Parzen kernels along this dimension; 0 leaves the dimension
  /// out of the densities (Autoware leaves z, roll and pitch out).
  double bandwidth = 0.0;
  /// An angle in radians: drawn values are wrapped into [-pi, pi) and kernel differences
  /// are taken the short way round.
  bool periodic = false;
};

/// The estimator's constants (Autoware's in tree_structured_parzen_estimator.hpp/.cpp).
struct TpeSettings {
  /// Trials drawn from the prior before the densities are used.
  std::size_t startup_trials = 100;
  /// Share of the trials that form the good set (floor(n * good_ratio)) ...
  double good_ratio = 0.1;
  /// ... at most this many.
  std::size_t max_good = 10;
  /// Prior draws ranked per proposal.
  std::size_t candidates = 100;
  /// Weight of the bad density in the ranking, log l - bad_weight * log g. Autoware's 5
  /// (the TPE paper's ratio is weight 1) steers proposals harder away from the bad trials.
  double bad_weight = 5.0;
  /// Seed of the std::mt19937_64 that draws every random value.
  std::uint64_t seed = 0;
};

/// A tree-structured Parzen estimator that maximises an objective (Bergstra et al. 2011,
/// in Autoware's form: candidates from the prior, ranked by the good/bad density ratio).
/// Deterministic for a seed on every platform: the values come from std::mt19937_64 (whose
/// output the standard fixes) through its own uniform and normal transforms, not the
/// implementation-defined std distributions.
class TreeParzenEstimator {
 public:
  using Input = std::vector<double>;  ///< one value per dimension
  /// A point tried and its objective.
  struct Trial {
    Input input;             ///< where
    double objective = 0.0;  ///< what it scored (higher is better; NaN ranks last)
  };

  /// Throws Error for no dimensions, a scale that is negative or not finite, a bandwidth
  /// that is negative or not finite, good_ratio outside (0, 1), max_good or candidates 0,
  /// or a bad_weight that is negative or not finite.
  explicit TreeParzenEstimator(std::vector<TpeDimension> dimensions, const TpeSettings& settings = {});

  /// Adds a trial. Throws Error when `input` has the wrong size or a non-finite value.
  void add(const Input& input, double objective);
  /// The next point to try: a prior draw while fewer than startup_trials trials are known
  /// (or the good set is empty), then the best of `candidates` prior draws by log_ratio().
  Input propose();
  /// One draw from the prior.
  Input sample_prior();
  /// log l(x) - bad_weight * log g(x): the good and bad sets' Parzen densities at `input`
  /// (each an equal-weight mixture of the kernels at its trials). Needs a nonempty good set.
  double log_ratio(const Input& input) const;

  /// The trials, best first (equal objectives in the order they were added).
  const std::vector<Trial>& trials() const noexcept { return trials_; }
  /// The size of the good set: min(max_good, floor(trials * good_ratio)).
  std::size_t good_count() const noexcept;
  /// The dimensions searched.
  const std::vector<TpeDimension>& dimensions() const noexcept { return dims_; }
  /// The settings in use.
  const TpeSettings& settings() const noexcept { return settings_; }

 private:
  double uniform01();
  double normal01();
  double log_kernel(const Input& x, const Input& mu) const;

  std::vector<TpeDimension> dims_;
  TpeSettings settings_;
  std::vector<Trial> trials_;
  std::mt19937_64 engine_;
};

/// Most particles a TPE search may align (TpeOptions::particles, also the bound of
/// startup_trials and proposal_batch), set by the search's measured cost, which grows faster
/// than the particles: each proposal ranks `candidates` draws by kernels at every particle
/// aligned before it, so the proposals cost candidates x particles^2 / 2 kernels besides one
/// alignment each. On the sample scan with 2 CPU cores, 200 particles (Autoware's) take
/// 1.5 s, 1,000 12 s, 2,000 29 s and 4,000 96 s. Checked by validate(TpeOptions) before
/// anything is drawn, whether the value comes from the library, `initpose --particles`, an
/// Autoware parameter file's initial_pose_estimation.particles_num or Python.
inline constexpr int kMaxTpeParticles = 2000;

/// Most candidate draws over a search (TpeOptions::particles x TpeOptions::candidates): the
/// proposals' cost at kMaxTpeParticles with Autoware's 100 candidates, so that more
/// candidates take fewer particles.
inline constexpr long long kMaxTpeCandidateDraws = 200000;

/// What find_initial_pose_tpe() does. Lengths in metres, angles in degrees. The defaults
/// are Autoware's: particles_num and n_startup_trials of ndt_scan_matcher.param.yaml, the
/// spreads of pose_initializer.param.yaml's gnss_particle_covariance (variances 1, 1, 0.01
/// m^2 and 0.01, 0.01 rad^2; its yaw variance is not used, the yaw being uniform), the
/// estimator's constants of tree_structured_parzen_estimator.cpp.
struct TpeOptions {
  /// Particles aligned in all (Autoware's initial_pose_estimation.particles_num).
  int particles = 200;
  /// Of which drawn from the prior, in one batch (initial_pose_estimation.n_startup_trials);
  /// between 1 and `particles` (equal: a purely random search).
  int startup_trials = 100;
  double stddev_x = 1.0;  ///< standard deviation (m) of the particles' x around the rough pose
  double stddev_y = 1.0;  ///< ... of y (m)
  double stddev_z = 0.1;  ///< ... of z (m)
  /// ... of roll (deg): 0.1 rad.
  double stddev_roll_deg = 5.729577951308232;
  /// ... of pitch (deg): 0.1 rad.
  double stddev_pitch_deg = 5.729577951308232;
  /// The yaw is uniform over the rough pose's heading +-yaw_range_deg/2; 360 (Autoware)
  /// is the full circle, the rough heading unused.
  double yaw_range_deg = 360.0;
  /// Kernel width (m) of the Parzen estimators in x and y: 0.25 m, the distance Autoware
  /// takes NDT to converge from reliably.
  double bandwidth_xy = 0.25;
  /// Kernel width (deg) in yaw: 2.5 deg, likewise.
  double bandwidth_yaw_deg = 2.5;
  double good_ratio = 0.1;   ///< TpeSettings::good_ratio
  int max_good = 10;         ///< TpeSettings::max_good
  int candidates = 100;      ///< TpeSettings::candidates
  double bad_weight = 5.0;   ///< TpeSettings::bad_weight
  /// Proposals made from one history and aligned as one batch after the startup. 1 is
  /// Autoware's sequential search (each proposal sees every result before it). A larger
  /// batch keeps a GPU busy (on CUDA a batch of 8 takes about 1.5 times one alignment:
  /// BENCHMARK.md, "Batched alignment") but its proposals do not see each other's results,
  /// so they often land in the same basin: fewer distinct tries per particle. Keep it small
  /// against `particles - startup_trials` (8 or 16 of 100).
  int proposal_batch = 1;
  /// Seed of the estimator's generator: the same seed, scan, map and options give the same
  /// result. (Autoware seeds one generator with 0 per process, so a second search there
  /// continues the first one's stream.)
  std::uint64_t seed = 0;
  /// Two poses are distinct when their positions differ by more than this (m) ...
  double ambiguity_distance = 1.0;
  /// ... or their orientations by a rotation of more than this angle (deg).
  double ambiguity_angle_deg = 10.0;
  /// The result is ambiguous when a distinct particle's NVTL is within this of the winner's
  /// (the same rule and margin as InitialPoseOptions::ambiguity_margin).
  double ambiguity_margin = 0.1;
};

/// Checks `options`; throws Error naming the field, the value and the range (particles and
/// proposal_batch in [1, kMaxTpeParticles], startup_trials in [1, particles], candidates at
/// least 1 and particles x candidates at most kMaxTpeCandidateDraws, ...).
void validate(const TpeOptions& options);

/// Searches for the pose of `scan` in the aligner's map near `around` by Autoware's TPE
/// (see the file's description). Each particle is aligned with the aligner's settings; the
/// winner is the particle of highest NVTL (converged or not, as in Autoware), except that
/// one which did not converge gives way to the best converged particle at its place (not
/// distinct from it by ambiguity_distance and ambiguity_angle_deg); the rival is the
/// best-NVTL particle distinct from the winner. In the result, coarse_hypotheses counts the
/// startup particles (coarse_ms their batch), refined_hypotheses the proposed ones
/// (refine_ms their batches). When the aligner's settings ask for a pose covariance, the
/// winner is aligned once more from its start to attach it (the same pose, bit for bit).
/// Throws Error when the aligner has no target, `around` is not finite, or the options
/// are invalid.
InitialPoseResult find_initial_pose_tpe(Aligner& aligner, PointCloudView scan, const Pose6& around,
                                        const TpeOptions& options = {});

}  // namespace ndtcu
