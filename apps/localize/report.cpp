// `ndtcu localize`: progress while it runs, then summary.json, the evaluation against the
// reference, the plots and the text summary.
#include "localize/report.hpp"

#include "covariance_report.hpp"

#include <ndtcu/covariance_calibration.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

namespace ndtcu::cli::localize {

namespace {

namespace fs = std::filesystem;

// A float as the double with its shortest decimal form (0.1f as 0.1, not 0.100000001).
double as_double(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }

// The run (whether it ran to the end, and what it was run on), its counts and timings.
void add_run_json(nlohmann::json& j, const LocalizeRun& run) {
  const LocalizeOptions& o = run.options;
  const AlignSettings& s = run.settings.localizer.align;
  const FrameTally& t = run.frames;
  const LocalizeInputs& in = run.inputs;
  const std::size_t aligned = t.done - t.skipped;
  // The run: whether it ran to the end, and what it was run on (its settings below).
  j["status"] = t.stopped_by != 0 ? "interrupted" : "complete";
  j["last_frame"] = t.last_frame ? nlohmann::json(*t.last_frame) : nlohmann::json(nullptr);
  j["run"] = {{"command", "ndtcu localize"},
              {"pid", ::getpid()},
              {"started", run.folder.started()},
              {"ended", nullptr},
              {"signal", t.stopped_by != 0 ? nlohmann::json(InterruptWatch::name(t.stopped_by)) : nlohmann::json(nullptr)},
              {"frames_listed", t.frame_count},
              {"out", json_text(o.out)}};
  auto optional_text = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : json_text(v); };
  j["inputs"] = {{"map", json_text(o.map)},
                 {"scans", json_text(o.scans)},
                 {"topic", in.bag ? json_text(in.bag_topic) : nlohmann::json(nullptr)},
                 {"reference", optional_text(o.reference)},
                 {"init_from", optional_text(o.init_from)},
                 {"odometry", optional_text(o.odometry)},
                 {"odometry_topic", optional_text(o.odometry_topic)},
                 {"imu", optional_text(o.imu)},
                 {"imu_topic", optional_text(o.imu_topic)},
                 {"config", optional_text(o.ndt.config)}};
  j["frames"] = t.done;
  j["aligned"] = aligned;
  j["localized"] = t.localized;
  j["lost"] = t.lost;
  j["recovered"] = t.recovered;
  j["degenerate"] = t.degenerate;
  j["uncertain"] = t.uncertain;
  j["refined"] = t.refined;
  j["deskewed"] = t.deskewed;
  j["frame_times_disagree"] = run.localizer.frame_times_disagree();
  j["skipped"] = t.skipped;
  j["odometry"] = in.odometry ? nlohmann::json{{"file", json_text(o.odometry.empty() ? o.scans : o.odometry)},
                                               {"topic", o.odometry_topic.empty() ? nlohmann::json(nullptr)
                                                                                  : json_text(o.odometry_topic)},
                                               {"poses", in.odometry->size()},
                                               {"frames_predicted", t.odometry_used},
                                               {"frames_sweep_motion", t.odometry_sweeps},
                                               {"frames_sweep_parts", t.odometry_sweep_parts},
                                               {"frames_outside", t.odometry_missing}}
                              : nlohmann::json(nullptr);
  const ImuStats imu = run.localizer.imu_stats();
  j["imu"] = in.imu.empty() ? nlohmann::json(nullptr)
                            : nlohmann::json{{"source", json_text(in.imu_source)},
                                             {"samples", in.imu.size()},
                                             {"taken", imu.added},
                                             {"out_of_order", imu.out_of_order},
                                             {"frames_covered", imu.frames_covered},
                                             {"frames_gap", imu.frames_gap},
                                             {"frames_missing", imu.frames_missing}};
  j["fps"] = t.loop_s > 0 ? static_cast<double>(aligned) / t.loop_s : 0.0;
  j["wall_s"] = t.loop_s;
  j["latency_ms"] = stats_json(t.latency);
  j["align_ms"] = stats_json(t.align_ms);
  j["iterations"] = stats_json(t.iterations);
  j["points_per_scan"] = stats_json(t.points);
  // sigma_x, sigma_y: square roots of the x and y variances of the frames' calibrated
  // covariance (map frame).
  j["pose_covariance"] = {{"mode", to_string(s.pose_covariance)},
                          {"frames_with_covariance", t.sigma_x.size()},
                          {"sigma_x_m", stats_json(t.sigma_x)},
                          {"sigma_y_m", stats_json(t.sigma_y)},
                          {"time_ms", stats_json(t.covariance_ms)}};
}

// The CUDA device index the frames were aligned on (--device; the CLI's current device is
// 0), or null on the CPU.
nlohmann::json cuda_device_index(const LocalizeRun& run) {
  if (run.localizer.backend() != Backend::Cuda) return nullptr;
  const int d = run.localizer.execution().device;
  return d < 0 ? 0 : d;
}

// The device the frames were aligned on, in words.
std::string device_name(const LocalizeRun& run) {
  const ExecutionOptions& e = run.localizer.execution();
  std::string device;
  if (run.localizer.backend() == Backend::Cuda) {
    const auto devices = cuda_devices();
    const std::size_t k = e.device < 0 ? 0 : static_cast<std::size_t>(e.device);
    device = k < devices.size() ? devices[k].name : fmt::format("CUDA device {}", k);
  } else {
    const int threads = e.threads > 0 ? e.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    device = fmt::format("CPU, {} threads", threads);
  }
  return device;
}

// The map (with a tiled map, its tiles and updates) and the first pose.
void add_map_json(nlohmann::json& j, const LocalizeRun& run) {
  const LocalizeOptions& o = run.options;
  const FrameTally& t = run.frames;
  const LocalizeInputs& in = run.inputs;
  nlohmann::json tiles_json = nullptr;
  if (run.map.streamer) {
    // The counts of finished updates (one still running at the end is not counted).
    const TiledMapStreamStats ts = run.map.streamer->stats();
    nlohmann::json skipped_json = nlohmann::json::array();
    for (const std::string& f : ts.skipped) skipped_json.push_back(json_text(f));
    tiles_json = {{"listed", ts.listed},
                  {"loaded", ts.loaded},
                  {"radius_m", o.map_radius},
                  {"update_distance_m", o.map_update_distance},
                  {"memory_budget_mb", o.map_memory_mb},
                  {"updates", ts.updates},
                  {"swaps", t.map_swaps},
                  {"tiles_read", ts.tiles_read},
                  {"tiles_dropped", ts.tiles_dropped},
                  {"tiles_skipped", ts.skipped.size()},
                  {"skipped", skipped_json},
                  {"peak_loaded", ts.peak_loaded},
                  {"peak_mb", static_cast<double>(ts.peak_bytes) / 1e6},
                  {"published_on_device", run.map.streamer->tiled_map()->publishes_on_device()},
                  {"device_peak_mb", static_cast<double>(ts.peak_device_bytes) / 1e6},
                  {"read_ms", ts.read_ms},
                  {"join_ms", ts.join_ms},
                  {"wait_ms", stats_json(t.map_wait_ms)},
                  {"coverage_waits", t.map_coverage_waits}};
  }
  j["map"] = {{"path", json_text(o.map)},
              {"points_read", run.map.points_read},
              {"points", run.map.points},
              {"voxels", run.map.voxel_count},
              {"load_ms", run.map.load_ms},
              {"tiles", tiles_json},
              {"build_ms", run.map.build_ms}};
  j["scans"] = json_text(o.scans);
  if (in.bag) j["topic"] = json_text(in.bag_topic);
  const Pose6 ip = matrix_to_pose(in.initial);
  j["initial_pose"] = {{"source", in.initial_source}, {"xyzrpy", {ip(0), ip(1), ip(2), ip(3), ip(4), ip(5)}}};
  // With --init-radius the pose is only the centre of the first frames' search.
  j["initial_pose"]["search"] = o.init_radius > 0.0 ? nlohmann::json{{"radius_m", o.init_radius},
                                                                   {"yaw_range_deg", o.init_yaw_range}}
                                                  : nlohmann::json(nullptr);
}

// The settings in use: the NDT settings, then the localizer's and the run's.
void add_settings_json(nlohmann::json& j, const LocalizeRun& run) {
  const LocalizeOptions& o = run.options;
  const LocalizerSettings& ls = run.settings.localizer;
  const AlignSettings& s = ls.align;
  const Localizer& localizer = run.localizer;
  const double init_time_difference = run.settings.init_time_difference;
  j["settings"] = ndt_settings_json(o.ndt.preset, s, localizer.execution(), o.ndt.config);
  j["settings"].update({{"min_range", ls.min_range},
                   {"max_range", ls.max_range},
                   {"voxel", ls.voxel_leaf},
                   {"min_scan_points", ls.min_scan_points},
                   {"min_frame_points", ls.min_frame_points},
                   {"gpu_preprocess", ls.gpu_preprocess},
                   {"deskew", to_string(ls.deskew)},
                   {"imu_rotation_deg", {ls.imu_roll_deg, ls.imu_pitch_deg, ls.imu_yaw_deg}},
                   {"imu_max_gap", ls.imu_max_gap},
                   {"deskew_passes", ls.deskew_passes},
                   {"deskew_forward", ls.deskew_forward},
                   {"preprocess", to_string(localizer.preprocess_backend())},
                   {"map_voxel", o.map_voxel},
                   {"nvtl_threshold", ls.nvtl_threshold},
                   {"reject_max_iterations", ls.reject_max_iterations},
                   {"recovery_attempts", ls.recovery_attempts},
                   {"min_matched_ratio", ls.min_matched_ratio},
                   {"degeneracy_probe_m", ls.degeneracy_probe_m},
                   {"degeneracy_margin", ls.degeneracy_margin},
                   {"refine_ratio", ls.refine_ratio},
                   {"refine_min_support", ls.refine_min_support},
                   {"refining", localizer.refines()},
                   {"gate_chi2", ls.gate_chi2},
                   {"motion_sigma", {ls.motion_translation_sigma, ls.motion_rotation_sigma}},
                   {"prediction_prior", ls.prediction_prior},
                   {"regularization_scale_factor", ls.regularization_scale_factor},
                   {"odometry", o.odometry.empty() ? nlohmann::json(nullptr) : json_text(o.odometry)},
                   {"odometry_topic", o.odometry_topic.empty() ? nlohmann::json(nullptr) : json_text(o.odometry_topic)},
                   {"odometry_noise", o.odometry_noise},
                   {"recovery", to_string(ls.recovery)},
                   {"search_nvtl_ratio", ls.search_nvtl_ratio},
                   {"search_step_size", ls.search_step_size},
                   {"rotation_search_range_deg", ls.rotation_search_range_deg},
                   {"rotation_search_step_deg", ls.rotation_search_step_deg},
                   {"heading_search_step_deg", ls.heading_search_step_deg},
                   {"search_position_step", ls.search_position_step},
                   {"search_yaw_step_deg", ls.search_yaw_step_deg},
                   {"search_radius", ls.search_radius},
                   {"max_speed", ls.max_speed},
                   {"max_turn_rate_deg", ls.max_turn_rate_deg},
                   {"max_search_radius", ls.max_search_radius},
                   {"global_search_interval", ls.global_search_interval},
                   {"map_radius", o.map_radius},
                   {"map_update_distance", o.map_update_distance},
                   {"max_time_difference", o.max_time_difference},
                   {"init_max_time_difference", init_time_difference},
                   {"readers", o.readers},
                   {"gpu_filter_in_line", o.gpu_filter_in_line},
                   {"queue", o.queue}});
}

// The evaluation against --reference (none without one): the matching, the success rate,
// ATE and RPE, into the summary; returns their lines of the text summary.
std::string add_evaluation(nlohmann::json& j, const LocalizeRun& run, Progress& progress) {
  const LocalizeOptions& o = run.options;
  const FrameTally& t = run.frames;
  const LocalizeInputs& in = run.inputs;
  std::string eval_text;
  if (!o.reference.empty()) {
    const AteStats ate = absolute_trajectory_error(t.estimate, in.reference, t.estimate_pairs);
    const auto rpe = relative_pose_error(t.estimate, in.reference, {1.0, 5.0, 10.0}, t.estimate_pairs);
    const std::size_t matched = in.matches.size() - in.unmatched_frames;
    j["reference"] = {{"path", json_text(o.reference)}, {"poses", in.reference.size()}, {"matched_scans", matched},
                      {"matching", in.matching}, {"out_of_order", in.reference_check.out_of_order},
                      {"unmatched_frames", in.unmatched_frames}};
    if (in.reference_check.out_of_order > 0) {
      eval_text += fmt::format("  WARNING     {} reference pose{} out of time order in {}; sorted by time\n",
                               in.reference_check.out_of_order, in.reference_check.out_of_order == 1 ? "" : "s",
                               o.reference);
    }
    if (in.unmatched_frames > 0) {
      eval_text += fmt::format("  WARNING     {} of {} frames matched no reference pose (matching by {}{}); they "
                               "are not in the success rate, ATE or RPE\n",
                               in.unmatched_frames, in.matches.size(), in.matching,
                               in.matching == "time" ? fmt::format(", within {} s", o.max_time_difference) : "");
      progress.message(fmt::format("ndtcu: warning: {} of {} frames matched no pose of {} (matching by {}; counted "
                                   "in summary.json, reference.unmatched_frames)",
                                   in.unmatched_frames, in.matches.size(), o.reference, in.matching));
    }
    // Over every frame with a reference pose: the ATE below covers the localized ones only.
    j["success"] = {{"within_m", kSuccessRadius},
                    {"frames", t.judged},
                    {"succeeded", t.within},
                    {"accepted_wrong", t.accepted_wrong},
                    {"wrong_beyond_m", kWrongRadius},
                    {"rate", t.judged > 0 ? nlohmann::json(static_cast<double>(t.within) / static_cast<double>(t.judged))
                                        : nlohmann::json(nullptr)}};
    eval_text += t.judged == 0 ? std::string("  success     none: no frame has a reference pose\n")
                             : fmt::format("  success     {} of {} frames ({:.1f}%) within {} m of the reference "
                                             "(lost, degenerate and skipped frames count as failures); {} accepted "
                                             "more than {} m off\n",
                                             t.within, t.judged,
                                             100.0 * static_cast<double>(t.within) / static_cast<double>(t.judged),
                                             kSuccessRadius, t.accepted_wrong, kWrongRadius);
    if (ate.pairs > 0) {
      j["ate"] = {{"pairs", ate.pairs}, {"rmse_m", ate.rmse_m}, {"mean_m", ate.mean_m},
                  {"median_m", ate.median_m}, {"max_m", ate.max_m}};
      eval_text += fmt::format("  ATE         RMSE {:.4f} m, mean {:.4f} m, median {:.4f} m, max {:.4f} m over {} localized poses "
                               "(matched by {}, no alignment)\n",
                               ate.rmse_m, ate.mean_m, ate.median_m, ate.max_m, ate.pairs, in.matching);
    } else {
      // No error to average: null, never a 0 that reads as a perfect run.
      const std::string why =
          t.estimate.empty() ? "no localized frame"
                             : fmt::format("no localized frame matches a reference pose (matching by {})", in.matching);
      j["ate"] = {{"pairs", 0}, {"rmse_m", nullptr}, {"mean_m", nullptr}, {"median_m", nullptr}, {"max_m", nullptr},
                  {"reason", why}};
      eval_text += fmt::format("  ATE         none: {}\n", why);
    }
    auto& jr = j["rpe"] = nlohmann::json::array();
    for (const auto& r : rpe) {
      const std::string why = t.estimate.empty() ? "no localized frame" : "path too short";
      jr.push_back({{"segment_m", r.segment_m}, {"pairs", r.pairs},
                    {"translation_percent", r.pairs > 0 ? nlohmann::json(r.translation_percent) : nlohmann::json(nullptr)},
                    {"rotation_deg_per_m", r.pairs > 0 ? nlohmann::json(r.rotation_deg_per_m) : nlohmann::json(nullptr)}});
      if (r.pairs == 0) jr.back()["reason"] = why;
      eval_text += r.pairs == 0 ? fmt::format("  RPE {:>4} m  no segment ({})\n", r.segment_m, why)
                                : fmt::format("  RPE {:>4} m  {:.3f} % translation, {:.5f} deg/m rotation over {} "
                                              "segments\n",
                                              r.segment_m, r.translation_percent, r.rotation_deg_per_m, r.pairs);
    }
    // How honest the reported covariance was: read back from frames.csv (in place before the
    // summary), as `ndtcu eval covariance` reads it, so that the two give the same figures.
    // The three most over-confident frames (`ndtcu eval covariance --worst N` lists more).
    CovarianceCalibrationOptions cal_options;
    cal_options.worst = 3;
    const LocalizeRunCalibration cal = calibrate_localize_run((fs::path(o.out) / "frames.csv").string(), in.reference,
                                                              t.frame_count, o.max_time_difference, cal_options);
    j["covariance_calibration"] = covariance_calibration_json(cal.calibration);
    eval_text += covariance_calibration_text(cal.calibration, "  ");
    if (ate.pairs == 0 && !t.estimate.empty()) {
      progress.message(fmt::format("ndtcu: warning: no localized scan matches a pose of {} (matching by {})",
                                   o.reference, in.matching));
    }
  }
  return eval_text;
}

// Writes summary.json with the files' paths, then draws the plots from it; returns the
// summary's line about the plots.
std::string write_summary_and_plots(nlohmann::json& j, const LocalizeRun& run) {
  const LocalizeOptions& o = run.options;
  const InterruptWatch& interrupt = run.interrupt;
  const auto run_start = run.start;
  const fs::path out(o.out);
  // Plots: run the installed package's plotter (python3 -m ndtcu.plot) with a Python that
  // imports it and matplotlib: python3 on PATH, else the system's (/usr/bin/python3, which
  // scripts/setup.sh gives python3-matplotlib; a PATH python3 from pyenv or a virtual
  // environment often has no matplotlib). A missing plotter never fails the localization,
  // it only leaves the command to run. The plotter reads summary.json for its titles, so
  // the summary is written first and rewritten with the plots' paths once they exist.
  std::vector<std::string> pythons_passed_over;
  // A run stopped by a signal (or one that came after its last frame) draws no plots:
  // whoever sent it wants the program to end.
  const bool signalled = interrupt.received() != 0;
  const std::optional<std::string> python =
      o.no_plot || signalled ? std::nullopt
                             : find_python_importing({"python3", "/usr/bin/python3"}, {"matplotlib", "ndtcu.plot"},
                                                     &pythons_passed_over);
  const std::string plot_cmd =
      fmt::format("{} -m ndtcu.plot {}", python ? shell_quote(*python) : "python3", shell_quote(o.out));
  j["files"] = {{"trajectory_tum", json_text((out / "trajectory_tum.txt").string())},
                {"trajectory_kitti", json_text((out / "trajectory_kitti.txt").string())},
                {"frames_csv", json_text((out / "frames.csv").string())},
                {"summary_json", json_text((out / "summary.json").string())},
                {"plots", nlohmann::json::array()},
                {"plot_command", json_text(plot_cmd)}};
  // Written last, after the files it describes are in place.
  auto write_summary = [&] {
    j["total_s"] = ms_since(run_start) / 1000.0;
    j["run"]["ended"] = utc_now_iso8601();
    write_file_whole((out / "summary.json").string(), dump_json(j) + "\n");
  };
  write_summary();
  std::string plot_note;
  if (o.no_plot) {
    plot_note = "plots: run " + plot_cmd;
  } else if (signalled) {
    plot_note = fmt::format("plots: not drawn ({} received); run {}", InterruptWatch::name(interrupt.received()),
                            plot_cmd);
  } else if (!python) {
    plot_note = fmt::format("plots: python3 with matplotlib and the ndtcu package not available ({}); install "
                            "python3-matplotlib and the package (pip install ., or PYTHONPATH=build/python) and run {}",
                            fmt::join(pythons_passed_over, ", "), plot_cmd);
  } else if (std::system((plot_cmd + " 1>&2").c_str()) != 0) {
    plot_note = fmt::format("plots: the plotter failed ({}); run {}", *python, plot_cmd);
  } else {
    const std::string a = (out / "trajectory.png").string(), b = (out / "frames.png").string();
    j["files"]["plots"] = {json_text(a), json_text(b)};
    plot_note = fmt::format("plots: {} and {} (drawn by {})", a, b, *python);
    write_summary();
  }
  return plot_note;
}

// Prints the summary: the JSON with --json, else a few lines of text.
void print_summary(const LocalizeRun& run, const nlohmann::json& j, const std::string& device,
                   const std::string& eval_text, const std::string& plot_note, const GlobalOptions& global) {
  const LocalizeOptions& o = run.options;
  const AlignSettings& s = run.settings.localizer.align;
  const Localizer& localizer = run.localizer;
  const FrameTally& t = run.frames;
  if (global.json) {
    std::cout << dump_json(j) << "\n";
  } else {
    std::string text = fmt::format("{} scans -> {} (map {}: {} points, {} voxels at {} m)\n", o.scans, o.out, o.map,
                                   run.map.points, run.map.voxel_count, s.resolution);
    text += fmt::format("  frames      {} localized, {} recovered, {} lost, {} degenerate, {} uncertain, {} skipped of {}\n",
                        t.localized, t.recovered, t.lost, t.degenerate, t.uncertain, t.skipped, t.done);
    if (!j["odometry"].is_null()) {
      text += fmt::format("  odometry    {} frames predicted from {}, {} outside it; {} given its motion over their sweep "
                          "({} in parts)\n",
                          t.odometry_used, run.inputs.odometry_source, t.odometry_missing, t.odometry_sweeps,
                          t.odometry_sweep_parts);
    }
    if (run.map.streamer) {
      const TiledMapStreamStats ts = run.map.streamer->stats();
      text += fmt::format("  tiles       {} of {} loaded at the end (at most {}, {:.1f} MB); {} updates, {} swapped in, "
                          "{} tiles read, {} dropped, {} skipped; frames waited {:.1f} ms at most ({} for tiles "
                          "their scan reached)\n",
                          ts.loaded, ts.listed, ts.peak_loaded, static_cast<double>(ts.peak_bytes) / 1e6, ts.updates,
                          t.map_swaps, ts.tiles_read, ts.tiles_dropped, ts.skipped.size(), largest(t.map_wait_ms),
                          t.map_coverage_waits);
    }
    const LocalizerSettings& ls = run.settings.localizer;
    if (ls.deskew != Deskew::Off) {
      text += fmt::format("  deskew      {} of {} aligned frames de-skewed (--deskew {}){}\n", t.deskewed,
                          t.done - t.skipped, to_string(ls.deskew),
                          localizer.frame_times_disagree()
                              ? "; the scans' times disagreed with their points' times: each sweep after it took its "
                                "own motion (--period? stamps?)"
                              : "");
      if (!run.inputs.imu.empty()) {
        const ImuStats imu = localizer.imu_stats();
        text += fmt::format("  imu         {} samples of {}: {} frames' rotation from them, {} fell back to constant "
                            "velocity ({} gap, {} missing), {} samples out of order dropped\n",
                            run.inputs.imu.size(), run.inputs.imu_source, imu.frames_covered,
                            imu.frames_gap + imu.frames_missing, imu.frames_gap, imu.frames_missing, imu.out_of_order);
      }
    }
    if (localizer.refines()) {
      text += fmt::format("  refined     {} of {} localized frames at {} m (--refine-ratio {})\n", t.refined, t.localized,
                          number_text(ls.refine_ratio * s.resolution), number_text(ls.refine_ratio));
    } else if (ls.refine_ratio > 0.0) {
      text += "  refined     none: a tiled map has no finer voxels to refine against (--refine-ratio)\n";
    }
    text += fmt::format("  speed       {:.1f} fps ({} backend, {}); latency median {:.1f} ms, p95 {:.1f} ms, max "
                        "{:.1f} ms\n",
                        j["fps"].get<double>(), to_string(localizer.backend()), device, percentile(t.latency, 0.5),
                        percentile(t.latency, 0.95), largest(t.latency));
    text += fmt::format("  per scan    {:.0f} points after the filter ({}), {:.1f} iterations (medians)\n",
                        percentile(t.points, 0.5), to_string(localizer.preprocess_backend()), percentile(t.iterations, 0.5));
    if (s.pose_covariance != PoseCovariance::None && t.sigma_x.empty()) {
      text += fmt::format("  covariance  {}: no frame with a covariance\n", to_string(s.pose_covariance));
    } else if (s.pose_covariance != PoseCovariance::None) {
      text += fmt::format("  covariance  {} for {} frames: sigma x {:.4f} m, y {:.4f} m (medians), {:.2f} ms "
                          "(median)\n",
                          to_string(s.pose_covariance), t.sigma_x.size(), percentile(t.sigma_x, 0.5),
                          percentile(t.sigma_y, 0.5), percentile(t.covariance_ms, 0.5));
    }
    text += eval_text;
    if (t.stopped_by != 0) {
      text += fmt::format("  status      interrupted by {} after {} of {} frames\n", InterruptWatch::name(t.stopped_by),
                          t.done, t.frame_count);
    }
    text += fmt::format("  files       trajectory_tum.txt, trajectory_kitti.txt (localized frames only), frames.csv, "
                        "summary.json\n");
    text += "  " + plot_note + "\n";
    std::cout << printable_lines(text);  // paths and topic names: no terminal commands
  }
}

}  // namespace


