#pragma once
/// \file
/// Scan-to-map localization: one scan in, one pose and a validity verdict out.
///
/// Per scan the Localizer (1) de-skews (LocalizerSettings::deskew), crops by range and
/// voxel-downsamples the scan (unless it was preprocessed already; on the GPU when the aligner runs on CUDA, see
/// LocalizerSettings::gpu_preprocess), (2) predicts the pose from the last two good poses
/// (constant velocity, scaled by the time stamps), (3) aligns the scan to the map with NDT
/// from that prediction, (4) checks the result (NVTL threshold, Autoware's 2.3 by default,
/// the share of points that met the map, convergence, and the scene's typical NVTL) and (5)
/// on failure recovers (LocalizerSettings::recovery): an attempt that ran out of iterations
/// is continued from where it stopped, then batches of hypotheses are searched in stages
/// of growing size (rotations about the prediction and the last good pose; positions near
/// the prediction; positions within a radius that grows with the time since the last good
/// pose), each winner taken only when it passes the same check and no distinct pose scores
/// about as well.
/// If nothing passes, the frame is *lost*: the result says so, carries the prediction (not
/// the failed alignment) as its pose, and the motion model keeps the last good poses. A
/// localization stack feeds scans and reads `valid` before using a pose.

#include <ndtcu/aligner.hpp>
#include <ndtcu/imu.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/sweep_motion.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace ndtcu {

namespace math {
struct Twist;      // kernels/deskew.hpp
struct SweepPath;  // kernels/deskew.hpp
}

/// What the localizer does for a frame whose first attempt (from the prediction) fails.
enum class Recovery {
  None,        ///< nothing: the frame is lost
  LastGood,    ///< the retries only: continue an attempt that ran out of iterations, else start from the last good pose
  Hypotheses,  ///< the retries of LastGood, then batches of hypotheses in stages (rotations, nearby positions, wider positions)
};

/// "none", "last-good", "hypotheses".
const char* to_string(Recovery recovery);
/// The Recovery named by to_string(); throws Error naming the value and the choices.
Recovery recovery_from_string(const std::string& name);

/// Where the sensor's motion over a sweep comes from, for moving each point of a scan with
/// per-point times (PointCloud::time) to the scan's reference time before the filter.
enum class Deskew {
  Off,               ///< "off": the points as the sensor gave them
  /// "auto": when the scan has times (a scan without them, or a view, is used as it is),
  /// Imu once the localizer has been given IMU samples (add_imu), else Odometry for a frame
  /// given its sweep's motion (SweepMotion), else ConstantVelocity.
  /// On the simulator's fast drive IMU rotation is at least as good as constant velocity's
  /// (docs/library.md, "De-skew"), so samples given are samples used.
  Auto,
  /// "constant-velocity": the motion between the last two good poses, each taken at its
  /// sweep's mean point time (the pose times exp(t_mean xi), xi the motion it was de-skewed
  /// with: what a swept scan pins whatever that motion got wrong, where the pose at the
  /// scan's time is off by about t_mean times its error), per second; none before the
  /// second good pose, nor on the frame right after a lost one (that motion is of a stretch
  /// before the loss).
  ConstantVelocity,
  /// "odometry": the sweep's motion given with the scan (SweepMotion), else the motion from
  /// the last good pose to the prediction given to localize(scan, time, prediction,
  /// covariance), per second of time between them; a frame given neither is not de-skewed.
  Odometry,
  /// "imu": the rotation from the IMU's angular rate (Localizer::add_imu) over the sweep
  /// [time + the scan's earliest point time, time + its latest], part by part: the sweep
  /// cut into equal parts, one per sample inside it and one more (at most 16), each
  /// turned by its own mean rate (a turn's onset within a sweep bends it in a way no one
  /// rate follows), all turned into the sensor frame by imu_roll_deg, imu_pitch_deg,
  /// imu_yaw_deg; the re-de-skew passes keep that rotation and mend the translation), the translation
  /// from the sweep's motion given (SweepMotion) or the prediction given to localize(scan,
  /// time, prediction, covariance) (odometry) when there is one, else from the
  /// constant-velocity model (none before the second good
  /// pose: rotation only). A sweep the samples do not cover (a stretch longer than
  /// imu_max_gap without a sample, or none at all) falls back to ConstantVelocity for that
  /// frame: LocalizationResult::imu_coverage says so, Localizer::imu_stats() counts it and
  /// the first such frame is logged as a warning.
  Imu,
};

/// "off", "auto", "constant-velocity", "odometry", "imu".
const char* to_string(Deskew deskew);
/// The Deskew named by to_string(); throws Error naming the value and the choices.
Deskew deskew_from_string(const std::string& name);

/// How the IMU samples covered a frame's sweep (LocalizationResult::imu_coverage).
enum class ImuCoverage {
  NotUsed,  ///< "": the frame's de-skew did not ask for the IMU
  Covered,  ///< "covered": the sweep's rotation is the IMU's
  /// "gap": a stretch of the sweep longer than LocalizerSettings::imu_max_gap had no sample;
  /// the frame fell back to constant velocity
  Gap,
  /// "missing": no sample within imu_max_gap of the sweep; the frame fell back to constant
  /// velocity
  Missing,
};

/// "", "covered", "gap", "missing".
const char* to_string(ImuCoverage coverage);

/// What the IMU buffer took and how it served the frames (Localizer::imu_stats()).
struct ImuStats {
  std::size_t added = 0;         ///< samples taken by add_imu()
  std::size_t out_of_order = 0;  ///< samples dropped: not later than the sample before them
  std::size_t held = 0;          ///< samples in the buffer now (the last 10 s of them)
  std::size_t frames_covered = 0;  ///< frames whose rotation came from the IMU
  std::size_t frames_gap = 0;      ///< frames that fell back: a gap over the sweep (ImuCoverage::Gap)
  std::size_t frames_missing = 0;  ///< frames that fell back: no sample near the sweep (ImuCoverage::Missing)
};

