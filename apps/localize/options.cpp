// `ndtcu localize`: the option definitions, and the localizer settings they make.
#include "localize/options.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

namespace ndtcu::cli::localize {

namespace {

// The map, where the scans come from, the first pose, the reference and the output folder.
// Returns the map options a --config file can set.
ConfigurableOptions add_input_options(CLI::App* cmd, LocalizeOptions& o) {
  cmd->add_option("--map", o.map,
                  "map point cloud (.pcd, .ply, .bin), world frame, or a tiled map folder (with "
                  "pointcloud_map_metadata.yaml)")
      ->required();
  add_origin_option(cmd, o.origin, "the map", "--origin",
                    "a tiled map's tiles share one origin, with auto a middle tile's corner for a map beyond 10 km");
  ConfigurableOptions given;
  given.map_radius =
      cmd->add_option("--map-radius", o.map_radius,
                      "with a tiled map: keep the tiles within this distance (m) of the pose loaded")
          ->capture_default_str()
          ->check(positive_number());
  given.map_update_distance =
      cmd->add_option("--map-update-distance", o.map_update_distance,
                      "with a tiled map: load and drop tiles (on a background thread) each time the pose has moved "
                      "this far (m)")
          ->capture_default_str()
          ->check(positive_number());
  cmd->add_option("--map-memory", o.map_memory_mb,
                  "with a tiled map: host memory (MB) for the tiles and their joined map; tiles beyond --map-radius "
                  "stay until the budget needs their room, least recently used first (0 = no budget: they are "
                  "dropped at once)")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_flag("--map-update-wait", o.map_update_wait,
                "with a tiled map: swap each map update in before the frame after the one that asked for it, "
                "waiting for it if need be (reproducible runs; by default the update is taken whenever it is "
                "ready, holding up a frame only when the map in hand lacks tiles within --max-range (at most "
                "--map-radius minus --map-update-distance) of where its scan is expected)");
  cmd->add_option("--scans", o.scans,
                  "folder of scans (ordered by name), a text file listing scan paths [time], or a rosbag (.bag, "
                  ".mcap, .db3, or a ROS 2 bag folder) whose PointCloud2 messages are the scans")
      ->required();
  cmd->add_option("--topic", o.topic,
                  "with --scans BAG: the sensor_msgs/PointCloud2 topic to read (default: the bag's only one)");
  cmd->add_option("--point-time", o.point_time,
                  "the scans' per-point time field: FIELD:UNIT (UNIT s, ms, us, ns or auto), FIELD, `auto` (the "
                  "first of t, time, timestamp, time_stamp, offset_time; unit from its type) or `none`")
      ->capture_default_str()
      ->check([](const std::string& text) {
        if (text == "auto") return std::string();
        ReadOptions scratch;
        try {
          parse_point_time(text, scratch);
        } catch (const Error& e) {
          // CLI11 names the option itself: the message without its own "--point-time ".
          const std::string what = e.what(), prefix = "--point-time ";
          return what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size()) : what;
        }
        return std::string();
      });
  cmd->add_option("--deskew", o.deskew,
                  "move each point of a scan with per-point times to the scan's reference time before the filter: "
                  "off, auto (when the scan has times: imu with --imu or --imu-topic, else odometry with --odometry "
                  "or --odometry-topic, else constant-velocity), constant-velocity (the motion between the last two "
                  "good poses), odometry (the motion --odometry or --odometry-topic measured over the sweep, from its "
                  "first to its last point time; where it does not cover the sweep, its prediction's motion to the "
                  "frame's time; needs one of them), imu (the rotation from the "
                  "IMU's angular rate over the sweep, part by part between its samples, the translation from --odometry when given, else constant "
                  "velocity; needs --imu or --imu-topic; a sweep the samples do not cover falls back to "
                  "constant-velocity); frames.csv: deskewed, deskew_motion, imu")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "auto", "constant-velocity", "odometry", "imu"}));
  cmd->add_option("--imu", o.imu,
                  "IMU samples for --deskew imu (and auto): a CSV file with the header time,wx,wy,wz or "
                  "time,wx,wy,wz,ax,ay,az (s in the scans' clock, rad/s about the IMU's axes, m/s^2), one sample a "
                  "line; `ndtcu simulate` writes one (imu.csv)");
  cmd->add_option("--imu-topic", o.imu_topic,
                  "with --scans BAG: a sensor_msgs/Imu topic of that bag, read as --imu reads its file (each message "
                  "at the bag's record time, the clock of the scans)")
      ->excludes("--imu");
  cmd->add_option("--imu-rotation", o.imu_rotation,
                  "the IMU's orientation on the LiDAR, roll,pitch,yaw in deg (R = Rx Ry Rz, turning the IMU's "
                  "angular velocity into the LiDAR's axes)")
      ->delimiter(',')
      ->expected(3)
      ->capture_default_str()
      ->check(CLI::Range(-180.0, 180.0));
  cmd->add_option("--imu-max-gap", o.imu_max_gap,
                  "the longest stretch of a sweep without an IMU sample (s) that --deskew imu takes; a frame with a "
                  "longer one, or with none, falls back to constant-velocity (counted and warned, frames.csv imu)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--deskew-passes", o.deskew_passes,
                  "re-de-skew after the alignment: the motion from the last good pose to the pose found de-skews the "
                  "scan again and the frame is aligned once more from that pose, up to this many times while the "
                  "motion changes (0: none; needs --deskew other than off); frames.csv: deskew_passes")
      ->capture_default_str()
      ->check(CLI::Range(0, 5));
  cmd->add_flag("--deskew-sideways", o.deskew_sideways,
                "let a sweep's own motion (its halves aligned apart: the first frame with no motion source, a "
                "lost frame's) move sideways; by default it moves along the sensor's x axis, as a forward-facing "
                "sensor on a vehicle does, unless the halves find it clearly sideways (over 3 m/s and a quarter "
                "of the forward speed) or look the same way (a Livox Avia's pattern)");
  auto* init =
      cmd->add_option("--init", o.init,
                      "pose of the first scan x,y,z,roll,pitch,yaw (m, rad), or `global`: no pose, the first frames "
                      "search the whole map until one is found")
          ->delimiter(',')
          ->expected(1, 6)
          // FLOAT: numbers that are not finite are refused as every FLOAT option refuses them
          // (require_finite_numbers); `global` is no number and passes that check.
          ->type_name("FLOAT")
          ->check(CLI::Validator(
              [](std::string& v) -> std::string {
                if (v == "global") return {};
                char* end = nullptr;
                (void)std::strtod(v.c_str(), &end);
                return !v.empty() && end && *end == '\0' ? std::string() : "'" + v + "' is not a number or `global`";
              },
              "NUMBER|global"));
  cmd->add_option("--init-from", o.init_from, "take the first scan's pose from this TUM or KITTI file")
      ->excludes(init);
  cmd->add_option("--init-radius", o.init_radius,
                  "the first pose is only a rough one: search for it within this radius (m; 0 = no search) until "
                  "a frame is found")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 50.0));
  cmd->add_option("--init-yaw-range", o.init_yaw_range,
                  "... and within this yaw range about its yaw (deg; 360 = any heading)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 360.0));
  cmd->add_option("--reference", o.reference, "reference poses (TUM or KITTI) to evaluate against");
  cmd->add_option("--reference-format", o.reference_format, "format of --reference (--init-from is always detected)")
      ->check(CLI::IsMember({"tum", "kitti", "auto"}));
  cmd->add_option("--out", o.out, "output folder (created)")->capture_default_str();
  return given;
}

