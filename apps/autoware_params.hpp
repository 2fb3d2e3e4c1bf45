#pragma once
// Autoware's ndt_scan_matcher.param.yaml (`ndtcu align|localize|initpose --config FILE`):
// the values ndtcu has an equivalent for, read with yaml-cpp. A library of its own (the
// only code that links yaml-cpp; the core library never does), so that the unit tests
// call the parser directly. This header names no yaml-cpp type.
#include <ndtcu/fields.hpp>
#include <ndtcu/settings.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ndtcu::cli {

/// What an Autoware ndt_scan_matcher parameter file sets, in ndtcu's terms. Each field is
/// empty when the file does not set the key, or sets it with a value of the wrong type (a
/// warning then names it). Values that are set passed the range rules of the ndtcu setting
/// they map to.
struct AutowareParams {
  std::string path;  ///< the file read

  std::optional<double> resolution;    ///< ndt.resolution -> AlignSettings::resolution (--resolution)
  std::optional<double> step_size;     ///< ndt.step_size -> AlignSettings::step_size (--step-size)
  std::optional<double> epsilon;       ///< ndt.trans_epsilon -> AlignSettings::epsilon (--epsilon)
  std::optional<int> max_iterations;   ///< ndt.max_iterations -> AlignSettings::max_iterations
  std::optional<int> threads;          ///< ndt.num_threads -> ExecutionOptions::threads (--threads)
  /// covariance.covariance_estimation.covariance_estimation_type: 0 FIXED_VALUE -> None,
  /// 1 LAPLACE_APPROXIMATION -> Laplace, 2 MULTI_NDT -> MultiNdt, 3 MULTI_NDT_SCORE ->
  /// MultiNdtScore (AlignSettings::pose_covariance, --pose-covariance).
  std::optional<PoseCovariance> pose_covariance;
  /// ndt.regularization.enable and .scale_factor -> PosePrior::regularization_scale_factor
  /// (--regularization): the scale factor when enabled (Autoware's 0.01 when the file has
  /// none), 0 when disabled. Its pose is the frame's prediction in localize (from
  /// --odometry when given, where Autoware takes a GNSS pose) and --prior in align.
  std::optional<double> regularization_scale_factor;

  /// score_estimation.converged_param_type: 0 transform probability, 1 NVTL. ndtcu judges
  /// poses by NVTL only; 0 is kept here and warned about.
  std::optional<int> converged_param_type;
  /// score_estimation.converged_param_nearest_voxel_transformation_likelihood -> the NVTL
  /// threshold of localize and initpose (--nvtl-threshold).
  std::optional<double> nvtl_threshold;
  /// score_estimation.converged_param_transform_probability: read and checked, but no ndtcu
  /// check uses a transform-probability threshold.
  std::optional<double> tp_threshold;

  /// initial_pose_estimation.particles_num -> TpeOptions::particles (initpose --particles).
  std::optional<int> particles;
  /// initial_pose_estimation.n_startup_trials -> TpeOptions::startup_trials
  /// (initpose --startup-trials).
  std::optional<int> startup_trials;

  /// validation.initial_pose_timeout_sec: how far apart in time the initial pose and the
  /// scan may be -> the time gap localize allows when --init-from picks the first scan's
  /// pose by time (--max-time-difference).
  std::optional<double> initial_pose_timeout_sec;
  /// dynamic_map_loading.map_radius -> the radius about the pose within which localize
  /// keeps a tiled map's tiles loaded (--map-radius).
  std::optional<double> map_radius;
  /// dynamic_map_loading.update_distance -> how far the pose moves between two updates of
  /// the loaded tiles (--map-update-distance).
  std::optional<double> map_update_distance;

  /// Warnings, each "FILE: line N: KEY: what" (unknown keys, values of the wrong type,
  /// settings ndtcu cannot honour), in file order.
  std::vector<std::string> warnings;
  /// Autoware keys present in the file that ndtcu has no equivalent for (frame ids,
  /// sensor_points, the other validation limits, dynamic map loading's distances, ...).
  std::vector<std::string> not_used;
};

/// Autoware's NDT parameters and the AlignSettings or ExecutionOptions field
/// (ndtcu/fields.hpp) each sets, with where AutowareParams keeps its value: the one list of
/// renames. Reading the file and applying it (ndt_settings, execution_options) both walk
/// it; calls v(key, field, value).
template <typename V>
void visit_autoware_renames(V&& v) {
  v("ndt.trans_epsilon", "epsilon", &AutowareParams::epsilon);
  v("ndt.step_size", "step_size", &AutowareParams::step_size);
  v("ndt.resolution", "resolution", &AutowareParams::resolution);
  v("ndt.max_iterations", "max_iterations", &AutowareParams::max_iterations);
  v("ndt.num_threads", "threads", &AutowareParams::threads);
}

/// The file's NDT values (visit_autoware_renames, and covariance_estimation_type) set on `s`.
inline void apply_autoware_params(const AutowareParams& p, AlignSettings& s) {
  visit_autoware_renames([&](const char*, const char* field, auto value) {
    if (p.*value) set_field(s, field, *(p.*value));
  });
  if (p.pose_covariance) s.pose_covariance = *p.pose_covariance;
}

/// The file's values of how the alignment runs (visit_autoware_renames: ndt.num_threads)
/// set on `e`.
inline void apply_autoware_params(const AutowareParams& p, ExecutionOptions& e) {
  visit_autoware_renames([&](const char*, const char* field, auto value) {
    if (p.*value) set_field(e, field, *(p.*value));
  });
}

/// Reads an Autoware ndt_scan_matcher.param.yaml: the ROS 2 layout, `/**:` (or a node
/// name) holding `ros__parameters:`, with the sections of autoware_ndt_scan_matcher's
/// config/ndt_scan_matcher.param.yaml. Throws IoError naming the file for one that cannot
/// be read, a YAML syntax error (with its line and column), a file without
/// `ros__parameters`, a key given twice in one mapping (its path and both lines: YAML
/// readers keep one value silently) and two nodes holding `ros__parameters` (both names
/// and lines: which applies depends on the node's name at run time); throws Error naming the file, line, key and value for a value out of
/// range (the range rules of ndtcu::validate for the NDT settings and of the options the
/// other keys map to). Unknown keys and values of the wrong type are warnings.
AutowareParams read_autoware_params(const std::string& path);

/// read_autoware_params(path) for `--config PATH`, its warnings printed to stderr as
/// "ndtcu: warning: ..." (unless the log level is above warnings) and the keys not used
/// listed at debug level; nullopt for an empty path.
std::optional<AutowareParams> load_autoware_params(const std::string& path);

}  // namespace ndtcu::cli