/// Everything a Localizer needs besides the map and the scans.
struct LocalizerSettings {
  /// NDT settings (Autoware's preset: resolution 2.0, fixed step 0.1, 30 iterations,
  /// Autoware covariance, which the NVTL threshold below was tuned on), with
  /// pose_covariance Laplace: a filter downstream needs a covariance with every pose, and
  /// the Laplace one costs no extra alignment. The localizer estimates it once per valid
  /// frame, for the accepted alignment only (attach_pose_covariance; an Aligner estimates
  /// none itself, so retries and lost frames cost no estimate); None leaves it zero.
  AlignSettings align = [] {
    AlignSettings s = autoware_preset();
    s.pose_covariance = PoseCovariance::Laplace;
    return s;
  }();
  /// Scan points closer than this to the sensor are dropped (m): returns from the vehicle
  /// itself and the sensor's near-field noise.
  double min_range = 1.0;
  /// Scan points farther than this are dropped (m): sparse far returns add little but cost.
  double max_range = 100.0;
  /// Voxel-filter leaf for the scan (m; 0 keeps every point). 1.0 m brings a 64-ring scan
  /// (~70-120k points) to a few thousand, the size Autoware's NDT input is tuned for.
  double voxel_leaf = 1.0;
  /// The filter can adapt to sparse scans: when voxel_leaf leaves fewer than this many
  /// points (and the crop left more), the leaf is shrunk by 0.7 and the scan filtered again,
  /// at most 4 times (down to 0.24 x voxel_leaf), so a sparse or already downsampled scan is
  /// not starved (0, the default: the fixed leaf). Not the default, by measurement: it
  /// helps none of the sparse cases there are. On the Livox Avia set (about 800 points left
  /// at 1 m), targets of 500, 700, 1,000, 1,200, 1,500 and 2,000 points localize 113, 110,
  /// 113, 114, 112 and 112 of 114 frames, 111, 107, 108, 107, 105 and 104 within 10 cm (the
  /// fixed leaf: 113 and 109): which hard frame a search finds moves with the points, no
  /// trend. BALM's 1 Hz scans reduced to 16 rings and every third point (about 520 points
  /// at 1 m): 30 of 30 at 0, 500, 1,000 and 1,200, ATE 2.4, 2.5, 3.1 and 3.2 cm. The
  /// simulator's VLP-16 keeping every 50th point (400 at 1 m): 30 of 30 either way, ATE 2.2
  /// cm fixed, 2.5 at 500. A thinned scan has about one point per cell already, so a smaller
  /// leaf adds few points (400 to 490) and finer cells weigh the dense rings more. What
  /// keeps a sparse scan's wrong pose out is the frame check (gate, typical NVTL, probe).
  std::size_t min_scan_points = 0;
  /// A frame with fewer points than this after the crop and filter is lost at once
  /// (decided_by FrameCheck::TooFewPoints): no alignment, retry or search runs, and the motion model
  /// is left as it was, so the next frame's searches are sized by the time since the last
  /// good pose, never by the empty scan. An empty scan once started the widest search
  /// (86,712 poses screened per frame); a scan this sparse cannot be told apart from a wrong
  /// pose: on the sample city, its scans thinned at random and predicted up to 2 m and 30 deg
  /// off, 32 of the 36 poses accepted from fewer than 60 points were more than 10 cm off
  /// (many by 1-3 m), 12 of 24 from 60 to 100 points, 21 of 87 from 100 to 200 (0 = align
  /// whatever is left).
  std::size_t min_frame_points = 100;
  /// Crop and voxel-filter scans on the GPU when the aligner's backend is CUDA (ignored on
  /// the CPU backend). The GPU filter keeps the CPU filter's points, cells and cell order;
  /// a centroid may differ from the CPU's in the last float bits (its points are summed in
  /// input order, the CPU sums them in PCL's order). Each concurrent preprocess() caller
  /// gets a filter of its own with its own CUDA stream; filtering that overlaps an alignment
  /// shares the device with it (on BALM and an H100 it moved the alignment's p95 from
  /// 1.30-1.44 ms to 1.35-1.45 ms).
  bool gpu_preprocess = true;
  /// De-skew (see Deskew): a scan with per-point times (PointCloud::time, seconds from the
  /// scan's reference time, the time given to localize()) has each point moved to where the
  /// sensor was at the reference time, by the sensor's motion over the sweep taken as a
  /// constant twist (kernels/deskew.hpp), before the crop and the voxel filter (on the GPU
  /// with the GPU filter). A scan without times, a zero motion and times of zero give
  /// today's points bit for bit. On the simulator's fast drive (up to 25 m/s) with a 0.1 s
  /// sweep, an HDL-32's frames from the third on: 36.9 cm RMS from the truth off, 5.8 cm
  /// with constant velocity, 3.2 cm with exact odometry; the first frames, before a motion
  /// is known, stay as far off as without (tests/localization/test_deskew.cpp;
  /// docs/library.md, "De-skew").
  Deskew deskew = Deskew::Auto;
  /// The IMU's orientation on the LiDAR (deg): R_sensor_imu = Rx(roll) Ry(pitch) Rz(yaw)
  /// (the order of a pose's angles), which turns an angular velocity measured about the
  /// IMU's axes into one about the sensor's. Identity by default (an IMU mounted with the
  /// LiDAR's axes). Only the rotation matters: a rigid body turns at one rate everywhere.
  double imu_roll_deg = 0.0;
  double imu_pitch_deg = 0.0;  ///< see imu_roll_deg
  double imu_yaw_deg = 0.0;    ///< see imu_roll_deg
  /// Deskew::Imu uses the samples for a sweep only when no stretch of it longer than this
  /// (s) is without one: consecutive samples within it at most this far apart, the first at
  /// most this after the sweep's start, the last at most this before its end. 0.02 s is 4
  /// periods of a 200 Hz IMU (3 samples lost in a row); a gap that long at 100 deg/s leaves
  /// the mean rate of a 0.1 s sweep wrong by at most what the rate changes in 20 ms.
  double imu_max_gap = 0.02;
  /// Re-de-skew passes after the alignment (0: none). Once a frame's pose is found, the
  /// motion from the last good pose to it (both at their sweeps' mean point times, as
  /// Deskew::ConstantVelocity takes them), over the time between them, is the sensor's
  /// motion one frame later than constant velocity's (two frames back) and is taken as the
  /// twist for the same scan: its raw points are de-skewed again with it (on the GPU with
  /// the GPU filter) and aligned once more, from the found pose; the passes stop early
  /// when the twist moves no point of the scan by more than 1 cm (kDeskewPassTolerance)
  /// more than the pass before. A pass is judged by every check of the frame (the gate
  /// against the prediction included) and runs the retries but no search; the frame's pose
  /// and verdict are the last pass that passed them (else the pass before's, which they
  /// passed too). A lost frame runs none (the motion to a wrong pose bends the scan towards
  /// fitting it, so a pass from a pose no check took could confirm it). It also de-skews the
  /// frames constant velocity cannot: the second one (one good pose known) and the one
  /// right after a lost frame (its first pass as read). A first frame, and the first after
  /// lost ones, take the sweep's own motion (its halves aligned apart), up to 8 passes while
  /// it changes. A swept frame every attempt lost, with a motion before it, is tried once
  /// more on the sweep's own motion, its halves aligned apart from the prediction; one that
  /// no vehicle could follow the motion before with (above about 1.2 g) is refused. Then,
  /// unless the IMU measured the sweep's rotation, 32 candidate turns about the sensor's z
  /// axis (up to 2 rad/s more or less, over the whole sweep or stepping in within it) each
  /// de-skew it and run it once from the prediction (and, when none passes, from the
  /// searches' best attempt, if far from it); the best NVTL the checks take is
  /// refined between them (a pattern search over the rate and where in the sweep it steps
  /// in) and kept, its covariance widened by the poses the others found, and no pass runs
  /// after it; the next frame's passes take their rotation from after the turn began.
  /// Found either way, the frame is FrameStage::SweepMotion. A scan without times, or whose
  /// times are all zero, runs no pass (the poses of 0 bit for bit). Needs deskew other than
  /// off. Each pass costs one more de-skew and filter and one alignment from a pose near
  /// the optimum (BENCHMARK.md, "De-skew after the alignment").
  int deskew_passes = 2;
  /// A sweep's own motion (its halves aligned apart: the first frame with no motion source,
  /// a frame after lost ones, a lost frame's; see deskew_passes) moves along the sensor's x
  /// axis, as a forward-facing sensor on a vehicle does: its sideways velocity (y) stays 0
  /// unless the halves find it sideways beyond doubt (over 3 m/s and over a quarter of the
  /// forward speed: a sensor mounted across the way it moves). One sweep hardly holds its sideways
  /// velocity: on the simulator's fast drive (24 m/s, truly 0.1 sideways) the halves
  /// settled 1.6 m/s to one side and the first frame's pose at its time 9.8 cm off, and a
  /// sideways velocity from -2 to +1 m/s changed the frame's NVTL by under 0.3%. Taken as 0,
  /// the first frames of HDL-32 seeds 1-6, VLP-16 1, 2, 6 and OS1-64 1 are 1.8-8.6 cm off
  /// where they were 3.6-18.1, and their 20 frames 1.8-2.7 cm where they were 1.9-4.5
  /// (BENCHMARK.md, "A sweep's own motion along the sensor's axis"). false: the halves set
  /// all three components (for a sensor that moves sideways, or handheld). Only for a
  /// spinning sensor, whose halves look opposite ways: halves that look the same way (a
  /// forward-looking pattern swept over its whole view, as a Livox Avia's) see the sideways
  /// velocity whole and set it themselves (held at 0 there, the simulator's fast Avia lost 17
  /// and 6 frames of seeds 1 and 2 at 24 m/s; free, none).
  bool deskew_forward = true;
  /// A pose is valid when its NVTL reaches this (Autoware's ndt_scan_matcher default, tuned
  /// with the Autoware covariance at resolution 2.0; NVTL depends on both: at resolution 1.0
  /// a correct BALM pose scores about 2.0, so a finer map needs a lower threshold).
  double nvtl_threshold = 2.3;
  /// ... and when at least this share of the scan's points found a map voxel. NVTL averages
  /// over the points that found one, so a scan that mostly misses the map (taken elsewhere,
  /// or a cloud of a handful of points) can score high on the few it hits; with many
  /// hypotheses per frame (the searches below) one of them will. Correct BALM and simulator
  /// poses match 78-100% of their points.
  double min_matched_ratio = 0.5;
  /// Reject an alignment that used every iteration without meeting the convergence rule,
  /// even when its NVTL passes (Autoware's check). On BALM OS0 the frames that ran out of
  /// iterations were the ones 0.2-0.7 m off with NVTL still above 2.3; the retry fixes them.
  bool reject_max_iterations = true;
  /// What the localizer does when the first attempt fails (see Recovery). Hypotheses by
  /// default: the staged searches below.
  Recovery recovery = Recovery::Hypotheses;
  /// Retries after a failed first attempt (0: none; Recovery::None makes none). A retry
  /// continues the best attempt from its end pose when that attempt ran out of iterations
  /// (a long correction still under way; again after a continuation that ran out in turn),
  /// and otherwise starts
  /// from the last good pose. Bounds the time a bad frame takes.
  int recovery_attempts = 2;
  /// Recovery::Hypotheses, stage 1a ("heading search"): the prediction and the last good
  /// pose turned about the map's vertical, every heading_search_step_deg up to
  /// rotation_search_range_deg either way, and the prediction swung by the same turns
  /// about the last good pose's position (a turn that ended between the frames turns the
  /// motion's direction too: the simulator's sparse 16-ring drive at 1 Hz was predicted
  /// 2.6 m and 37 deg off when the road straightened, and lost every later frame without
  /// these); 3 x 6 hypotheses at the defaults, every one refined, checked as stage 1 below. Sensors turn mostly about the vertical (the hand-held Livox
  /// Avia set: 10-14 deg between scans about it, 3-6 deg about the other axes, medians), so
  /// this cheap first try spares most frames stage 1's 2 x 123 hypotheses: on that set, 61
  /// of the 67 frames that reach the searches stop here, its alignments per run fall from
  /// 19,182 to 5,740, and 2 CPU threads run it at 9.4 frames per second instead of 6.2.
  /// (With 16 threads it is slower, 10.7 against 15.7 on an H200's host: its 12 long
  /// refinements leave most threads idle where stage 1's 246 short alignments do not.)
  /// Stage 1: one batch of hypotheses at the prediction's and the
  /// last good pose's positions, each turned by the rotations of rotation_offsets(
  /// rotation_search_range_deg, rotation_search_step_deg) about the sensor, searched as
  /// search_hypotheses() does (a coarse pass, the best distinct places refined, the winner
  /// by NVTL); the winner is taken when it passes the check and no distinct pose scores
  /// within the ambiguity margin of it. A sensor that turns fast between scans (a hand-held
  /// or a vehicle at 1 Hz: up to 41 deg between BALM's odd scans, the constant-velocity
  /// prediction up to 59 deg off in roll, pitch and yaw together) leaves the Newton basin
  /// of the prediction; this brings it back. It contains the retry from the last good pose
  /// (the rotation offset zero), which runs before it as well: before the gate and the
  /// scene's typical NVTL (search_nvtl_ratio) held it, that retry alone accepted confident
  /// wrong poses on BALM (2.3 m off with NVTL above the threshold); with them, BALM stays
  /// 30 of 30 and the Livox Avia set loses 1 frame of 114 instead of 6. The largest
  /// rotation (deg) it tries about each centre:
  double rotation_search_range_deg = 45.0;
  /// Its grid step (deg): 45 at 15 is 123 rotations per centre, every rotation of the ball
  /// within 13 deg of one.
  double rotation_search_step_deg = 15.0;
  /// The heading search's step (deg): turns about the vertical every this many degrees up
  /// to rotation_search_range_deg either way (6 per centre at 15 and 45), before the
  /// rotation search's grid. A scan that sees far down a street has a narrow basin in
  /// heading: the simulator's Avia scan 34 of its seed-3 turns diverges from its true
  /// position turned 6 deg, and at 15 deg a wrong place 4.4 m along the street won its heading
  /// search (at 7.5 the sequence is 100 of 100 within 10 cm). Finer is not uniformly
  /// better, since every search start after it changes: at 10 deg the seed-2 sequence lost
  /// 74 of 100 frames, and on the Livox Avia set 7.5 costs a third more time on 2 cores.
  double heading_search_step_deg = 15.0;
  /// Stage 2: positions within this radius (m) of the prediction on the grid of
  /// search_position_step, at yaws every search_yaw_step_deg over the yaw range below (a
  /// frame whose position the prediction missed: a stop, a start, a skid).
  double search_radius = 2.0;
  /// The grid of the position searches (stages 2 and 3): positions this far apart (m),
  /// coarser only where the radius would exceed InitialPoseOptions::max_hypotheses, ...
  double search_position_step = 2.0;
  /// ... each at yaws this far apart (deg). Their coarse pass takes search_step_size's
  /// steps too, so that 5 iterations reach the truth from the grid's farthest point (1.4 m
  /// at 2 m; Autoware's 0.1 m steps reach 0.5 m). The basins set the grid: 1.4 m off in
  /// position converges on every simulated sensor, while in heading a narrow scan that sees
  /// far converges from 3 deg and not from 5 (the simulator's Avia, seed-4 scan 41), a
  /// 360-deg one from 5 and not always from 7.5 (VLP-16, HDL-32). Against a 1 m grid at 15
  /// deg (the earlier default, 24 hypotheses per square metre against 18), the same run on
  /// an H200 over 49 simulated sequences (3,300 frames) and the Livox and BALM sets: 3,349
  /// frames within 10 cm instead of 3,223, 9 lost instead of 145, 0 wrong either way, in
  /// 14.3 s of frame time instead of 38.0 (BENCHMARK.md, "The position searches' grid").
  double search_yaw_step_deg = 5.0;
  /// Stage 3, when stage 2 fails and the time since the last good pose allows more:
  /// positions about the last good pose (not the prediction, whose velocity may be what no
  /// longer holds) within search_radius + max_speed x the time since it (m/s: how fast the
  /// sensor can move), up to max_search_radius. Its hypotheses are screened first
  /// (InitialPoseOptions::screen_above). At 1 Hz the default reaches 22 m at the first
  /// lost frame and 42 m at the second.
  double max_speed = 20.0;
  /// The yaw range of stages 2 and 3 is +-(rotation_search_range_deg + max_turn_rate_deg x
  /// the time since the last good pose), the full circle at most (deg/s).
  double max_turn_rate_deg = 90.0;
  /// Largest radius (m) of the position searches (at most 200). Beyond about 40 m over the
  /// full circle the grid is made coarser than search_position_step, so that no search
  /// exceeds InitialPoseOptions::max_hypotheses (100,000; screened to 1,024 before they are
  /// aligned).
  double max_search_radius = 50.0;
  /// Stage 4, when the wide search fails too (a sensor carried off, kidnapped, or lost
  /// beyond max_search_radius): the whole map is searched (InitialPoseSearch, built from the
  /// map on first use), on the first such frame and then on every this many lost frames in
  /// a row (a bad stretch pays for one global search per interval, not one per frame), and
  /// its pose is taken only when its verdict is found and it passes the frame check. 0:
  /// never (the default while its cost on every sensor is being measured); 1: every lost
  /// frame. A tiled map held only on the device has no host map to search: the stage is
  /// then skipped, with a warning.
  int global_search_interval = 0;
  /// An alignment (the first attempt, a retry or a search's winner) is taken only when its
  /// NVTL also reaches this share of the NVTL the accepted frames have been scoring (a
  /// running mean, known from the first accepted frame, kept through lost frames and
  /// forgotten only with a new map; 0: no such check). An attempt that fails only this goes on to the retries and searches. A scene's right poses score
  /// alike (BALM 3.2-3.4, the simulator's 3.3-3.4), while a search over hundreds of
  /// hypotheses, or a retry from a bad start, can end at a wrong place that passes the fixed
  /// threshold: on simulated 1 Hz turns, poses 2-20 m off at NVTL 2.5-2.7 passed Autoware's
  /// 2.3. 0.9, not 0.85: the simulator's Avia took a heading search's winner 4.4 m along a
  /// street at 0.855 of its scene's NVTL, while over about 3,100 right frames of the real and
  /// simulated sequences none scored below 0.93 of it (the Livox Avia set's frame 7), and 40
  /// simulated sequences of 60 frames (four sensors' 1 Hz turns with 8 seeds each, kidnap,
  /// stop-and-go, rough start and drive with 2) and the Livox and BALM sets give the same
  /// verdicts at 0.9 as at 0.85 (BENCHMARK.md, "The scene's typical NVTL at 0.9").
  double search_nvtl_ratio = 0.9;
  /// Largest Newton step |dp| of the searches' refinement (InitialPoseOptions::
  /// refine_step_size; 0: the aligner's step_size). The first attempt and the retries keep
  /// the aligner's. A search refines hypotheses turned by tens of degrees, and at Autoware's
  /// 0.1 m the wrong ones zigzag through every iteration and continuation while the batch
  /// waits for them: on the Livox Avia set (2 cores) 0.3 m cut the refinements' longest
  /// chains from 7,167 to 3,943 iterations over its searches and the run's time by 36%,
  /// with the same frames localized and within 10 cm; 0.2, 0.5 and 1.0 m were slower on the
  /// set or on the simulator's sparse turns (BENCHMARK.md, "The searches' step length").
  /// The position searches' coarse pass takes it too (see search_yaw_step_deg).
  double search_step_size = 0.3;
  /// Largest prediction step, in multiples of the last inter-frame motion (a long gap after
  /// lost frames would otherwise extrapolate the velocity without limit).
  double max_prediction_scale = 5.0;
  /// The degeneracy probe (0: none). A pose that passes the check is scored again (no
  /// iteration, one batch of 32 evaluations) at poses around it: along the six directions of
  /// its localizability (AlignResult::localizability, the Hessian's eigenvectors) and the
  /// sensor's forward and left axes, steps of 1 and 1.5 times this many metres of RMS point
  /// motion, both ways. A direction
  /// along which a probe still scores within degeneracy_margin of the pose's NVTL is one the
  /// scan does not pin: a tunnel's or a walled road's axis, an open lot's plane. The
  /// Hessian alone cannot say so, since an NDT map curves the score along a flat wall too
  /// (each voxel's Gaussian, with a false optimum at every voxel): the simulator's walled
  /// road holds its axis at 0.03 of its strongest direction and its tunnel at 0.15, while
  /// correct Livox Avia alignments reach down to 0.009. Such a frame is Degenerate: see
  /// FrameStatus. 2 m (Autoware's resolution) steps the points a whole voxel, past the
  /// false optima of a flat wall. A probe that scores more than degeneracy_margin above the
  /// pose shows a false optimum: the attempt is refused ("probe found better") and the next
  /// one starts from that probe (stage "probe").
  double degeneracy_probe_m = 2.0;
  /// ... within this NVTL of the pose's (see degeneracy_probe_m). A wrong place scores
  /// 0.5 or more below a right one on the simulator's streets; BALM's and the Livox set's
  /// correct poses drop by more than this at 2 m in every direction (see BENCHMARK.md,
  /// "Degeneracy").
  double degeneracy_margin = 0.1;
  /// A valid frame's pose is polished by one more alignment from it against the map's
  /// voxels at refine_ratio x align.resolution (0 = no refinement; 0.5, the default: 1 m
  /// voxels for Autoware's 2 m), and the frame's pose is that one when it converged,
  /// matched at least min_matched_ratio of the points, found support in the finer voxels
  /// (refine_min_support) and moved the pose by at most half the finer resolution and 2
  /// degrees (else the accepted alignment's pose stays: LocalizationResult::refined says
  /// which). Every check, search and score of the frame runs at align.resolution as before;
  /// only the final pose is the finer map's. A degenerate frame is refined along the
  /// directions its scan holds only (its pose along the weak ones stays the prediction's):
  /// from the remapped pose, held by the prediction as a prior (once it has a covariance,
  /// after the first good pose), going on up to three times while it runs out of
  /// iterations, and taken when it converged, matched as above and moved the points by at
  /// most half the finer resolution (RMS). On the simulator's tunnel the 2 m voxels leave
  /// the held directions 7-15 cm off across and 9 cm low, the finer ones under 1.5 cm; over
  /// its 10 Hz drive the error across the axis goes from 15.3 to 2.9 cm RMS
  /// (tests/localization/test_degeneracy.cpp). Needs the map as points
  /// (set_map(PointCloudView)): a map given as a VoxelMap or a TiledVoxelMap has no finer
  /// voxels, and its frames are not refined. On by default with refine_min_support, by
  /// measurement (CPU, from the first reference pose, against no refinement; BENCHMARK.md,
  /// "Resolution that fits the scan"): the Livox Avia set 114 of 114 frames within 10 cm
  /// against 110, ATE 3.1 cm against 4.7 (a sparse scan's optimum in 2 m voxels lay up to 12
  /// cm off, where an independent point-to-plane ICP agrees with the reference to 1-2 cm),
  /// BALM at 1 Hz 1.3 against 1.8 cm, BALM reduced to 16 rings and every third point 1.7
  /// against 2.4 cm, the simulator's 1 Hz turns over a 0.2 m map (VLP-16 with 3 cm range
  /// noise, HDL-32 every third point) better on both seeds tried, and over a 0.5 m map
  /// unchanged (refused by the support rule). It costs one alignment per valid frame, 1-3
  /// Newton iterations from the accepted pose (2 on the Livox set's median frame), and a
  /// second voxel map beside the first. 0.25 and 0.75 did worse on the real sets. A scan
  /// with per-point times is refined only when its whole motion over the sweep is known
  /// (a translation too: two good poses, or a prediction given) and the de-skew moved its
  /// points by at most half the finer resolution (at the sweep's latest time and the points'
  /// RMS range): on the simulator's fast drive (2-3 m per 0.1 s sweep) refining cost 0.5-1.5
  /// cm of ATE; with the rule its poses are those of refine_ratio 0 (BENCHMARK.md, "The
  /// defaults together"). A frame aligned with a prior (prediction_prior, or
  /// regularization_scale_factor with a GNSS pose) keeps its pose: the finer voxels carry no
  /// prior, and their optimum would undo its pull.
  double refine_ratio = 0.5;
  /// A valid frame's refined pose is taken only when the finer voxels hold at least this
  /// share of the points the map's voxels held at the accepted pose (the finer alignment's
  /// matched points over the accepted one's; 0: no such rule). A map too sparse for the finer
  /// voxels (a voxel needs 6 points, and a map thinned to 0.5 m leaves most 1 m voxels of a
  /// wall or the ground with 4) leaves a finer alignment that fits half the scan, and its
  /// pose is worse than the coarse one: the simulator's VLP-16 with 3 cm range noise over a
  /// 0.5 m map, 1 Hz turns, 4.7 cm ATE refined against 3.0 (its frames' share 0.50-0.56; the
  /// thinned HDL-32 and the Avia there 0.22-0.51). Over maps kept at 0.05-0.2 m (the Livox,
  /// BALM and the simulator's default) the median frame's share is 0.99-1.00; a few Livox
  /// frames that look past the map's edge fall to 0.33-0.85, and whether their refinement
  /// helps is mixed (0.6 and 0.9 keep all 114 frames within 10 cm too, 0.95 loses one).
  double refine_min_support = 0.7;
  /// The covariance of the constant-velocity prediction (when localize() is given no
  /// prediction of its own): standard deviations that grow with the time since the last
  /// good pose (with one good pose only, no velocity yet: max_speed and max_turn_rate_deg
  /// per second instead), this many metres per second in each axis of the position ...
  double motion_translation_sigma = 1.0;
  /// ... and this many radians per second in roll, pitch and yaw (0.35: 20 deg/s).
  double motion_rotation_sigma = 0.35;
  /// The Mahalanobis gate: an alignment whose correction from the prediction, d' C^-1 d
  /// with C the prediction's covariance, exceeds this is not taken from the first attempt
  /// or a retry; it must be confirmed by a search (whose winner must also be unambiguous).
  /// 22.46 is the chi-square 99.9% bound of 6 degrees of freedom; 0: no gate. No gate
  /// before the first good pose (the initial pose's uncertainty is not known).
  double gate_chi2 = 22.46;
  /// Align the first attempt and its retries with the prediction as a pose prior
  /// (AlignSettings::prior), its information the inverse of the prediction's covariance:
  /// along directions the scan does not pin, the result then stays near the prediction.
  /// Off by default: the degeneracy probe's remapping does that after the alignment
  /// (BENCHMARK.md, "Pose prior", compares the two). The searches never use it.
  bool prediction_prior = false;
  /// Autoware's GNSS regularization (PosePrior::regularization_scale_factor; 0: off) about
  /// the prediction (from localize()'s own prediction when given, e.g. odometry), in the
  /// first attempt and its retries.
  double regularization_scale_factor = 0.0;
  /// The frame's reported covariance (LocalizationResult::covariance) is the accepted
  /// alignment's estimate (align.pose_covariance, Laplace by default; kept as
  /// alignment.covariance) calibrated by calibrated_pose_covariance(): plus a floor from the
  /// scan's sparsity, a term from its residuals, and the disagreement between the accepted
  /// pose and the refinement at refine_ratio (when it ran) or the search's best distinct rival
  /// (when a search gave the pose). LocalizationResult::covariance_term says which dominated.
  /// The sparsity floor in position, in resolutions over sqrt(matched points) (0: none) ...
  double covariance_sparsity_translation = CalibratedCovarianceSettings{}.sparsity_translation;
  /// ... and in the angles, radians over sqrt(matched points) (0: none).
  double covariance_sparsity_rotation = CalibratedCovarianceSettings{}.sparsity_rotation;
  /// The residual term's scale for a pose at the map's resolution (0: none; see
  /// CalibratedCovariance::residual) ...
  double covariance_residual_scale = CalibratedCovarianceSettings{}.residual_scale;
  /// ... and for a pose the refinement gave (LocalizationResult::refined).
  double covariance_refined_residual_scale = CalibratedCovarianceSettings{}.refined_residual_scale;
  /// The softmax temperature (NVTL) weighing the search's best distinct rival against the
  /// accepted pose (0: the rival is left out).
  double covariance_hypothesis_temperature = CalibratedCovarianceSettings{}.hypothesis_temperature;
  /// The localizability term's c: along each weak direction (eigenvalue ratio rho below
  /// covariance_weak_direction_ratio rho_c) a variance of c^2 (1 / rho - 1 / rho_c) metres^2
  /// of RMS point motion (0: none; see CalibratedCovariance).
  double covariance_weak_direction_sigma = CalibratedCovarianceSettings{}.weak_direction_sigma;
  /// ... and its rho_c, the eigenvalue ratio below which a direction counts (at most 1).
  double covariance_weak_direction_ratio = CalibratedCovarianceSettings{}.weak_direction_ratio;
  /// The de-skew term's scale (0: none; see CovarianceEvidence::deskew): a swept scan's pose
  /// is as uncertain as the motion the de-skew took for its sweep. That motion's standard
  /// deviation, per component, is its change from the frame before's (a constant motion's
  /// lag behind the sweep; the odometry's mean over a sweep through a turn's onset), none for
  /// the IMU's rate part by part and a motion given in parts, and motion_translation_sigma and
  /// motion_rotation_sigma (per second) where no motion came before it (a first frame, the first
  /// after lost ones) or none was taken (the scan used as read).
  double covariance_deskew_scale = CalibratedCovarianceSettings{}.deskew_scale;
  /// The de-skew term's jerk (m/s^3; 0: none): a motion made from poses, or the mean of a
  /// prediction since the last pose, lags the sweep by a share of the frames' spacing, and
  /// its change from the frame before's shows the acceleration of the spacing before, not
  /// one that began since (a brake applied). This times the spacing (the acceleration's
  /// possible change) times the lag (s) adds, in quadrature, to each linear component's
  /// sigma: 1 m/s at 1 Hz, 0.01 m/s at 10 Hz, where the change before already shows the
  /// acceleration. 2.0: on the simulator's 1 Hz stop-and-go drives (6 m/s^2 braking) no frame
  /// more than 10 cm off reports under 3 cm where one did (seed 3), and none turns uncertain;
  /// docs/library.md, "Swept scans: the de-skew term".
  double covariance_deskew_jerk = 2.0;
  /// The de-skew term's sigma (rad/s, each axis) of the IMU's rate a sweep was de-skewed
  /// with (Deskew::Imu, the sweep covered): what a gyro's bias leaves after a static
  /// calibration, 0.1-0.25 deg/s on a consumer MEMS part (0.002 rad/s = 0.11 deg/s; the
  /// simulator's IMU has 0.003, -0.002, 0.004). Taken as exact (0), two of the simulator's
  /// fast drives with the IMU reported a yaw sigma of 0.16-0.18 mrad where the yaw was a
  /// steady 0.33 mrad off (6-D NEES 8.4, 93.3-95% within the 99% ellipse); with 0.002 their
  /// NEES is 6.3-6.7 (100%), and the drives that were honest already stay below 6 (0.004
  /// took them to 2.0-3.2). docs/library.md, "Swept scans: the de-skew term".
  double covariance_imu_rate_sigma = 0.002;
  /// A frame that passes every other check but whose calibrated covariance gives a position
  /// standard deviation above this (m; the largest, max_position_sigma()) is not valid but
  /// FrameStatus::Uncertain (decided_by FrameCheck::CovarianceBound); 0: no bound. 0.2 m is
  /// about twice the largest a right frame of the real sets reports (0.10 m, a Livox Avia
  /// frame of 264 matched points 5 cm off; BALM at 1 Hz at most 0.02 m).
  double max_position_sigma = 0.2;
};