double percentile(Samples v, double p) {
  if (v.empty()) return 0.0;
  const std::size_t rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  const auto k = v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size() - 1, rank == 0 ? 0 : rank - 1));
  std::nth_element(v.begin(), k, v.end());
  return as_double(*k);
}

double largest(const Samples& v) { return v.empty() ? 0.0 : as_double(*std::max_element(v.begin(), v.end())); }

nlohmann::json stats_json(const Samples& v) {
  double mean = 0.0;
  for (float x : v) mean += x;
  if (!v.empty()) mean /= static_cast<double>(v.size());
  return {{"median", percentile(v, 0.5)}, {"p95", percentile(v, 0.95)}, {"max", largest(v)}, {"mean", mean}};
}

Progress::Progress(std::size_t total, bool enabled)
    : total_(total), enabled_(enabled), tty_(enabled && isatty(fileno(stderr))), start_(std::chrono::steady_clock::now()) {}

void Progress::update(std::size_t done, std::size_t lost, std::size_t skipped) {
  if (!enabled_) return;
  const double s = ms_since(start_) / 1000.0;
  const double rate = s > 0 ? static_cast<double>(done) / s : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0.0;
  if (tty_) {
    // Redraw at most 10 times a second, and always at the end.
    if (done != total_ && s - last_draw_ < 0.1) return;
    last_draw_ = s;
    constexpr int width = 30;
    const int filled = static_cast<int>(width * static_cast<double>(done) / static_cast<double>(total_));
    std::cerr << fmt::format("\r  [{}{}] {}/{} frames  {:.1f} fps  ETA {:.1f} s  lost {}  skipped {}  ",
                             std::string(filled, '#'), std::string(width - filled, '.'), done, total_, rate, eta,
                             lost, skipped)
              << std::flush;
    drawn_ = true;
    if (done == total_) finish();
  } else {
    // About ten lines per run.
    const std::size_t every = std::max<std::size_t>(1, total_ / 10);
    if (done % every != 0 && done != total_) return;
    std::cerr << fmt::format("localize: {}/{} frames, {:.1f} fps, ETA {:.1f} s, {} lost, {} skipped\n", done, total_,
                             rate, eta, lost, skipped);
  }
}

