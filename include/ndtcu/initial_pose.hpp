#pragma once
/// \file
/// Initial pose search: where in the map is a scan, given only a rough position?
///
/// The sweep: a grid of x-y positions within a radius of a rough pose, times a range of
/// yaws, each a hypothesis with the rough pose's z, roll and pitch. All of them are aligned
/// for a few iterations in one batch (the coarse pass); the best few distinct places are
/// aligned again with the aligner's full settings (the refinement, a second batch, and once more for those that ran out of iterations), and the
/// refined hypothesis of highest NVTL wins. The search then looks for a rival: the best
/// hypothesis that ended at a distinct pose. When the rival scores within a margin of the
/// winner, the result says the place is ambiguous (a symmetric corridor, a row of identical
/// shelves) instead of guessing between them.

#include <ndtcu/aligner.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <limits>
#include <vector>

namespace ndtcu {

/// What find_initial_pose() sweeps and how it judges the hypotheses. Lengths in metres,
/// angles in degrees.
struct InitialPoseOptions {
  /// Positions are swept within this distance (m) of the rough pose, in x and y. 0: the
  /// rough position only (a yaw search).
  double radius = 2.0;
  /// Spacing (m) of the square grid of positions. 1 m is half of Autoware's default
  /// resolution (2 m): a start within ~0.7 m of the truth lies inside its basin.
  double position_step = 1.0;
  /// Yaws are swept over +-yaw_range/2 around the rough pose's yaw; 360 is the full circle
  /// (no duplicate at +-180).
  double yaw_range_deg = 360.0;
  /// Spacing (deg) of the yaws. 15 deg leaves every heading within 7.5 deg of a start,
  /// well inside the few tens of degrees the NDT score converges from.
  double yaw_step_deg = 15.0;
  /// Newton iterations of the coarse pass (the aligner's step size bounds how far each
  /// moves: 5 x 0.1 m with Autoware's settings). Enough to separate right from wrong.
  int coarse_iterations = 5;
  /// How many coarse winners (distinct places, by NVTL) are refined with the aligner's
  /// full settings. The coarse pass ranks places after 5 short steps from up to 0.7 m and
  /// 7.5 deg off on a thinned scan, so the right one is not always near the top: over BALM's
  /// 60 scans from 20 starts each within 5 m (H100), 16 left it out in 11 of 1200 searches,
  /// 4 of which then took a place 2-7 m along the path at NVTL 2.6-2.7 (the right one
  /// scores 3.2-3.4); 32 refined it in those. The refinement is a fifth of the time.
  int refine_count = 32;
  /// Largest Newton step |dp| of the coarse pass (0: the aligner's step_size). Its few
  /// iterations reach coarse_iterations x this from each start, so a grid of positions
  /// wider than that leaves the truth out of reach of its nearest hypothesis.
  double coarse_step_size = 0.0;
  /// Largest Newton step |dp| of the refinement and its continuations (0: the aligner's
  /// step_size). The refinement starts where the coarse pass stopped, up to metres and tens
  /// of degrees from the optimum, and at Autoware's 0.1 m a wrong start zigzags through
  /// all of its iterations and continuations; the batch waits for its slowest hypothesis.
  /// The localizer's searches use LocalizerSettings::search_step_size.
  double refine_step_size = 0.0;
  /// Two poses are distinct when their positions differ by more than this (m) ...
  double ambiguity_distance = 1.0;
  /// ... or their orientations by a rotation of more than this angle (deg).
  double ambiguity_angle_deg = 10.0;
  /// The result is ambiguous when a distinct pose's NVTL is within this of the winner's.
  /// 0.1 lies above the NVTL differences that noise and sampling make between two equally
  /// good places (a few hundredths: 0.005 between the two headings of a room symmetric
  /// under a half turn, in the tests), so such a pair is flagged, and well below the drop
  /// of a wrong place (the simulator sample's best distinct pose scores 0.55 below the
  /// truth's: 2.77 against 3.32), so a clear winner is not.
  double ambiguity_margin = 0.1;
  /// Roll and pitch of the hypotheses: false keeps the rough pose's; true levels the scan by
  /// its own ground plane (estimate_ground()) in a map whose z axis points up (as UTM and
  /// Autoware maps do), so a tilted sensor needs no attitude from the user. When no ground
  /// plane is found the rough pose's roll and pitch are kept (InitialPoseResult::leveled
  /// says which).
  bool level_from_ground = false;
  /// The coarse pass aligns at most this many of the scan's points (every k-th, k the
  /// smallest that brings it under; 0: all). The coarse pass only ranks hypotheses, and
  /// its cost is proportional to the points; the refinement always uses the whole scan.
  std::size_t coarse_points = 512;
  /// A search of more hypotheses than this screens them first: each is scored where it
  /// stands (Aligner::score_batch, no iteration) on at most screen_points of the scan,
  /// and only the screen_keep best go on to the coarse pass (0: never screen). A wide
  /// search (the localizer's after a kidnapping: 30 m at 1 m and 15 deg is 68,000
  /// hypotheses) then costs about what a coarse pass of screen_keep costs; the default
  /// sweep of 5 m (1,944 hypotheses) is not screened.
  std::size_t screen_above = 4096;
  /// Points of the scan (every k-th) the screen scores; see screen_above.
  std::size_t screen_points = 128;
  /// Hypotheses the screen passes on, the best by NVTL times the share of the scan's
  /// points that met a voxel (a pose where most of the scan misses the map ranks low
  /// however well its few points fit).
  std::size_t screen_keep = 1024;
  /// A sweep larger than this many hypotheses is refused (Error): it would take minutes on
  /// the CPU and a larger step is nearly always what was meant.
  std::size_t max_hypotheses = 100000;
};

/// One refined candidate of a search, as InitialPoseResult::candidates ranks them.
struct PoseCandidate {
  Pose6 pose = Pose6::Zero();  ///< where its alignment ended
  double nvtl = 0.0;           ///< NVTL there
  /// Share of the scan's points that met a map voxel there (matched / source points).
  double overlap = 0.0;
  bool converged = false;      ///< its alignment converged
  double distance = 0.0;       ///< x-y-z distance (m) from the best candidate's position
  double angle_deg = 0.0;      ///< rotation (deg) from the best candidate's orientation
  /// A place distinct from the best's (farther than ambiguity_distance, or turned by more
  /// than ambiguity_angle_deg): the runner-up the ambiguity check weighs.
  bool distinct = false;
};

/// Where the branch and bound of a search spent its work.
struct GlobalSearchStats {
  double cell = 0.0;               ///< leaf step and pyramid cell (m)
  std::size_t points = 0;          ///< scan points the bounds summed
  std::size_t yaws = 0;            ///< yaws searched
  double yaw_step_deg = 0.0;       ///< their spacing
  std::size_t tilts = 1;           ///< roll-pitch attitudes per yaw (1: 4-DoF)
  int levels = 0;                  ///< levels of the pyramid
  std::size_t top_nodes = 0;       ///< nodes of the top level (all of them scored)
  std::size_t nodes_scored = 0;    ///< nodes whose bound was computed, leaves included
  std::size_t leaves_scored = 0;   ///< of which leaves
  std::size_t batches = 0;         ///< scoring batches (GPU launches)
  std::size_t brute_force_leaves = 0;  ///< leaves a sweep of every position and yaw would score
  bool standing = false;           ///< positions were restricted to standing heights
  double sensor_height = 0.0;      ///< the scan's height above its ground plane (m), when found
  bool truncated = false;          ///< the search stopped at max_nodes
  double best_leaf_score = 0.0;    ///< the best leaf's mean point value (0-1)
  double prepare_ms = 0.0;         ///< leveling, thinning, the rotated points
  double bound_ms = 0.0;           ///< the branch and bound
  double screen_ms = 0.0;          ///< the NDT score of the kept leaves
  double align_ms = 0.0;           ///< the NDT alignment of the candidates
};

/// What find_initial_pose() found.
struct InitialPoseResult {
  /// The winning refined alignment (the highest NVTL): pose, fitness, iterations. Its
  /// `converged` is false when it ran out of iterations in the refinement and its one
  /// continuation (verdict() says not_converged then).
  AlignResult best;
  std::size_t screened_hypotheses = 0; ///< hypotheses scored by the screen (0: no screen)
  std::size_t coarse_hypotheses = 0;  ///< hypotheses of the coarse batch (all, or those the screen kept)
  std::size_t refined_hypotheses = 0; ///< hypotheses refined (the second batch)
  /// Hypotheses aligned in all: coarse_hypotheses + refined_hypotheses (the screen's
  /// scores are not alignments).
  std::size_t hypotheses_aligned = 0;
  double time_ms = 0.0;    ///< the whole search (wall clock)
  double screen_ms = 0.0;  ///< the screen (0 without one)
  double coarse_ms = 0.0;  ///< the coarse batch
  double refine_ms = 0.0;  ///< the refinement batch
  /// True when some hypothesis (refined, or coarse and not refined) ended at a pose
  /// distinct from the winner's (InitialPoseOptions::ambiguity_distance / _yaw_deg).
  bool has_rival = false;
  /// The best NVTL among those distinct hypotheses; NaN without a rival.
  double ambiguity_nvtl = std::numeric_limits<double>::quiet_NaN();
  /// Where that rival ended (zero without a rival).
  Pose6 rival_pose = Pose6::Zero();
  /// True when the rival's NVTL is within InitialPoseOptions::ambiguity_margin of the
  /// winner's: the scan fits a distinct place about as well, so the winner is not to be
  /// trusted as the pose.
  bool ambiguous = false;
  /// True when the hypotheses' roll and pitch came from the scan's ground plane
  /// (InitialPoseOptions::level_from_ground and a plane found).
  bool leveled = false;
  /// The refined hypotheses, best first (by NVTL; the best is `best`), each place once:
  /// a later one within the ambiguity distance and angle of an earlier one is left out.
  std::vector<PoseCandidate> candidates;
  /// What the global search's branch and bound did (InitialPoseSearch; zero otherwise).
  GlobalSearchStats global;
  /// The best pose is the finer map's (InitialPoseSearch::set_fine): it was polished there.
  bool refined = false;
  /// How far the finer map's alignment moved the best pose (m; 0 when none ran).
  double refinement_m = 0.0;
};

/// What a search's result means for a caller who must not take a wrong pose.
enum class InitialPoseVerdict {
  Found,           ///< converged, NVTL at or above the threshold, not ambiguous: the pose
  Ambiguous,       ///< a distinct pose scores within the margin: no pose is to be taken
  BelowThreshold,  ///< the best pose fits the map too poorly (NVTL below the threshold)
  NotConverged,    ///< no refined hypothesis converged
  NoOverlap,       ///< the scan met no map voxel from any hypothesis (or the map or scan is empty)
  LowOverlap,      ///< fewer than half of the scan's points met a map voxel at the best pose
};

/// "found", "ambiguous", "below_threshold", "not_converged", "no_overlap", "low_overlap".
const char* to_string(InitialPoseVerdict verdict);

/// The verdict on `result` with a pose valid from `nvtl_threshold` (2.3: Autoware's
/// localizer threshold, as ndtcu localize uses). The first that applies of: no overlap,
/// low overlap (NVTL averages over the points that met a voxel, so a pose where most of the
/// scan misses the map is no evidence however high it scores), ambiguous, not converged,
/// below the threshold, found.
InitialPoseVerdict verdict(const InitialPoseResult& result, double nvtl_threshold = 2.3);

/// The ground plane of a scan, in the scan's frame.
struct ScanGround {
  bool found = false;
  /// Unit normal of the plane, pointing from the ground to the sensor: the scan's up.
  Eigen::Vector3d up = Eigen::Vector3d::UnitZ();
  double height = 0.0;     ///< the sensor's distance above the plane (m)
  std::size_t inliers = 0; ///< points within the inlier distance of the plane
  std::size_t points = 0;  ///< points examined
};

/// Finds the scan's ground: the plane with the most points within 0.1 m among planes below
/// the sensor (at least 0.3 m) whose normal lies within `max_tilt_deg` of the scan's z
/// axis, by RANSAC with a fixed seed (the same scan always gives the same plane), refined
/// by a least-squares fit of its inliers. Found when at least 10% of the points (and 50)
/// lie on it. Examines at most 20,000 points (every k-th).
ScanGround estimate_ground(PointCloudView scan, double max_tilt_deg = 60.0);

/// The rotation that levels a scan whose up direction is `up` (its frame) in a z-up map,
/// turned to heading `yaw` (rad) about the map's z: Rz(yaw) * (the shortest rotation of
/// `up` onto z).
Eigen::Matrix3d leveled_rotation(const Eigen::Vector3d& up, double yaw);

/// Checks `options`; throws Error naming the field and the value (a negative radius, a
/// step that is not positive, a yaw range outside (0, 360], a count below 1, a negative
/// distance or margin).
void validate(const InitialPoseOptions& options);

/// The hypotheses of the sweep around `around` (x-y grid within the radius times the
/// yaws), in the order the coarse pass aligns them, with the rough pose's roll and pitch.
/// The overload with `up` levels them instead: each hypothesis's rotation is
/// leveled_rotation(up, yaw). Throws Error for what validate()
/// rejects, a non-finite `around`, or more than options.max_hypotheses hypotheses (naming
/// the count and suggesting a larger step).
std::vector<Pose6> initial_pose_hypotheses(const Pose6& around, const InitialPoseOptions& options = {});
std::vector<Pose6> initial_pose_hypotheses(const Pose6& around, const InitialPoseOptions& options,
                                           const Eigen::Vector3d& up);

/// Rotation offsets (rotation vectors, rad) for hypotheses around an orientation: the
/// identity first, then every point of a cubic grid of `step_deg` whose angle is at most
/// `range_deg` (45 at 15: 123 rotations, none of a ball of 45 deg more than 13 deg from
/// one). Throws Error for a range outside [0, 180], a step that is not positive, or a grid
/// finer than 50 steps per half-axis.
std::vector<Eigen::Vector3d> rotation_offsets(double range_deg, double step_deg);

/// The coarse-to-fine search of find_initial_pose() over the given hypotheses: one coarse
/// batch with options.coarse_iterations iterations, the refine_count best distinct places
/// refined with the aligner's settings, the winner by NVTL among the converged, and the
/// rival and ambiguity check (the sweep's grid options are not used). Throws Error when the
/// aligner has no target, the list is empty or longer than options.max_hypotheses, or the
/// options are invalid. `scan` is read where it lies: the refinement aligns it as given;
/// the screen and the coarse pass align every k-th point of it (InitialPoseOptions::
/// screen_points, coarse_points), gathered into a cloud of their own only when k > 1.
InitialPoseResult search_hypotheses(Aligner& aligner, PointCloudView scan, const std::vector<Pose6>& hypotheses,
                                    const InitialPoseOptions& options = {});

/// Searches for the pose of `scan` in the aligner's map near `around` (see the file's
/// description): one coarse batch of every hypothesis with options.coarse_iterations
/// iterations (the same aligner, BatchOptions::max_iterations), then one batch
/// of the refine_count best distinct places with the aligner's own settings. Throws Error
/// when the aligner has no target, `around` is not finite, or the options are invalid
/// (see initial_pose_hypotheses()). `scan` is read as search_hypotheses() reads it.
InitialPoseResult find_initial_pose(Aligner& aligner, PointCloudView scan, const Pose6& around,
                                    const InitialPoseOptions& options = {});

}  // namespace ndtcu
