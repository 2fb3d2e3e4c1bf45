#pragma once
// `ndtcu localize`: its command-line options, and the localizer settings they make.
#include "cli_common.hpp"

#include <ndtcu/localizer.hpp>

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ndtcu::cli::localize {

/// Every option of `ndtcu localize`, as given on the command line.
struct LocalizeOptions {
  inline static const LocalizerSettings kDefaults{};  ///< where the localizer options' defaults come from

  std::string map, scans, topic, init_from, reference, reference_format = "auto", out = "localization";
  std::string origin = "auto";  // --origin: the map's
  std::vector<std::string> init;  // x,y,z,roll,pitch,yaw, or "global"
  NdtOptions ndt;
  // The localizer's settings start as the library's defaults (LocalizerSettings{}).
  double min_range = kDefaults.min_range, max_range = kDefaults.max_range, voxel = kDefaults.voxel_leaf;
  double map_voxel = 0.0, nvtl_threshold = kDefaults.nvtl_threshold;
  double min_matched_ratio = kDefaults.min_matched_ratio, rotation_search_range = kDefaults.rotation_search_range_deg;
  double rotation_search_step = kDefaults.rotation_search_step_deg, search_nvtl_ratio = kDefaults.search_nvtl_ratio;
  int recovery_attempts = kDefaults.recovery_attempts, readers = 2;
  std::string recovery = to_string(kDefaults.recovery);
  double search_radius = kDefaults.search_radius, max_speed = kDefaults.max_speed;
  double max_turn_rate = kDefaults.max_turn_rate_deg, max_search_radius = kDefaults.max_search_radius;
  double init_radius = 0.0, init_yaw_range = 360.0;
  int global_search_interval = kDefaults.global_search_interval;
  double map_radius = 100.0, map_update_distance = 20.0, map_memory_mb = 0.0;
  bool map_update_wait = false;
  std::size_t queue = 4;
  bool accept_max_iterations = !kDefaults.reject_max_iterations, cpu_preprocess = !kDefaults.gpu_preprocess;
  bool no_plot = false, gpu_filter_in_line = false;
  double period = 0.1, max_time_difference = 0.01;
  double degeneracy_probe = kDefaults.degeneracy_probe_m, degeneracy_margin = kDefaults.degeneracy_margin;
  double refine_ratio = kDefaults.refine_ratio;
  double refine_min_support = kDefaults.refine_min_support;
  std::string deskew = to_string(kDefaults.deskew);          // --deskew
  int deskew_passes = kDefaults.deskew_passes;              // --deskew-passes
  bool deskew_sideways = !kDefaults.deskew_forward;          // --deskew-sideways
  std::string point_time = "auto";                          // --point-time FIELD:UNIT, auto or none
  std::string odometry;                                     // --odometry FILE (TUM)
  std::string odometry_topic;                               // --odometry-topic TOPIC (of the scans' bag)
  std::vector<double> odometry_noise = {0.05, 0.02, 0.05, 0.005};
  std::string imu;                                          // --imu FILE (CSV)
  std::string imu_topic;                                    // --imu-topic TOPIC (of the scans' bag)
  std::vector<double> imu_rotation = {kDefaults.imu_roll_deg, kDefaults.imu_pitch_deg, kDefaults.imu_yaw_deg};
  double imu_max_gap = kDefaults.imu_max_gap;
  std::vector<double> motion_sigma = {kDefaults.motion_translation_sigma, kDefaults.motion_rotation_sigma};
  double gate_chi2 = kDefaults.gate_chi2;
  // The calibrated covariance (LocalizerSettings::covariance_*) and its bound.
  std::vector<double> covariance_sparsity = {kDefaults.covariance_sparsity_translation,
                                             kDefaults.covariance_sparsity_rotation};
  double covariance_residual_scale = kDefaults.covariance_residual_scale;
  double covariance_refined_residual_scale = kDefaults.covariance_refined_residual_scale;
  double covariance_weak_direction_sigma = kDefaults.covariance_weak_direction_sigma;
  double covariance_weak_direction_ratio = kDefaults.covariance_weak_direction_ratio;
  double covariance_deskew_scale = kDefaults.covariance_deskew_scale;
  double covariance_deskew_jerk = kDefaults.covariance_deskew_jerk;
  double covariance_imu_rate_sigma = kDefaults.covariance_imu_rate_sigma;
  double covariance_hypothesis_temperature = kDefaults.covariance_hypothesis_temperature;
  double max_position_sigma = kDefaults.max_position_sigma;
  double max_prediction_scale = kDefaults.max_prediction_scale;
  double search_step_size = kDefaults.search_step_size;
  double heading_search_step = kDefaults.heading_search_step_deg;
  double search_position_step = kDefaults.search_position_step;
  double search_yaw_step = kDefaults.search_yaw_step_deg;
  bool prediction_prior = kDefaults.prediction_prior;
  std::optional<double> regularization;
  std::size_t min_scan_points = kDefaults.min_scan_points;
  std::size_t min_frame_points = kDefaults.min_frame_points;
};

/// The LocalizerSettings fields whose `localize` option is not named after the field
/// (option_name(field)), with the option that sets each: shorter names, the two
/// standard deviations of --motion-sigma, and flags that turn a default off.
inline const std::pair<const char*, const char*> kRenamedLocalizerOptions[] = {
    {"voxel_leaf", "--voxel"},
    {"gpu_preprocess", "--cpu-preprocess"},
    {"deskew_forward", "--deskew-sideways"},
    {"reject_max_iterations", "--accept-max-iterations"},
    {"rotation_search_range_deg", "--rotation-search-range"},
    {"rotation_search_step_deg", "--rotation-search-step"},
    {"heading_search_step_deg", "--heading-search-step"},
    {"search_yaw_step_deg", "--search-yaw-step"},
    {"max_turn_rate_deg", "--max-turn-rate"},
    {"degeneracy_probe_m", "--degeneracy-probe"},
    {"motion_translation_sigma", "--motion-sigma"},
    {"motion_rotation_sigma", "--motion-sigma"},
    {"regularization_scale_factor", "--regularization"},
    {"covariance_sparsity_translation", "--covariance-sparsity"},
    {"covariance_sparsity_rotation", "--covariance-sparsity"},
    {"imu_roll_deg", "--imu-rotation"},
    {"imu_pitch_deg", "--imu-rotation"},
    {"imu_yaw_deg", "--imu-rotation"},
};

/// The `localize` option that sets the LocalizerSettings field `field`.
std::string localize_option(const std::string& field);

/// The options a --config file sets unless the command line gives them.
struct ConfigurableOptions {
  CLI::Option* map_radius = nullptr;
  CLI::Option* map_update_distance = nullptr;
  CLI::Option* nvtl_threshold = nullptr;
  CLI::Option* max_time_difference = nullptr;
};

/// Registers every option of `ndtcu localize` on `cmd`, bound to `o`.
ConfigurableOptions add_localize_options(CLI::App* cmd, LocalizeOptions& o);

/// What the options come to once the --config file is read.
struct LocalizeSettings {
  std::optional<AutowareParams> config;
  LocalizerSettings localizer;
  ExecutionOptions execution;  ///< how the localizer runs (--backend, --threads, --device, --gpu-loop)
  /// The largest gap (s) between --init-from's pose and the first scan.
  double init_time_difference = 0.0;
};

/// The localizer settings of `o` (with the --config file's values where `given` says the
/// command line did not set them, written back into `o`), checked: throws Error naming the
/// option for a value the localizer refuses, before any point cloud is read.
LocalizeSettings localize_settings(LocalizeOptions& o, const ConfigurableOptions& given);

}  // namespace ndtcu::cli::localize