void Progress::message(const std::string& text) {
  if (!enabled_) return;
  if (tty_ && drawn_) std::cerr << "\r\033[K";
  std::cerr << printable_lines(text) << "\n";  // it names scan files: no terminal commands
  last_draw_ = -1.0;
}

void Progress::finish() {
  if (tty_ && drawn_) std::cerr << "\n";
  drawn_ = false;
}

std::string lost_reason(const LocalizationResult& r, const LocalizerSettings& ls) {
  const AlignResult& a = r.alignment;
  // Lost before any alignment (what decided_by says): an empty, zero-width or all-NaN scan
  // left no NVTL to report, and its default of 0 read as "best NVTL 0.000 < 2.3, and it did
  // not converge".
  if (r.decided_by == FrameCheck::TooFewPoints) {
    return fmt::format("too few points: {} left after the range crop and the voxel filter, fewer than "
                       "--min-frame-points {} (nothing was aligned)",
                       r.points_used, ls.min_frame_points);
  }
  switch (a.reason) {
    case StopReason::EmptySource: return "no scan point left after the range crop and the voxel filter";
    case StopReason::NoVoxels: return "the map has no voxel";
    case StopReason::NoCorrespondence: return "no scan point falls near a map voxel";
    case StopReason::SingularHessian: return fmt::format("singular Hessian (NVTL {:.3f})", a.nvtl);
    case StopReason::Converged:
    case StopReason::MaxIterations: break;
  }
  if (!(static_cast<double>(a.matched_points) >= ls.min_matched_ratio * static_cast<double>(a.source_points))) {
    return fmt::format("only {} of the scan's {} points met the map (at least {} of them must; NVTL {:.3f})",
                       a.matched_points, a.source_points, ls.min_matched_ratio, a.nvtl);
  }
  const bool low = !(a.nvtl >= ls.nvtl_threshold);
  const bool unconverged = ls.reject_max_iterations && !a.converged;
  if (low && unconverged) {
    return fmt::format("best NVTL {:.3f} < {}, and it did not converge within {} iteration{}", a.nvtl,
                       ls.nvtl_threshold, ls.align.max_iterations, ls.align.max_iterations == 1 ? "" : "s");
  }
  if (unconverged) {
    return fmt::format("did not converge within {} iteration{} (NVTL {:.3f}; --accept-max-iterations accepts it)",
                       ls.align.max_iterations, ls.align.max_iterations == 1 ? "" : "s", a.nvtl);
  }
  if (low) return fmt::format("best NVTL {:.3f} < {}", a.nvtl, ls.nvtl_threshold);
  // Both checks passed: only a search winner is refused then, for a rival that scores
  // about as well elsewhere (the localizer never guesses between two), or for a score
  // far below the scene's.
  if (r.ambiguous) {
    return fmt::format("ambiguous: the {}'s best pose (NVTL {:.3f}) has a distinct rival at NVTL {:.3f}", to_string(r.stage),
                       a.nvtl, r.ambiguity_nvtl);
  }
  return fmt::format("the best pose (NVTL {:.3f}, from the {}) is below {} of what the accepted frames score "
                     "(--search-nvtl-ratio)",
                     a.nvtl, to_string(r.stage), ls.search_nvtl_ratio);
}

int report_run(const LocalizeRun& run, Progress& progress, const GlobalOptions& global) {
  nlohmann::json j;
  add_run_json(j, run);
  j["backend"] = to_string(run.localizer.backend());
  const std::string device = device_name(run);
  j["device"] = device;
  j["cuda_device"] = cuda_device_index(run);
  add_map_json(j, run);
  add_settings_json(j, run);
  const std::string eval_text = add_evaluation(j, run, progress);
  const std::string plot_note = write_summary_and_plots(j, run);
  print_summary(run, j, device, eval_text, plot_note, global);
  const int stopped_by = run.frames.stopped_by;
  return stopped_by != 0 ? InterruptWatch::exit_code(stopped_by) : 0;
}

}  // namespace ndtcu::cli::localize
