#pragma once
// `ndtcu localize`: its command-line options, and the localizer settings they make.
#include "cli_common.hpp"

#include <ndtcu/localizer.hpp>

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ndtcu::cli::localize {

/// Every option of `ndtcu localize`, as given on the command line.
struct LocalizeOptions {
  std::string map, scans, topic, init_from, reference, reference_format = "auto", out = "localization";
  std::string origin = "auto";  // --origin: the map's
  std::vector<double> init;
  NdtOptions ndt;
  double min_range = 1.0, max_range = 100.0, voxel = 1.0, map_voxel = 0.0, nvtl_threshold = 2.3;
  double min_matched_ratio = 0.5, rotation_search_range = 45.0, rotation_search_step = 15.0, search_nvtl_ratio = 0.85;
  int recovery_attempts = 2, readers = 2;
  std::string recovery = "hypotheses";
  double search_radius = 2.0, max_speed = 20.0, max_turn_rate = 90.0, max_search_radius = 50.0;
  double init_radius = 0.0, init_yaw_range = 360.0;
  double map_radius = 100.0, map_update_distance = 20.0, map_memory_mb = 0.0;
  bool map_update_wait = false;
  std::size_t queue = 4;
  bool accept_max_iterations = false, no_plot = false, cpu_preprocess = false, gpu_filter_in_line = false;
  double period = 0.1, max_time_difference = 0.01;
  double degeneracy_probe = 2.0, degeneracy_margin = 0.1;
  std::string odometry;                                     // --odometry FILE (TUM)
  std::string odometry_topic;                               // --odometry-topic TOPIC (of the scans' bag)
  std::vector<double> odometry_noise = {0.05, 0.02, 0.05, 0.005};
  std::vector<double> motion_sigma = {1.0, 0.35};
  double gate_chi2 = LocalizerSettings{}.gate_chi2;
  bool prediction_prior = false;
  std::optional<double> regularization;
  std::size_t min_scan_points = LocalizerSettings{}.min_scan_points;
  std::size_t min_frame_points = LocalizerSettings{}.min_frame_points;
};

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
  /// The largest gap (s) between --init-from's pose and the first scan.
  double init_time_difference = 0.0;
};

/// The localizer settings of `o` (with the --config file's values where `given` says the
/// command line did not set them, written back into `o`), checked: throws Error naming the
/// option for a value the localizer refuses, before any point cloud is read.
LocalizeSettings localize_settings(LocalizeOptions& o, const ConfigurableOptions& given);

}  // namespace ndtcu::cli::localize