/// Most cells along one axis of the scan's voxel-filter lattice (LocalizerSettings::
/// voxel_leaf): 10^6, so 10^18 cells over the crop's cube, within the filter's 64-bit cell
/// index (2^62). A smaller leaf would fail in the filter on every frame.
inline constexpr double kMaxScanVoxelCellsPerAxis = 1e6;

/// The smallest LocalizerSettings::voxel_leaf (m) that validate() accepts with these
/// settings: the crop keeps a scan within max_range of the sensor, a cube of 2 x max_range
/// a side, which the filter's lattice at the smallest leaf it may use (voxel_leaf, or 0.7^4
/// of it when min_scan_points is set) splits into at most kMaxScanVoxelCellsPerAxis cells
/// along each axis: 2 x max_range / 10^6 (0.2 mm at the default 100 m), over 0.7^4. 0 when
/// max_range is not finite (the scan's own extent bounds the lattice then).
double min_voxel_leaf(const LocalizerSettings& settings);

/// Throws Error naming the first setting out of range (ranges, leaf, NVTL threshold,
/// recovery attempts, prediction scale) after checking the NDT settings. A voxel_leaf
/// below min_voxel_leaf() is refused with its value, the limit and the max_range it
/// follows from (the filter would fail on every frame).
void validate(const LocalizerSettings& settings);