// The NDT settings, the scans' range crop and voxel filter, and the map's.
void add_filter_options(CLI::App* cmd, LocalizeOptions& o) {
  add_ndt_options(cmd, o.ndt);
  add_config_option(cmd, o.ndt,
                    ", the NVTL threshold (score_estimation.converged_param_nearest_voxel_transformation_likelihood), "
                    "validation.initial_pose_timeout_sec (--init-from's time gap), dynamic_map_loading.map_radius "
                    "and update_distance");
  cmd->add_option("--min-range", o.min_range, "drop scan points closer than this (m)")->capture_default_str()
      ->check(non_negative_number());
  cmd->add_option("--max-range", o.max_range, "drop scan points farther than this (m)")->capture_default_str()
      ->check(positive_number());
  cmd->add_option("--voxel", o.voxel, "scan voxel-filter leaf (m; 0 = no filter)")->capture_default_str()->check(non_negative_number());
  cmd->add_option("--min-scan-points", o.min_scan_points,
                  "when --voxel leaves fewer points than this, filter again with the leaf shrunk by 0.7, at most 4 "
                  "times (a sparse or already downsampled scan keeps enough to align; 0 = the fixed leaf)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{10000000}));
  cmd->add_option("--min-frame-points", o.min_frame_points,
                  "a frame with fewer points than this after the filter is lost at once (\"too few points\"), "
                  "without an alignment or a search: a scan that sparse cannot be told from a wrong pose (0 = align "
                  "whatever is left)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{10000000}));
  cmd->add_flag("--gpu-filter-in-line", o.gpu_filter_in_line,
                "with the GPU filter: run it just before each alignment instead of on the reader threads");
  cmd->add_flag("--cpu-preprocess", o.cpu_preprocess,
                "crop and voxel-filter scans on the CPU even when aligning on CUDA (by default the GPU does it)");
  cmd->add_option("--map-voxel", o.map_voxel, "voxel-filter the map first (leaf, m; 0 = no)")->capture_default_str()
      ->check(non_negative_number());
}

// When a frame's pose is accepted, and what predicts it. Returns --nvtl-threshold.
CLI::Option* add_check_options(CLI::App* cmd, LocalizeOptions& o) {
  CLI::Option* nvtl_threshold =
      cmd->add_option("--nvtl-threshold", o.nvtl_threshold, "a pose is valid when its NVTL reaches this")
          ->capture_default_str();
  cmd->add_option("--min-matched-ratio", o.min_matched_ratio,
                  "... and at least this share of the scan's points found a map voxel")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--degeneracy-probe", o.degeneracy_probe,
                  "score each accepted pose again a step of this many metres (RMS point motion) along each of its six "
                  "directions; a direction whose probe stays within --degeneracy-margin of its NVTL is one the scan does "
                  "not pin (a tunnel's axis), and the frame is degenerate (0 = no probe)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--degeneracy-margin", o.degeneracy_margin, "... within this NVTL of the pose's")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_option("--refine-ratio", o.refine_ratio,
                  "polish each valid frame's pose by one more alignment against the map's voxels at this share of "
                  "--resolution (0 = no refinement): the checks and searches stay at --resolution, the pose is the "
                  "finer map's when that converged within half its resolution and 2 deg and the finer voxels held "
                  "--refine-min-support of the points (frames.csv: refined, refinement_m); not with a tiled map")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9));
  cmd->add_option("--refine-min-support", o.refine_min_support,
                  "take the refined pose only when the finer voxels held at least this share of the points the "
                  "map's voxels held (a map too sparse for the finer voxels leaves them holes; 0 = no such rule)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--odometry", o.odometry,
                  "TUM trajectory of odometry (wheel, IMU integration, LiDAR-inertial) in any fixed frame: the motion "
                  "it measured since the previous frame, interpolated to each scan's time, replaces the "
                  "constant-velocity prediction (frames outside it fall back to the latter)");
  cmd->add_option("--odometry-topic", o.odometry_topic,
                  "with --scans BAG: a nav_msgs/Odometry topic of that bag, read as --odometry reads its file (the "
                  "message poses at the bag's record times, the clock of the scans)")
      ->excludes("--odometry");
  cmd->add_option("--odometry-noise", o.odometry_noise,
                  "the odometry's drift as standard deviations a,b,c,d: a m per metre travelled and b m per second "
                  "(each position axis), c rad per radian turned and d rad per second (each angle)")
      ->delimiter(',')
      ->expected(4)
      ->capture_default_str();
  cmd->add_option("--motion-sigma", o.motion_sigma,
                  "the constant-velocity prediction's standard deviations per second since the last good pose: "
                  "position (m/s), angles (rad/s)")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();
  cmd->add_option("--gate-chi2", o.gate_chi2,
                  "Mahalanobis gate: a first attempt whose correction from the prediction exceeds this d' C^-1 d "
                  "under the prediction's covariance must be confirmed by a search (22.46: chi-square 99.9%, 6 "
                  "degrees of freedom; 0 = no gate)")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_option("--covariance-sparsity", o.covariance_sparsity,
                  "the calibrated covariance's sparsity floor: position sigma T x --resolution and angle sigma R "
                  "rad, each over sqrt(matched points), as T,R (0,0: no floor)")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();
  check_number_range(
      cmd->add_option("--covariance-residual-scale", o.covariance_residual_scale,
                      "the calibrated covariance's residual term: the Laplace estimate times this and the residuals' "
                      "mean squared Mahalanobis distance, as the NVTL gives it (0: none)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("covariance_residual_scale"));
  check_number_range(
      cmd->add_option("--covariance-refined-residual-scale", o.covariance_refined_residual_scale,
                      "the same for a frame whose pose the refinement gave (--refine-ratio), whose coarse voxels' "
                      "bias the refinement removed (0: none)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("covariance_refined_residual_scale"));
  check_number_range(
      cmd->add_option("--covariance-hypothesis-temperature", o.covariance_hypothesis_temperature,
                      "the calibrated covariance's rival term: softmax temperature (NVTL) weighing a search's best "
                      "distinct rival against the accepted pose (0: left out)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("covariance_hypothesis_temperature"));
  check_number_range(
      cmd->add_option("--covariance-weak-direction-sigma", o.covariance_weak_direction_sigma,
                      "the calibrated covariance's localizability term: along each direction the scan holds "
                      "weakly (eigenvalue ratio rho below --covariance-weak-direction-ratio rho_c; frames.csv "
                      "weakest_ratio is the least) a variance of C^2 (1/rho - 1/rho_c), metres of RMS point "
                      "motion (0: none)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("covariance_weak_direction_sigma"));
  check_number_range(
      cmd->add_option("--covariance-weak-direction-ratio", o.covariance_weak_direction_ratio,
                      "the localizability term's rho_c: the eigenvalue ratio (over the largest) below which a "
                      "direction counts (0: none)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("covariance_weak_direction_ratio"));
  check_number_range(
      cmd->add_option("--covariance-deskew-scale", o.covariance_deskew_scale,
                      "the calibrated covariance's de-skew term: a swept scan's pose as uncertain as the motion it "
                      "was de-skewed with (each component's change from the frame before's; the motion model's "
                      "--motion-sigma where none came before), times this (0: none)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("covariance_deskew_scale"));
  check_number_range(
      cmd->add_option("--covariance-deskew-jerk", o.covariance_deskew_jerk,
                      "the de-skew term's jerk (m/s^3): a motion from poses or a prediction lags the sweep by a "
                      "share of the frames' spacing, and the acceleration may have changed by this per second of the "
                      "spacing since (0: none)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("covariance_deskew_jerk"));
  check_number_range(
      cmd->add_option("--covariance-imu-rate-sigma", o.covariance_imu_rate_sigma,
                      "the de-skew term's sigma (rad/s, each axis) of the IMU's rate a sweep was de-skewed with "
                      "(--deskew imu): the gyro's bias after a static calibration (0: taken as exact)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("covariance_imu_rate_sigma"));
  check_number_range(
      cmd->add_option("--max-position-sigma", o.max_position_sigma,
                      "a frame whose calibrated covariance gives a position sigma above this (m) is uncertain, not "
                      "valid: counted apart, not in the trajectory (0: no bound)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("max_position_sigma"));
  check_number_range(
      cmd->add_option("--max-prediction-scale", o.max_prediction_scale,
                      "largest step of the constant-velocity prediction, in multiples of the last inter-frame motion "
                      "(a long gap after lost frames would otherwise extrapolate the velocity without limit)")
          ->capture_default_str(),
      field_range<LocalizerSettings>("max_prediction_scale"));
  cmd->add_flag("--prediction-prior", o.prediction_prior,
                "align the first attempt with the prediction as a pose prior (its covariance's inverse as "
                "information): where the scan does not pin the pose, the result stays near the prediction");
  add_regularization_option(cmd, o.regularization, "the frame's prediction (--odometry's when given)");
  cmd->add_flag("--accept-max-iterations", o.accept_max_iterations,
                "accept an alignment that used every iteration when its NVTL passes (by default it is retried)");
  return nvtl_threshold;
}

// What is tried when a frame fails, the readers and the matching of times. Returns
// --max-time-difference.
CLI::Option* add_recovery_options(CLI::App* cmd, LocalizeOptions& o) {
  cmd->add_option("--recovery", o.recovery,
                  "when the prediction fails: none (the frame is lost), last-good (retry from the last good pose), "
                  "hypotheses (search rotations, then positions near the prediction, then as far as --max-speed "
                  "allows)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "last-good", "hypotheses"}));
  cmd->add_option("--recovery-attempts", o.recovery_attempts,
                  "retries before the searches or the loss (continuing an attempt that ran out of iterations; "
                  "with last-good, from the last good pose)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10));
  cmd->add_option("--search-nvtl-ratio", o.search_nvtl_ratio,
                  "a search's winner must also reach this share of the NVTL the accepted frames score (0 = no check)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  check_number_range(cmd->add_option("--search-step-size", o.search_step_size,
                                     "largest Newton step (m) of the searches' refinement; the first attempt and the "
                                     "retries keep --step-size (0 = --step-size)")
                         ->capture_default_str(),
                     field_range<LocalizerSettings>("search_step_size"));
  cmd->add_option("--rotation-search-range", o.rotation_search_range,
                  "largest rotation (deg) the rotation search tries about the prediction and the last good pose")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 180.0));
  cmd->add_option("--rotation-search-step", o.rotation_search_step, "grid step (deg) of the rotation search")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 180.0));
  check_number_range(cmd->add_option("--heading-search-step", o.heading_search_step,
                                     "grid step (deg) of the heading search's turns about the vertical (up to "
                                     "--rotation-search-range either way)")
                         ->capture_default_str(),
                     field_range<LocalizerSettings>("heading_search_step_deg"));
  cmd->add_option("--search-radius", o.search_radius,
                  "radius (m) of the position search near the prediction (after the rotation search)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 200.0));
  check_number_range(cmd->add_option("--search-position-step", o.search_position_step,
                                     "grid spacing (m) of the position searches (stages 2 and 3; coarser only where "
                                     "a wide radius would exceed 100,000 hypotheses)")
                         ->capture_default_str(),
                     field_range<LocalizerSettings>("search_position_step"));
  check_number_range(cmd->add_option("--search-yaw-step", o.search_yaw_step,
                                     "step (deg) between the yaws of the position searches")
                         ->capture_default_str(),
                     field_range<LocalizerSettings>("search_yaw_step_deg"));
  cmd->add_option("--max-speed", o.max_speed,
                  "how fast (m/s) the sensor can move: the wide search's radius about the last good pose grows by "
                  "this per second since it")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--max-turn-rate", o.max_turn_rate,
                  "how fast (deg/s) the heading can turn away from the prediction: the position searches' yaw range "
                  "grows by this per second since the last good pose")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--max-search-radius", o.max_search_radius, "largest radius (m) of the position searches")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 200.0));
  cmd->add_option("--global-search-interval", o.global_search_interval,
                  "when the widest search fails too, search the whole map on the first lost frame and every N-th "
                  "lost frame in a row after it (0 = never)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--readers", o.readers, "scan reader threads")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--queue", o.queue, "scans read ahead at most")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--period", o.period, "scan period (s) for scans without time stamps")->capture_default_str()
      ->check(positive_number());
  CLI::Option* max_time_difference =
      cmd->add_option("--max-time-difference", o.max_time_difference,
                      "largest time gap (s) when matching scans to reference poses by time, and --init-from's pose "
                      "to the first scan")
          ->capture_default_str()
          ->check(non_negative_number());
  cmd->add_flag("--no-plot", o.no_plot, "do not draw the plots (python3 -m ndtcu.plot OUT; the command is printed instead)");
  return max_time_difference;
}

}  // namespace

ConfigurableOptions add_localize_options(CLI::App* cmd, LocalizeOptions& o) {
  ConfigurableOptions given = add_input_options(cmd, o);
  add_filter_options(cmd, o);
  given.nvtl_threshold = add_check_options(cmd, o);
  given.max_time_difference = add_recovery_options(cmd, o);
  return given;
}

std::string localize_option(const std::string& field) {
  for (const auto& [name, option] : kRenamedLocalizerOptions) {
    if (field == name) return option;
  }
  return option_name(field);
}

LocalizeSettings localize_settings(LocalizeOptions& o, const ConfigurableOptions& given) {
  LocalizeSettings result;
  result.config = load_autoware_params(o.ndt.config);
  const std::optional<AutowareParams>& config = result.config;
  // Autoware's initial_pose_timeout_sec is the gap allowed between the initial pose and the
  // scan: here, between --init-from's pose and the first scan. The reference poses are
  // still matched within --max-time-difference.
  double& init_time_difference = result.init_time_difference;
  init_time_difference = o.max_time_difference;
  // The file's values, where the command line did not give the option.
  if (config) {
    if (config->nvtl_threshold && given.nvtl_threshold->count() == 0) o.nvtl_threshold = *config->nvtl_threshold;
    if (config->map_radius && given.map_radius->count() == 0) o.map_radius = *config->map_radius;
    if (config->map_update_distance && given.map_update_distance->count() == 0) {
      o.map_update_distance = *config->map_update_distance;
    }
    if (config->initial_pose_timeout_sec && given.max_time_difference->count() == 0) {
      init_time_difference = *config->initial_pose_timeout_sec;
    }
  }
  LocalizerSettings& ls = result.localizer;
  AlignSettings& s = ls.align;
  s = ndt_settings(o.ndt, config ? &*config : nullptr);
  result.execution = execution_options(o.ndt, config ? &*config : nullptr);
  // The localizer reports a covariance with every pose unless told otherwise.
  if (!o.ndt.was_given("pose_covariance") && !(config && config->pose_covariance)) s.pose_covariance = PoseCovariance::Laplace;
  ls.min_range = o.min_range;
  ls.max_range = o.max_range;
  ls.voxel_leaf = o.voxel;
  ls.min_scan_points = o.min_scan_points;
  ls.min_frame_points = o.min_frame_points;
  ls.gpu_preprocess = !o.cpu_preprocess;
  ls.deskew = deskew_from_string(o.deskew);
  ls.deskew_passes = o.deskew_passes;
  ls.deskew_forward = !o.deskew_sideways;
  if (ls.deskew == Deskew::Odometry && o.odometry.empty() && o.odometry_topic.empty()) {
    throw Error("--deskew odometry needs the odometry: give --odometry FILE (TUM) or --odometry-topic TOPIC");
  }
  if (ls.deskew == Deskew::Imu && o.imu.empty() && o.imu_topic.empty()) {
    throw Error("--deskew imu needs IMU samples: give --imu FILE (CSV: time,wx,wy,wz[,ax,ay,az]) or --imu-topic TOPIC");
  }
  ls.imu_roll_deg = o.imu_rotation[0];
  ls.imu_pitch_deg = o.imu_rotation[1];
  ls.imu_yaw_deg = o.imu_rotation[2];
  ls.imu_max_gap = o.imu_max_gap;
  ls.nvtl_threshold = o.nvtl_threshold;
  ls.reject_max_iterations = !o.accept_max_iterations;
  ls.recovery_attempts = o.recovery_attempts;
  ls.min_matched_ratio = o.min_matched_ratio;
  ls.search_nvtl_ratio = o.search_nvtl_ratio;
  ls.search_step_size = o.search_step_size;
  ls.heading_search_step_deg = o.heading_search_step;
  ls.search_position_step = o.search_position_step;
  ls.search_yaw_step_deg = o.search_yaw_step;
  ls.rotation_search_range_deg = o.rotation_search_range;
  ls.rotation_search_step_deg = o.rotation_search_step;
  ls.recovery = recovery_from_string(o.recovery);
  ls.search_radius = o.search_radius;
  ls.max_speed = o.max_speed;
  ls.max_turn_rate_deg = o.max_turn_rate;
  ls.max_search_radius = o.max_search_radius;
  ls.global_search_interval = o.global_search_interval;
  ls.degeneracy_probe_m = o.degeneracy_probe;
  ls.degeneracy_margin = o.degeneracy_margin;
  ls.refine_ratio = o.refine_ratio;
  ls.refine_min_support = o.refine_min_support;
  ls.gate_chi2 = o.gate_chi2;
  ls.covariance_sparsity_translation = o.covariance_sparsity[0];
  ls.covariance_sparsity_rotation = o.covariance_sparsity[1];
  ls.covariance_residual_scale = o.covariance_residual_scale;
  ls.covariance_refined_residual_scale = o.covariance_refined_residual_scale;
  ls.covariance_hypothesis_temperature = o.covariance_hypothesis_temperature;
  ls.covariance_weak_direction_sigma = o.covariance_weak_direction_sigma;
  ls.covariance_weak_direction_ratio = o.covariance_weak_direction_ratio;
  ls.covariance_deskew_scale = o.covariance_deskew_scale;
  ls.covariance_deskew_jerk = o.covariance_deskew_jerk;
  ls.covariance_imu_rate_sigma = o.covariance_imu_rate_sigma;
  ls.max_position_sigma = o.max_position_sigma;
  ls.max_prediction_scale = o.max_prediction_scale;
  ls.prediction_prior = o.prediction_prior;
  ls.regularization_scale_factor = regularization_scale(o.regularization, config ? &*config : nullptr);
  ls.motion_translation_sigma = o.motion_sigma[0];
  ls.motion_rotation_sigma = o.motion_sigma[1];
  for (std::size_t i = 0; i < o.odometry_noise.size(); ++i) {
    if (!(o.odometry_noise[i] >= 0.0) || !std::isfinite(o.odometry_noise[i])) {
      throw Error(fmt::format("--odometry-noise: value {} is {} (each must be finite and >= 0)", i + 1,
                              o.odometry_noise[i]));
    }
  }
  // The filter's smallest leaf follows from --max-range (validate() refuses it too, in the
  // library's words): named here by the options that set it.
  if (ls.voxel_leaf > 0.0 && ls.voxel_leaf < min_voxel_leaf(ls)) {
    throw Error(fmt::format("--voxel {}: below the smallest leaf {} m for --max-range {} (the scan's voxel filter "
                            "holds at most 1,000,000 cells along each axis of the 2 x {} m it keeps{}; it would fail "
                            "on every frame)",
                            ls.voxel_leaf, min_voxel_leaf(ls), ls.max_range, ls.max_range,
                            ls.min_scan_points > 0 ? ", and --min-scan-points may shrink the leaf to 0.7^4 of it" : ""));
  }
  validate(ls);
  return result;
}

}  // namespace ndtcu::cli::localize