/// What happened to one frame.
enum class FrameStatus {
  Tracked,    ///< the first attempt (from the prediction) passed the check
  Recovered,  ///< the first attempt failed, a retry passed
  Lost,       ///< no attempt passed: the pose is the prediction and must not be trusted
  /// An attempt passed the check, but the degeneracy probe found directions the scan does
  /// not pin (LocalizerSettings::degeneracy_probe_m): the pose takes the alignment's
  /// correction along the directions it holds and the prediction along the others (solution
  /// remapping, Zhang et al. 2016), and so does its covariance: the prediction's along the
  /// weak directions, the alignment's along the others (before the first good pose, when
  /// the prediction has none, the probe's step along the weak ones). Not valid:
  /// along the weak directions it is the motion model's guess. The motion model goes on
  /// from it.
  Degenerate,
  /// Every check passed, but the frame's calibrated covariance exceeds
  /// LocalizerSettings::max_position_sigma: the pose is the alignment's, and the motion model
  /// goes on from it with that covariance, but it is not valid.
  Uncertain,
};

/// "tracked", "recovered", "lost", "degenerate", "uncertain".
const char* to_string(FrameStatus status);

/// Which check decided a frame (LocalizationResult::decided_by).
enum class FrameCheck {
  Passed,            ///< "passed": the frame is valid
  DegeneracyProbe,   ///< "degeneracy probe": the frame is degenerate
  TooFewPoints,      ///< "too few points": nothing ran (LocalizerSettings::min_frame_points)
  NoPose,            ///< "no pose": the best attempt gave no pose
  NotConverged,      ///< "not converged": it ran out of iterations (reject_max_iterations)
  MatchedRatio,      ///< "matched ratio": too few points matched (min_matched_ratio)
  Nvtl,              ///< "nvtl": NVTL below nvtl_threshold
  TypicalNvtl,       ///< "typical nvtl": NVTL below search_nvtl_ratio of the accepted frames'
  MahalanobisGate,   ///< "mahalanobis gate": too far from the prediction (gate_chi2)
  Ambiguous,         ///< "ambiguous": a distinct rival scored about as well
  /// "probe found better": every score check passed, but a degeneracy probe scored more
  /// than degeneracy_margin above the pose (not the optimum, see degeneracy_probe_m).
  ProbeFoundBetter,
  /// "covariance bound": every check passed, but the calibrated covariance exceeds
  /// LocalizerSettings::max_position_sigma (the frame is Uncertain).
  CovarianceBound,
};

/// The check's name as frames.csv, JSON and Python write it ("passed", "nvtl", ...).
const char* to_string(FrameCheck check);
/// The FrameCheck named by to_string(); throws Error naming the value and the choices.
FrameCheck frame_check_from_string(const std::string& name);

/// What gave a frame's pose (LocalizationResult::stage).
enum class FrameStage {
  None,            ///< "none": nothing was tried (too few points)
  Prediction,      ///< "prediction": the first attempt, from the prediction
  Continuation,    ///< "continuation": on from where an attempt ran out of iterations
  LastGood,        ///< "last-good": from the last good pose
  Probe,           ///< "probe": from the pose of a probe that beat a refused one
  HeadingSearch,   ///< "heading search"
  RotationSearch,  ///< "rotation search"
  PositionSearch,  ///< "position search"
  WideSearch,      ///< "wide search"
  InitialSearch,   ///< "initial search"
  GlobalSearch,    ///< "global search": anywhere in the map (InitialPoseSearch)
  SweepMotion,     ///< "sweep motion": from the prediction, on the scan de-skewed with its own motion
                   ///< (its halves', or a candidate turn's; a swept frame every other attempt
                   ///< lost; LocalizerSettings::deskew_passes)
};

/// The stage's name as frames.csv, JSON and Python write it ("prediction", "wide search", ...).
const char* to_string(FrameStage stage);
/// The FrameStage named by to_string(); throws Error naming the value and the choices.
FrameStage frame_stage_from_string(const std::string& name);

/// The outcome of one Localizer::localize call.
struct LocalizationResult {
  /// T_map_sensor. For a valid frame, the accepted alignment; for a lost one, the prediction.
  Eigen::Matrix4d pose = Eigen::Matrix4d::Identity();
  bool valid = false;                         ///< the pose passed the check (Tracked or Recovered)
  FrameStatus status = FrameStatus::Lost;     ///< tracked, recovered or lost
  /// The prediction: the constant-velocity guess, or the one given to localize().
  Eigen::Matrix4d prediction = Eigen::Matrix4d::Identity();
  /// Its covariance, [x y z roll pitch yaw] (m, rad): the one given, or the motion model's
  /// (LocalizerSettings::motion_translation_sigma); zero before the first good pose.
  Eigen::Matrix<double, 6, 6> prediction_covariance = Eigen::Matrix<double, 6, 6>::Zero();
  /// d' C^-1 d of the reported alignment's correction from the prediction (NaN without a
  /// covariance): see LocalizerSettings::gate_chi2.
  double mahalanobis2 = std::numeric_limits<double>::quiet_NaN();
  /// Which check decided the frame: Passed (valid), DegeneracyProbe (degenerate), or for a
  /// lost frame TooFewPoints (nothing ran, see LocalizerSettings::min_frame_points) or the
  /// check its best attempt failed (NoPose, NotConverged, MatchedRatio, Nvtl, TypicalNvtl,
  /// MahalanobisGate, Ambiguous, ProbeFoundBetter).
  FrameCheck decided_by = FrameCheck::Passed;
  /// The accepted alignment (valid frames) or the attempt with the highest NVTL (lost ones).
  AlignResult alignment;
  int attempts = 0;                 ///< alignments run for this frame (1 + retries + search hypotheses)
  /// Hypotheses the searches aligned for this frame (coarse and refined; 0 when none ran).
  int hypotheses = 0;
  /// Hypotheses a wide search screened (scored without aligning; see
  /// InitialPoseOptions::screen_above).
  int screened = 0;
  /// What gave the pose (see FrameStage); for a lost frame, the last thing tried
  /// (FrameStage::None when nothing was: too few points).
  FrameStage stage = FrameStage::Prediction;
  /// Directions the degeneracy probe found the scan does not pin (0 without a probe or when
  /// it found none), and the accepted alignment's NVTL minus the best of its 32 probes' (NaN
  /// without a probe; at most degeneracy_margin for a degenerate frame).
  int degenerate_directions = 0;
  double probe_nvtl_drop = std::numeric_limits<double>::quiet_NaN();
  /// Whether the pose is the refinement's (LocalizerSettings::refine_ratio) rather
  /// than the accepted alignment's, and how far (m) the refinement moved the accepted
  /// alignment's position (NaN when no refinement ran). `alignment` stays the accepted one.
  bool refined = false;
  double refinement_m = std::numeric_limits<double>::quiet_NaN();
  /// The refinement's support: the points the finer voxels held over those the accepted
  /// alignment's held (LocalizerSettings::refine_min_support; NaN when no refinement ran).
  double refinement_support = std::numeric_limits<double>::quiet_NaN();
  /// The pose change [x y z roll pitch yaw] (m, rad) of the probe's least-held direction,
  /// moving the points 1 m RMS (zero without a probe).
  Eigen::Matrix<double, 6, 1> weakest_direction = Eigen::Matrix<double, 6, 1>::Zero();
  /// The NVTL of the best distinct rival of the last search (NaN when no search ran or it
  /// had none), and whether it was within the ambiguity margin (the search's winner was then refused).
  double ambiguity_nvtl = std::numeric_limits<double>::quiet_NaN();
  bool ambiguous = false;
  int iterations_total = 0;         ///< Newton iterations over all attempts
  int evaluations = 0;              ///< derivative evaluations over all attempts
  std::size_t points_in = 0;        ///< scan points given
  std::size_t points_used = 0;      ///< points after the range crop and voxel filter
  double preprocess_ms = 0.0;       ///< crop and filter time inside localize() (0 if done before)
  /// Whether the scan's points were de-skewed (LocalizerSettings::deskew: the scan had
  /// times and a motion was known).
  bool deskewed = false;
  /// Where the de-skew's motion came from: ConstantVelocity, Odometry or Imu (IMU rotation,
  /// the translation of the prediction or constant velocity); Off when the first pass was
  /// not de-skewed (the re-de-skew passes, deskew_passes, take the aligned motion).
  Deskew deskew_motion = Deskew::Off;
  /// Deskew::Imu (or Auto with samples): whether the samples covered the sweep, or why the
  /// frame fell back to constant velocity; NotUsed otherwise.
  ImuCoverage imu_coverage = ImuCoverage::NotUsed;
  /// Re-de-skew passes run after the first alignment (LocalizerSettings::deskew_passes);
  /// the pose and verdict are those of the last pass the checks accepted (else the first
  /// alignment's), the costs (attempts, iterations, times) the sums over the passes.
  int deskew_passes = 0;
  double align_ms = 0.0;            ///< wall time of all attempts
  /// The frame's pose covariance, in [x y z roll pitch yaw] order (m, rad): the accepted
  /// alignment's estimate by settings.align.pose_covariance (Laplace by default: (-H)^-1 of
  /// the NDT score's Hessian, kept unchanged as alignment.covariance, whose covariance_xy,
  /// covariance_mode and covariance_valid say more) calibrated by
  /// calibrated_pose_covariance() with the settings' covariance_* constants; for a
  /// degenerate frame, remapped (see FrameStatus::Degenerate) from the alignment's own
  /// estimate along the held directions (the calibration was fitted on valid frames). Zero for lost frames, for
  /// None, and for Laplace when H is not negative definite. Its time is
  /// alignment.timings.covariance_ms (not in align_ms).
  Eigen::Matrix<double, 6, 6> covariance = Eigen::Matrix<double, 6, 6>::Zero();
  /// Which term of the calibrated covariance was largest (CovarianceTerm::None without one;
  /// Laplace for a degenerate frame, whose held part is the alignment's own estimate).
  CovarianceTerm covariance_term = CovarianceTerm::None;
};

/// Tracks a sensor in a fixed map, one scan at a time. Not thread-safe (one call at a
/// time), but preprocess() is const and may run on other threads meanwhile.
class Localizer {
 public:
  /// Validates `settings` and `execution` (throws Error) and creates the aligner, which
  /// runs as `execution` says (see Aligner's constructor for the backend and the CUDA
  /// stream); the GPU scan filter (gpu_preprocess) runs on its device.
  explicit Localizer(const LocalizerSettings& settings = LocalizerSettings{},
                     const ExecutionOptions& execution = ExecutionOptions{});
  /// Releases the map, the aligner and its workers.
  ~Localizer();
  /// Moves the map, the aligner and the motion state.
  Localizer(Localizer&&) noexcept;
  /// Moves the map, the aligner and the motion state.
  Localizer& operator=(Localizer&&) noexcept;

  /// The settings in use.
  const LocalizerSettings& settings() const noexcept;
  /// How the localizer runs, as it was made (Aligner::execution of its aligner).
  const ExecutionOptions& execution() const noexcept;
  /// The backend the alignments run on: Backend::Cpu or Backend::Cuda (Aligner::backend).
  Backend backend() const noexcept;
  /// Where preprocess() runs: Backend::Cuda (gpu_preprocess with the CUDA backend) or Backend::Cpu.
  Backend preprocess_backend() const noexcept;
  /// The aligner (its target map, settings and backend).
  const Aligner& aligner() const noexcept;

  /// Builds the voxel map from `map` (world frame), and with refine_ratio the finer
  /// one too. Keeps the motion state.
  void set_map(PointCloudView map);
  /// Uses a voxel map built elsewhere (see Aligner::set_target). Its frames are not refined
  /// (LocalizerSettings::refine_ratio needs the map's points).
  void set_map(std::shared_ptr<const VoxelMap> map);
  /// Swaps in the next version of the same map (the tiles around the pose, see
  /// TiledMapStreamer), between two frames: like set_map, but the scene's typical NVTL is
  /// kept, since the places already seen score as before.
  void update_map(std::shared_ptr<const VoxelMap> map);
  /// Follows a tiled map whose tiles change on another thread (Aligner::set_target of a
  /// TiledVoxelMap): every frame takes the version last published. The scene's typical
  /// NVTL is kept across versions, as update_map keeps it.
  void set_map(std::shared_ptr<TiledVoxelMap> tiles);
  /// Prepares `map` for a later update_map(map) or set_map(map) (Aligner::stage_target: on
  /// CUDA, uploaded while frames go on); may run on another thread while a frame is
  /// localized.
  void stage_map(std::shared_ptr<const VoxelMap> map);

  /// Starts (or restarts) tracking: the next scan is aligned from `pose` (T_map_sensor).
  /// Forgets the velocity. Throws Error for a non-finite or non-rigid matrix.
  void set_initial_pose(const Eigen::Matrix4d& pose);
  /// Starts (or restarts) tracking without a good guess: until a frame is accepted, each
  /// frame runs the initial pose search (find_initial_pose(): positions within `radius` m
  /// of `around` on a 1 m grid, yaws within +-yaw_range_deg/2 of its yaw every 15 deg, its
  /// roll and pitch) and takes the winner only when its verdict is found (not ambiguous)
  /// and it passes the frame check. Throws Error for a non-rigid `around` or a region the
  /// search refuses (see validate(InitialPoseOptions)).
  void set_initial_region(const Eigen::Matrix4d& around, double radius, double yaw_range_deg);
  /// Starts (or restarts) tracking with no pose at all: until a frame is accepted, each
  /// frame runs the global search over the whole map (InitialPoseSearch) and takes its pose
  /// only when its verdict is found (not ambiguous) and it passes the frame check. Throws
  /// Error before set_map, or for a map the global search cannot search (a tiled map held
  /// only on the device, one too large for its grid).
  void set_initial_global();
  /// True once an initial pose was given.
  bool initialized() const noexcept;
  /// Whether valid frames are refined (LocalizerSettings::refine_ratio set and the map
  /// given as points; set_map of a VoxelMap or a TiledVoxelMap and update_map turn it off).
  bool refines() const noexcept;

  /// The range crop and voxel filter of the settings (on the device of preprocess_backend());
  /// thread-safe: concurrent callers run concurrently, each on a GPU filter of its own.
  PointCloud preprocess(const PointCloud& scan) const;
  /// The same for points read where they lie (a caller's buffer): nothing is copied before
  /// the filters, and the output has no intensities.
  PointCloud preprocess(PointCloudView scan) const;

  /// Preprocesses `scan` (sensor frame) and localizes it. `time` (seconds) scales the
  /// constant-velocity prediction; equal or non-increasing times predict one frame's motion.
  /// Throws Error before set_map / set_initial_pose, for a non-finite time (nothing changes),
  /// or for a non-finite point.
  /// preprocess() crops and downsamples the scan, intensities included, into a new cloud,
  /// which is what gets aligned.
  LocalizationResult localize(const PointCloud& scan, double time);
  /// The same for a scan read where it lies (a caller's buffer of packed float x y z): no
  /// PointCloud of it is made (the CPU filters read it in place; the CUDA filter copies it
  /// into its own upload staging, as it does a cloud); the poses are those of localize()
  /// of a PointCloud of the same points.
  LocalizationResult localize(PointCloudView scan, double time);
  /// The same for a scan already passed through preprocess() (or filtered by the caller),
  /// read where it lies: nothing is copied before the alignments.
  LocalizationResult localize_preprocessed(PointCloudView filtered, double time);
  /// localize() from a prediction of the caller's (a stack's filter, wheel or inertial
  /// odometry: T_map_sensor at `time`) and its covariance ([x y z roll pitch yaw], m and
  /// rad, symmetric positive semi-definite; a zero row: unknown in that direction) instead
  /// of the constant-velocity one. The covariance sets the Mahalanobis gate and, with
  /// prediction_prior, the alignment's prior. Throws Error for a non-rigid prediction or an
  /// invalid covariance, naming it.
  LocalizationResult localize(const PointCloud& scan, double time, const Eigen::Matrix4d& prediction,
                              const Eigen::Matrix<double, 6, 6>& covariance);
  /// The same for a scan already passed through preprocess().
  LocalizationResult localize_preprocessed(PointCloudView filtered, double time, const Eigen::Matrix4d& prediction,
                                           const Eigen::Matrix<double, 6, 6>& covariance);
  /// localize() with the sensor's motion over this sweep given (SweepMotion): with
  /// Deskew::Odometry, Imu (its translation) or Auto, the scan is de-skewed with it, and no
  /// re-de-skew pass replaces it (LocalizerSettings::deskew_passes: the passes estimate what
  /// was given). The first frame too, which has no good pose to take a motion from. Ignored
  /// by Deskew::Off and ConstantVelocity, and for a scan without times. Throws Error for a
  /// non-finite entry, naming it.
  LocalizationResult localize(const PointCloud& scan, double time, const SweepMotion& motion);
  /// The same with a prediction and its covariance (as localize(scan, time, prediction,
  /// covariance)).
  LocalizationResult localize(const PointCloud& scan, double time, const Eigen::Matrix4d& prediction,
                              const Eigen::Matrix<double, 6, 6>& covariance, const SweepMotion& motion);
  /// localize() with the sensor's motion over this sweep given in parts (SweepMotionParts:
  /// odometry denser than the sweeps), each point de-skewed along them; otherwise as with a
  /// SweepMotion (Deskew::Imu takes the parts' mean for its translation). Throws Error for
  /// parts that are empty, more than kMaxParts, of lengths that differ, not increasing, or
  /// not finite, naming what.
  LocalizationResult localize(const PointCloud& scan, double time, const SweepMotionParts& motion);
  /// The same with a prediction and its covariance.
  LocalizationResult localize(const PointCloud& scan, double time, const Eigen::Matrix4d& prediction,
                              const Eigen::Matrix<double, 6, 6>& covariance, const SweepMotionParts& motion);

  /// Gives the localizer an IMU sample (ImuSample: the IMU's frame, the scans' clock) for
  /// Deskew::Imu (and Auto). Samples are buffered in time order (the last 10 s of them,
  /// counted from the newest), so feed each before the scan whose sweep it covers (a
  /// stack: as they arrive; a replay: up to the end of the next sweep). A sample not later
  /// than the one before it is dropped and counted (imu_stats().out_of_order; the first is
  /// logged as a warning). Throws Error naming the field for a non-finite value (nothing
  /// changes).
  void add_imu(const ImuSample& sample);
  /// add_imu() of each, in order.
  void add_imu(const std::vector<ImuSample>& samples);
  /// What the IMU buffer took, and how many frames it served or failed to cover.
  ImuStats imu_stats() const noexcept;

  /// The constant-velocity prediction for a scan at `time` (the last good pose when fewer
  /// than two are known). Throws Error before set_initial_pose.
  Eigen::Matrix4d predict(double time) const;

  /// Frames lost in a row since the last valid one.
  int consecutive_lost() const noexcept;
  /// True once the frames' times were found not to match their points' times: a frame
  /// after one that took its sweep's own motion (its halves, aligned apart, at the points'
  /// times) moved at a mean speed, by the frames' times, more than 3 times that motion's
  /// speed plus 3 m/s, or less than a third of it minus 3 m/s (scans numbered at a period
  /// ten times too short, or stamps in the wrong unit). From then on, until
  /// set_initial_pose, no motion between poses at the frames' times de-skews a scan (the
  /// constant-velocity motion, the passes from the last good pose): each sweep takes its
  /// own motion, as a first frame does. Warned once, with the two speeds.
  bool frame_times_disagree() const noexcept;

 private:
  // preprocess and localize of `scan` with `intensity` and `time` (one per point) or none
  // (null); with `path` and `time`, each point de-skewed first.
  PointCloud preprocess_points(PointCloudView scan, const float* intensity, const float* time = nullptr,
                               const math::SweepPath* path = nullptr) const;
  LocalizationResult localize_points(PointCloudView scan, const float* intensity, const float* time, double time_s,
                                     const Eigen::Matrix4d* prediction, const Eigen::Matrix<double, 6, 6>* covariance,
                                     const SweepMotionParts* motion = nullptr);
  // One frame from `prediction` with `covariance` (both null: the motion model's).
  // With `start`, the first attempt starts there instead of at the prediction, and no
  // search runs after the retries (a re-de-skew pass: the pose the pass before found).
  LocalizationResult localize_frame(PointCloudView filtered, double time, const Eigen::Matrix4d* prediction,
                                    const Eigen::Matrix<double, 6, 6>* covariance,
                                    const Eigen::Matrix4d* start = nullptr);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndtcu
