// `ndtcu localize --map MAP --scans DIR_OR_LIST_OR_BAG`: scan-to-map localization over a sequence,
// with per-frame records, a summary, evaluation against reference poses, and plots.
#include "cli_common.hpp"
#include "commands.hpp"
#include "output_folder.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/log.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/rosbag.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/text.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/trajectory.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

namespace ndtcu::cli {

namespace {

namespace fs = std::filesystem;

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

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The per-frame numbers the summary reports (latencies, iterations, points, sigmas) are
// kept as floats, 4 bytes a frame each: their 7 significant digits are more than the
// summary prints, and a run of hours keeps only these and no per-frame record.
using Samples = std::vector<float>;

// A float as the double with its shortest decimal form (0.1f as 0.1, not 0.100000001).
double as_double(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }

// Percentile by nearest rank (p in [0, 1]) of a copy of `v`; 0 for an empty one.
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

// The pose of `trajectory` for the first scan: index 0 when it has one pose per scan,
// else the pose nearest the scan's time.
// (The list is not copied for this: a list of a million scans is most of the run's memory.)
Eigen::Matrix4d first_scan_pose(const std::string& path, const Trajectory& trajectory,
                                const std::vector<ScanEntry>& scans, double max_time_difference) {
  if (trajectory.size() == scans.size()) return trajectory.front().pose.matrix();
  // By time, as match_to_reference() matches a scan when the sizes differ (a list of one
  // scan and a trajectory of one pose would be matched by index there).
  std::vector<ScanEntry> first{scans.front()};
  std::optional<std::size_t> match;
  if (trajectory.size() > 1) {
    match = match_to_reference(first, trajectory, max_time_difference).front();
  } else if (std::abs(trajectory.front().time - first.front().time) <= max_time_difference) {
    match = 0;
  }
  if (!match) {
    throw Error(fmt::format("--init-from {}: no pose within {} s of the first scan's time {:.6f} (and {} poses for "
                            "{} scans, so not matched by index)",
                            path, max_time_difference, scans.front().time, trajectory.size(), scans.size()));
  }
  return trajectory[*match].pose.matrix();
}

// A frame succeeds when its pose lies within this of its reference pose (m).
constexpr double kSuccessRadius = 0.10;
// A valid frame farther than this from its reference pose is a wrong pose accepted (m):
// the worst outcome, counted apart.
constexpr double kWrongRadius = 0.30;

// Progress on stderr: a bar redrawn in place on a terminal, a plain line now and then otherwise.
class Progress {
 public:
  Progress(std::size_t total, bool enabled)
      : total_(total), enabled_(enabled), tty_(enabled && isatty(fileno(stderr))), start_(std::chrono::steady_clock::now()) {}

  void update(std::size_t done, std::size_t lost, std::size_t skipped) {
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

  // A message on its own line (clearing the bar first; it is redrawn on the next update).
  void message(const std::string& text) {
    if (!enabled_) return;
    if (tty_ && drawn_) std::cerr << "\r\033[K";
    std::cerr << printable_lines(text) << "\n";  // it names scan files: no terminal commands
    last_draw_ = -1.0;
  }

  void finish() {
    if (tty_ && drawn_) std::cerr << "\n";
    drawn_ = false;
  }

 private:
  std::size_t total_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_;
  double last_draw_ = -1.0;
  bool drawn_ = false;
};

std::string csv_number(double v) { return fmt::format("{:.6f}", v); }

// The row of frames.csv for one frame: `result` null for a skipped frame, `reference` the
// matched reference pose, `error_m` the frame's ATE.
std::string frames_csv_row(const PreparedScan& s, const LocalizationResult* result, const StampedPose* reference,
                           std::optional<double> error_m) {
  std::string row = fmt::format("{},{:.6f},{},", s.index, s.entry.time, fs::path(s.entry.path).filename().string());
  if (!result) {
    row += fmt::format("skipped,0,0,1,,,,,,,,,,{:.3f},{:.3f},,{:.3f},,,,,,,,,,", s.read_ms, s.preprocess_ms,
                       s.read_ms + s.preprocess_ms);
  } else {
    const auto& r = *result;
    const auto& a = r.alignment;
    const bool lost = r.status == FrameStatus::Lost;
    row += fmt::format("{},{},{},0,{},{},{},{},{},{},{:.6f},{:.6f},{},{:.3f},{:.3f},{:.3f},{:.3f},", to_string(r.status),
                       lost ? 1 : 0, r.status == FrameStatus::Recovered ? 1 : 0, s.points_read, r.points_used,
                       a.iterations, r.attempts, r.iterations_total, r.evaluations, a.tp, a.nvtl, a.converged ? 1 : 0, s.read_ms, s.preprocess_ms,
                       r.align_ms, s.read_ms + s.preprocess_ms + r.align_ms);
    // A lost frame has no pose: the columns stay empty rather than hold a guess.
    if (lost) {
      row += ",,,,,,";
    } else {
      const Pose6 p = matrix_to_pose(r.pose);
      for (int i = 0; i < 6; ++i) row += csv_number(p(i)) + ",";
    }
    for (int i = 0; i < 3; ++i) row += csv_number(r.prediction(i, 3)) + ",";
  }
  if (reference) {
    const Eigen::Vector3d t = reference->pose.translation();
    row += fmt::format("{},{},{},", csv_number(t.x()), csv_number(t.y()), csv_number(t.z()));
  } else {
    row += ",,,";
  }
  row += error_m ? csv_number(*error_m) : "";
  // The x-y covariance of the accepted pose (m^2, map frame, as Autoware's estimator gives
  // it); empty for skipped and lost frames and where there is none.
  if (result && result->valid && result->alignment.covariance_valid) {
    const Eigen::Matrix2d& c = result->alignment.covariance_xy;
    row += fmt::format(",{:.6e},{:.6e},{:.6e}", c(0, 0), c(0, 1), c(1, 1));
  } else {
    row += ",,,";
  }
  // How the frame was recovered: the stage that gave (or last tried) the pose, the
  // hypotheses its searches aligned and screened, and the last search's best rival.
  if (result) {
    const auto& r = *result;
    row += fmt::format(",{},{},{},{},{}", r.stage, r.hypotheses, r.screened,
                       std::isnan(r.ambiguity_nvtl) ? std::string() : fmt::format("{:.6f}", r.ambiguity_nvtl),
                       r.ambiguous ? 1 : 0);
  } else {
    row += ",,,,,";
  }
  // How well the scan held each direction at the frame's alignment (ndtcu/localizability.hpp):
  // the weakest eigenvalue's share of the strongest, the weak directions, and the weakest
  // direction as a pose change [x y z roll pitch yaw] (m, rad) that moves the points 1 m RMS;
  // empty without an analysis.
  const Localizability* l = result && result->alignment.localizability.valid ? &result->alignment.localizability : nullptr;
  if (l) {
    row += fmt::format(",{:.6e},{},{}", l->weakest_ratio, l->weak, l->degenerate ? 1 : 0);
    for (int i = 0; i < 6; ++i) row += fmt::format(",{:.5f}", l->directions(i, 0));
  } else {
    row += ",,,,,,,,,";
  }
  // The localizer's degeneracy probe (LocalizerSettings::degeneracy_probe_m): the directions
  // it found the scan does not pin, and the accepted pose's NVTL minus its best probe's.
  if (result && !std::isnan(result->probe_nvtl_drop)) {
    row += fmt::format(",{},{:.6f}", result->degenerate_directions, result->probe_nvtl_drop);
  } else {
    row += ",,";
  }
  // Which check decided the frame, and the correction's Mahalanobis distance (squared)
  // under the prediction's covariance (empty without one).
  if (result) {
    row += fmt::format(",{},{}", result->decided_by,
                       std::isnan(result->mahalanobis2) ? std::string() : fmt::format("{:.4f}", result->mahalanobis2));
  } else {
    row += ",,";
  }
  return row + "\n";
}

// A prediction from wheel, inertial or LiDAR-inertial odometry (--odometry): the motion
// the odometry measured between the previous frame and this one, applied to the previous
// frame's pose; its covariance is the previous frame's plus the odometry's drift over that
// motion (--odometry-noise: standard deviations of a per metre and b per second in each
// axis of the position, c per radian turned and d per second in each angle).
class OdometryPredictor {
 public:
  OdometryPredictor(Trajectory odometry, const std::vector<double>& noise)
      : odometry_(std::move(odometry)), noise_(noise) {}

  // The prediction at `time` from the previous frame (`pose` at `last_time`, `covariance`),
  // or nullopt where the odometry does not cover both times.
  std::optional<std::pair<Eigen::Matrix4d, Eigen::Matrix<double, 6, 6>>> predict(const Eigen::Matrix4d& pose,
                                                                               double last_time,
                                                                               const Eigen::Matrix<double, 6, 6>& cov,
                                                                               double time) const {
    const auto from = interpolate_pose(odometry_, last_time), to = interpolate_pose(odometry_, time);
    if (!from || !to) return std::nullopt;
    const Eigen::Isometry3d motion = from->inverse() * *to;
    const double dt = std::abs(time - last_time);
    const double metres = motion.translation().norm();
    const double radians = Eigen::AngleAxisd(motion.rotation()).angle();
    const double st = noise_[0] * metres + noise_[1] * dt, sr = noise_[2] * radians + noise_[3] * dt;
    Eigen::Matrix<double, 6, 6> c = cov;
    c.diagonal() += (Eigen::Matrix<double, 6, 1>() << st * st, st * st, st * st, sr * sr, sr * sr, sr * sr).finished();
    return std::make_pair(Eigen::Matrix4d(pose * motion.matrix()), c);
  }

  std::size_t size() const { return odometry_.size(); }

 private:
  Trajectory odometry_;
  std::vector<double> noise_;
};

// The files localize writes in its --out folder; an earlier run's go before the first frame.
const std::vector<std::string> kLocalizeOutputs = {"summary.json",       "frames.csv", "trajectory_tum.txt",
                                                   "trajectory_kitti.txt", "trajectory.png", "frames.png"};

// The per-frame files (frames.csv and the trajectories), written as frames finish rather
// than kept for the end: memory stays flat over any number of frames. Each is written
// whole (ndtcu/output_file.hpp): its temporary file is flushed at least once a second
// (it can be watched), and commit() puts the three in place when the run ends or is
// stopped, before the summary; a run killed outright leaves none of them.
class FrameFiles {
 public:
  explicit FrameFiles(const fs::path& out)
      : frames_(open(out / "frames.csv")),
        tum_(open(out / "trajectory_tum.txt")),
        kitti_(open(out / "trajectory_kitti.txt")),
        last_flush_(std::chrono::steady_clock::now()) {
    frames_.write("frame,time,file,status,lost,recovered,skipped,points_read,points,iterations,attempts,"
                      "iterations_total,evaluations,tp,nvtl,converged,read_ms,preprocess_ms,align_ms,total_ms,x,y,z,"
                      "roll,pitch,yaw,pred_x,pred_y,pred_z,ref_x,ref_y,ref_z,error_m,cov_xx,cov_xy,cov_yy,stage,hypotheses,"
                      "screened,ambiguity_nvtl,ambiguous,weakest_ratio,weak_directions,degenerate,weak_x,weak_y,weak_z,"
                      "weak_roll,weak_pitch,weak_yaw,degenerate_directions,probe_nvtl_drop,decided_by,mahalanobis2\n");
  }

  void frame(const std::string& row) {
    frames_.write(row);
    flush_if_due();
  }

  // A localized frame's pose (lost frames are in frames.csv only, flagged).
  void pose(const StampedPose& p) {
    tum_.write(tum_line(p));
    kitti_.write(kitti_line(p));
  }

  // Puts the files in place; throws IoError for one that could not be written.
  void commit() {
    for (OutputFile* f : {&tum_, &kitti_, &frames_}) f->commit();
  }

 private:
  static OutputFile open(const fs::path& path) { return OutputFile(path.string()); }

  void flush_if_due() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_flush_ < std::chrono::seconds(1)) return;
    last_flush_ = now;
    for (OutputFile* f : {&frames_, &tum_, &kitti_}) f->flush();
  }

  OutputFile frames_, tum_, kitti_;
  std::chrono::steady_clock::time_point last_flush_;
};

// Where scripts/plot_localization.py is: $NDTCU_SCRIPTS_DIR, else the source tree's scripts/.
std::optional<fs::path> plot_script() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("NDTCU_SCRIPTS_DIR")) candidates.emplace_back(env);
#ifdef NDTCU_SCRIPTS_DIR
  candidates.emplace_back(NDTCU_SCRIPTS_DIR);
#endif
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c / "plot_localization.py", ec)) return c / "plot_localization.py";
  }
  return std::nullopt;
}

// Why a frame was lost, from its best attempt: the check that failed, in its own words.
std::string lost_reason(const LocalizationResult& r, const LocalizerSettings& ls) {
  const AlignResult& a = r.alignment;
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
    return fmt::format("ambiguous: the {}'s best pose (NVTL {:.3f}) has a distinct rival at NVTL {:.3f}", r.stage,
                       a.nvtl, r.ambiguity_nvtl);
  }
  return fmt::format("the best pose (NVTL {:.3f}, from the {}) is below {} of what the accepted frames score "
                     "(--search-nvtl-ratio)",
                     a.nvtl, r.stage, ls.search_nvtl_ratio);
}

}  // namespace

Command add_localize(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<LocalizeOptions>();
  auto* cmd = app.add_subcommand("localize", "Localize a sequence of scans in a map (NDT, Autoware's settings)");
  cmd->add_option("--map", o->map,
                  "map point cloud (.pcd, .ply, .bin), world frame, or a tiled map folder (with "
                  "pointcloud_map_metadata.yaml)")
      ->required();
  add_origin_option(cmd, o->origin, "the map", "--origin",
                    "a tiled map's tiles share one origin, with auto a middle tile's corner for a map beyond 10 km");
  auto* map_radius_option =
      cmd->add_option("--map-radius", o->map_radius,
                      "with a tiled map: keep the tiles within this distance (m) of the pose loaded")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
  auto* map_update_distance_option =
      cmd->add_option("--map-update-distance", o->map_update_distance,
                      "with a tiled map: load and drop tiles (on a background thread) each time the pose has moved "
                      "this far (m)")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
  cmd->add_option("--map-memory", o->map_memory_mb,
                  "with a tiled map: host memory (MB) for the tiles and their joined map; tiles beyond --map-radius "
                  "stay until the budget needs their room, least recently used first (0 = no budget: they are "
                  "dropped at once)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--map-update-wait", o->map_update_wait,
                "with a tiled map: swap each map update in before the frame after the one that asked for it, "
                "waiting for it if need be (reproducible runs; by default the update is taken whenever it is "
                "ready, never holding up a frame)");
  cmd->add_option("--scans", o->scans,
                  "folder of scans (ordered by name), a text file listing scan paths [time], or a rosbag (.bag, "
                  ".mcap, .db3, or a ROS 2 bag folder) whose PointCloud2 messages are the scans")
      ->required();
  cmd->add_option("--topic", o->topic,
                  "with --scans BAG: the sensor_msgs/PointCloud2 topic to read (default: the bag's only one)");
  auto* init = cmd->add_option("--init", o->init, "pose of the first scan x,y,z,roll,pitch,yaw (m, rad)")
                   ->delimiter(',')
                   ->expected(6);
  cmd->add_option("--init-from", o->init_from, "take the first scan's pose from this TUM or KITTI file")
      ->excludes(init);
  cmd->add_option("--init-radius", o->init_radius,
                  "the first pose is only a rough one: search for it within this radius (m; 0 = no search) until "
                  "a frame is found")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 50.0));
  cmd->add_option("--init-yaw-range", o->init_yaw_range,
                  "... and within this yaw range about its yaw (deg; 360 = any heading)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 360.0));
  cmd->add_option("--reference", o->reference, "reference poses (TUM or KITTI) to evaluate against");
  cmd->add_option("--reference-format", o->reference_format, "format of --reference (--init-from is always detected)")
      ->check(CLI::IsMember({"tum", "kitti", "auto"}));
  cmd->add_option("--out", o->out, "output folder (created)")->capture_default_str();
  add_ndt_options(cmd, o->ndt);
  add_config_option(cmd, o->ndt,
                    ", the NVTL threshold (score_estimation.converged_param_nearest_voxel_transformation_likelihood), "
                    "validation.initial_pose_timeout_sec (--init-from's time gap), dynamic_map_loading.map_radius "
                    "and update_distance");
  cmd->add_option("--min-range", o->min_range, "drop scan points closer than this (m)")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-range", o->max_range, "drop scan points farther than this (m)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--voxel", o->voxel, "scan voxel-filter leaf (m; 0 = no filter)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-scan-points", o->min_scan_points,
                  "when --voxel leaves fewer points than this, filter again with the leaf shrunk by 0.7, at most 4 "
                  "times (a sparse or already downsampled scan keeps enough to align; 0 = the fixed leaf)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{10000000}));
  cmd->add_option("--min-frame-points", o->min_frame_points,
                  "a frame with fewer points than this after the filter is lost at once (\"too few points\"), "
                  "without an alignment or a search: a scan that sparse cannot be told from a wrong pose (0 = align "
                  "whatever is left)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{10000000}));
  cmd->add_flag("--gpu-filter-in-line", o->gpu_filter_in_line,
                "with the GPU filter: run it just before each alignment instead of on the reader threads");
  cmd->add_flag("--cpu-preprocess", o->cpu_preprocess,
                "crop and voxel-filter scans on the CPU even when aligning on CUDA (by default the GPU does it)");
  cmd->add_option("--map-voxel", o->map_voxel, "voxel-filter the map first (leaf, m; 0 = no)")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  auto* nvtl_threshold_option =
      cmd->add_option("--nvtl-threshold", o->nvtl_threshold, "a pose is valid when its NVTL reaches this")
          ->capture_default_str();
  cmd->add_option("--min-matched-ratio", o->min_matched_ratio,
                  "... and at least this share of the scan's points found a map voxel")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--degeneracy-probe", o->degeneracy_probe,
                  "score each accepted pose again a step of this many metres (RMS point motion) along each of its six "
                  "directions; a direction whose probe stays within --degeneracy-margin of its NVTL is one the scan does "
                  "not pin (a tunnel's axis), and the frame is degenerate (0 = no probe)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--degeneracy-margin", o->degeneracy_margin, "... within this NVTL of the pose's")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--odometry", o->odometry,
                  "TUM trajectory of odometry (wheel, IMU integration, LiDAR-inertial) in any fixed frame: the motion "
                  "it measured since the previous frame, interpolated to each scan's time, replaces the "
                  "constant-velocity prediction (frames outside it fall back to the latter)");
  cmd->add_option("--odometry-topic", o->odometry_topic,
                  "with --scans BAG: a nav_msgs/Odometry topic of that bag, read as --odometry reads its file (the "
                  "message poses at the bag's record times, the clock of the scans)")
      ->excludes("--odometry");
  cmd->add_option("--odometry-noise", o->odometry_noise,
                  "the odometry's drift as standard deviations a,b,c,d: a m per metre travelled and b m per second "
                  "(each position axis), c rad per radian turned and d rad per second (each angle)")
      ->delimiter(',')
      ->expected(4)
      ->capture_default_str();
  cmd->add_option("--motion-sigma", o->motion_sigma,
                  "the constant-velocity prediction's standard deviations per second since the last good pose: "
                  "position (m/s), angles (rad/s)")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();
  cmd->add_option("--gate-chi2", o->gate_chi2,
                  "Mahalanobis gate: a first attempt whose correction from the prediction exceeds this d' C^-1 d "
                  "under the prediction's covariance must be confirmed by a search (22.46: chi-square 99.9%, 6 "
                  "degrees of freedom; 0 = no gate)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--prediction-prior", o->prediction_prior,
                "align the first attempt with the prediction as a pose prior (its covariance's inverse as "
                "information): where the scan does not pin the pose, the result stays near the prediction");
  add_regularization_option(cmd, o->regularization, "the frame's prediction (--odometry's when given)");
  cmd->add_flag("--accept-max-iterations", o->accept_max_iterations,
                "accept an alignment that used every iteration when its NVTL passes (by default it is retried)");
  cmd->add_option("--recovery", o->recovery,
                  "when the prediction fails: none (the frame is lost), last-good (retry from the last good pose), "
                  "hypotheses (search rotations, then positions near the prediction, then as far as --max-speed "
                  "allows)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "last-good", "hypotheses"}));
  cmd->add_option("--recovery-attempts", o->recovery_attempts,
                  "retries before the searches or the loss (continuing an attempt that ran out of iterations; "
                  "with last-good, from the last good pose)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10));
  cmd->add_option("--search-nvtl-ratio", o->search_nvtl_ratio,
                  "a search's winner must also reach this share of the NVTL the accepted frames score (0 = no check)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--rotation-search-range", o->rotation_search_range,
                  "largest rotation (deg) the rotation search tries about the prediction and the last good pose")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 180.0));
  cmd->add_option("--rotation-search-step", o->rotation_search_step, "grid step (deg) of the rotation search")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 180.0));
  cmd->add_option("--search-radius", o->search_radius,
                  "radius (m) of the position search near the prediction (after the rotation search)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 200.0));
  cmd->add_option("--max-speed", o->max_speed,
                  "how fast (m/s) the sensor can move: the wide search's radius about the last good pose grows by "
                  "this per second since it")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--max-turn-rate", o->max_turn_rate,
                  "how fast (deg/s) the heading can turn away from the prediction: the position searches' yaw range "
                  "grows by this per second since the last good pose")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--max-search-radius", o->max_search_radius, "largest radius (m) of the position searches")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 200.0));
  cmd->add_option("--readers", o->readers, "scan reader threads")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--queue", o->queue, "scans read ahead at most")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--period", o->period, "scan period (s) for scans without time stamps")->capture_default_str()
      ->check(CLI::PositiveNumber);
  auto* max_time_difference_option =
      cmd->add_option("--max-time-difference", o->max_time_difference,
                      "largest time gap (s) when matching scans to reference poses by time, and --init-from's pose "
                      "to the first scan")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-plot", o->no_plot, "do not run scripts/plot_localization.py (the command is printed instead)");

  return [o, &global, map_radius_option, map_update_distance_option, nvtl_threshold_option,
          max_time_difference_option]() {
    const auto run_start = std::chrono::steady_clock::now();
    const std::optional<AutowareParams> config = load_autoware_params(o->ndt.config);
    // Autoware's initial_pose_timeout_sec is the gap allowed between the initial pose and the
    // scan: here, between --init-from's pose and the first scan. The reference poses are
    // still matched within --max-time-difference.
    double init_time_difference = o->max_time_difference;
    // The file's values, where the command line did not give the option.
    if (config) {
      if (config->nvtl_threshold && nvtl_threshold_option->count() == 0) o->nvtl_threshold = *config->nvtl_threshold;
      if (config->map_radius && map_radius_option->count() == 0) o->map_radius = *config->map_radius;
      if (config->map_update_distance && map_update_distance_option->count() == 0) {
        o->map_update_distance = *config->map_update_distance;
      }
      if (config->initial_pose_timeout_sec && max_time_difference_option->count() == 0) {
        init_time_difference = *config->initial_pose_timeout_sec;
      }
    }
    LocalizerSettings ls;
    AlignSettings& s = ls.align;
    s = ndt_settings(o->ndt, config ? &*config : nullptr);
    // The localizer reports a covariance with every pose unless told otherwise.
    if (!o->ndt.pose_covariance && !(config && config->pose_covariance)) s.pose_covariance = PoseCovariance::Laplace;
    ls.min_range = o->min_range;
    ls.max_range = o->max_range;
    ls.voxel_leaf = o->voxel;
    ls.min_scan_points = o->min_scan_points;
    ls.min_frame_points = o->min_frame_points;
    ls.gpu_preprocess = !o->cpu_preprocess;
    ls.nvtl_threshold = o->nvtl_threshold;
    ls.reject_max_iterations = !o->accept_max_iterations;
    ls.recovery_attempts = o->recovery_attempts;
    ls.min_matched_ratio = o->min_matched_ratio;
    ls.search_nvtl_ratio = o->search_nvtl_ratio;
    ls.rotation_search_range_deg = o->rotation_search_range;
    ls.rotation_search_step_deg = o->rotation_search_step;
    ls.recovery = recovery_from_string(o->recovery);
    ls.search_radius = o->search_radius;
    ls.max_speed = o->max_speed;
    ls.max_turn_rate_deg = o->max_turn_rate;
    ls.max_search_radius = o->max_search_radius;
    ls.degeneracy_probe_m = o->degeneracy_probe;
    ls.degeneracy_margin = o->degeneracy_margin;
    ls.gate_chi2 = o->gate_chi2;
    ls.prediction_prior = o->prediction_prior;
    ls.regularization_scale_factor = regularization_scale(o->regularization, config ? &*config : nullptr);
    ls.motion_translation_sigma = o->motion_sigma[0];
    ls.motion_rotation_sigma = o->motion_sigma[1];
    for (std::size_t i = 0; i < o->odometry_noise.size(); ++i) {
      if (!(o->odometry_noise[i] >= 0.0) || !std::isfinite(o->odometry_noise[i])) {
        throw Error(fmt::format("--odometry-noise: value {} is {} (each must be finite and >= 0)", i + 1,
                                o->odometry_noise[i]));
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

    // A rosbag (a .bag, .mcap or .db3 file, or a folder with metadata.yaml): scan k is
    // message k of the PointCloud2 topic, at the bag's record time, read by the readers.
    std::shared_ptr<const rosbag::BagReader> bag;
    std::string bag_topic;
    std::vector<ScanEntry> scans;
    if (rosbag::is_bag_path(o->scans)) {
      bag = std::make_shared<const rosbag::BagReader>(o->scans);
      bag_topic = bag->point_cloud_topic(o->topic).name;
      const auto& messages = bag->messages(bag_topic);
      if (messages.empty()) throw Error(o->scans + ": topic " + bag_topic + " holds no message");
      scans.reserve(messages.size());
      for (const auto& m : messages) scans.push_back({fmt::format("{}#{}", o->scans, m.index), m.time()});
    } else {
      if (!o->topic.empty()) throw Error("--topic " + o->topic + ": " + o->scans + " is not a rosbag (--topic reads a bag)");
      scans = list_scans(o->scans, o->period);
    }
    const TrajectoryFormat ref_format = trajectory_format_from_string(o->reference_format);

    Trajectory reference;
    std::vector<std::optional<std::size_t>> matches;  // per scan, with a reference only
    std::string matching = "none";
    ReferenceCheck reference_check;
    std::size_t unmatched_frames = 0;  // frames with no reference pose (a counted warning)
    if (!o->reference.empty()) {
      reference = read_trajectory(o->reference, ref_format, o->period);
      // In time order, each stamp once (two poses at one stamp are an error): the matching
      // below and every error computed from it assume it.
      reference_check = sort_reference(reference, o->reference);
      if (reference_check.out_of_order > 0 && log_level() <= LogLevel::Warn) {
        std::cerr << fmt::format("ndtcu: warning: --reference {}: {} pose{} out of time order; sorted by time before "
                                 "matching (counted in summary.json, reference.out_of_order)\n",
                                 printable(o->reference), reference_check.out_of_order,
                                 reference_check.out_of_order == 1 ? "" : "s");
      }
      matching = reference.size() == scans.size() ? "index" : "time";
      matches = match_to_reference(scans, reference, o->max_time_difference);
      for (const auto& m : matches) unmatched_frames += !m.has_value();
    }

    // The odometry: a TUM file, or a nav_msgs/Odometry topic of the scans' bag (its poses at
    // the bag's record times, the scans' clock). `odometry_source` names it in messages.
    std::optional<OdometryPredictor> odometry;
    std::string odometry_source;
    Trajectory odometry_poses;
    if (!o->odometry.empty()) {
      odometry_source = o->odometry;
      odometry_poses = read_trajectory(o->odometry, TrajectoryFormat::Tum);
    } else if (!o->odometry_topic.empty()) {
      if (!bag) {
        throw Error("--odometry-topic " + o->odometry_topic + ": " + o->scans +
                    " is not a rosbag (--odometry-topic reads the scans' bag; give a TUM file with --odometry)");
      }
      const rosbag::TopicInfo& topic = bag->topic(o->odometry_topic);
      if (!rosbag::is_odometry_type(topic.type)) {
        throw Error("--odometry-topic " + o->odometry_topic + ": " + o->scans + ": the topic holds " +
                    (topic.type.empty() ? "messages of no declared type" : topic.type) + ", not nav_msgs/Odometry");
      }
      odometry_source = o->scans + " topic " + o->odometry_topic;
      const auto& messages = bag->messages(o->odometry_topic);
      odometry_poses.reserve(messages.size());
      for (std::size_t k = 0; k < messages.size(); ++k) {
        const rosbag::OdometryMessage m = bag->read_odometry(o->odometry_topic, k);
        odometry_poses.push_back({messages[k].time(), Eigen::Isometry3d(m.pose)});
      }
    }
    if (!odometry_source.empty()) {
      if (odometry_poses.size() < 2) {
        throw IoError(odometry_source, fmt::format("odometry needs at least two poses, found {}", odometry_poses.size()));
      }
      for (std::size_t i = 1; i < odometry_poses.size(); ++i) {
        if (!(odometry_poses[i].time > odometry_poses[i - 1].time)) {
          throw IoError(odometry_source,
                        fmt::format("pose {} at time {} does not come after pose {} at {} (odometry must be in time "
                                    "order, without repeated stamps)",
                                    i + 1, odometry_poses[i].time, i, odometry_poses[i - 1].time));
        }
      }
      odometry.emplace(std::move(odometry_poses), o->odometry_noise);
    }

    Eigen::Matrix4d initial = Eigen::Matrix4d::Identity();
    std::string initial_source = "identity";
    if (!o->init.empty()) {
      Pose6 p;
      for (int i = 0; i < 6; ++i) p(i) = o->init[static_cast<std::size_t>(i)];
      if (!p.allFinite()) throw Error("--init: every value must be finite");
      initial = pose_to_matrix(p);
      initial_source = "--init";
    } else if (!o->init_from.empty()) {
      const bool is_reference = o->init_from == o->reference && !reference.empty();
      Trajectory t = is_reference ? reference : read_trajectory(o->init_from, TrajectoryFormat::Auto, o->period);
      if (t.empty()) throw IoError(o->init_from, "holds no pose");
      // In time order, each stamp once, as the reference is: the first scan's pose is
      // picked by time, or as the earliest when there is one pose per scan. Unsorted, a
      // file of one pose per scan gave its first line's pose, and a shorter one found no
      // pose for a stamp it held.
      if (!is_reference) {
        const ReferenceCheck init_check = sort_reference(t, "--init-from " + o->init_from);
        if (init_check.out_of_order > 0 && log_level() <= LogLevel::Warn) {
          std::cerr << fmt::format("ndtcu: warning: --init-from {}: {} pose{} out of time order; sorted by time before "
                                   "taking the first scan's pose\n",
                                   o->init_from, init_check.out_of_order, init_check.out_of_order == 1 ? "" : "s");
        }
      }
      initial = first_scan_pose(o->init_from, t, scans, init_time_difference);
      initial_source = "--init-from";
    }

    // The output folder is this run's alone, and must take files, before hours of scans
    // are spent on it.
    const OutputFolder folder(o->out, "ndtcu localize");

    // Map.
    auto t0 = std::chrono::steady_clock::now();
    // The localizer, once made: updates stage their maps on it (set before the first update).
    Localizer* localizer_slot = nullptr;
    std::unique_ptr<TiledMapStreamer> streamer;
    std::shared_ptr<const VoxelMap> voxels;
    PointCloud map;
    std::size_t map_points_read = 0, map_points = 0;
    double map_load_ms = 0.0, map_build_ms = 0.0;
    if (is_tiled_map(o->map)) {
      TiledMapStreamOptions so;
      so.radius = o->map_radius;
      so.update_distance = o->map_update_distance;
      so.map_voxel = o->map_voxel;
      so.memory_budget = static_cast<std::size_t>(o->map_memory_mb * 1e6);
      so.threads = s.threads;
      // Where the tiles are voxelized on the GPU (a CUDA localizer), each update publishes
      // them to the tiled map's device twin, which the localizer follows: only the voxels
      // that changed go up, the lookup is rebuilt on the device, and no host map is joined.
      // Otherwise each update's joined map is uploaded to the GPU on the worker (a no-op on
      // the CPU backend), so the swap between two frames costs no upload.
      so.publish = tiled_map_on_device(voxel_map_options(s));
      so.on_map = [&localizer_slot](const std::shared_ptr<const VoxelMap>& next) {
        if (localizer_slot) localizer_slot->stage_map(next);
      };
      streamer = std::make_unique<TiledMapStreamer>(o->map, voxel_map_options(s), so, read_options_for_origin(o->origin));
      try {
        voxels = streamer->load(initial.topRightCorner<2, 1>());
      } catch (const Error& e) {
        throw Error(fmt::format("{} (--map-radius around the first pose)", e.what()));
      }
      const TiledMapStreamStats ts = streamer->stats();
      map_load_ms = ts.read_ms;
      map_build_ms = ts.join_ms;
      map_points_read = map_points = streamer->tiled_map()->stats().points;
    } else {
      map = read_point_cloud(o->map, read_options_for_origin(o->origin));
      map_points_read = map.size();
      if (o->map_voxel > 0) map = voxel_downsample(map, o->map_voxel);
      map_points = map.size();
      map_load_ms = ms_since(t0);
    }
    Localizer localizer(ls);
    localizer_slot = &localizer;
    // Whatever ends the run, no update may still be staging on the localizer when it goes.
    struct WaitForUpdates {
      const TiledMapStreamer* streamer;
      ~WaitForUpdates() {
        if (streamer) streamer->wait_idle();
      }
    } wait_for_updates{streamer.get()};
    if (streamer && !voxels) {
      localizer.set_map(streamer->tiled_map());  // published: followed
    } else if (voxels) {
      // Staged first: the staging buffers (pinned host memory above all, whose allocation
      // holds the driver's locks) are allocated now, not during a frame's alignment.
      if (streamer) localizer.stage_map(voxels);
      localizer.set_map(voxels);
    } else {
      t0 = std::chrono::steady_clock::now();
      localizer.set_map(map);
      map_build_ms = ms_since(t0);
      voxels = localizer.aligner().target();
      map = PointCloud{};  // the voxels are what the run needs
    }
    const std::size_t map_voxels = voxels ? voxels->size() : streamer->stats().voxels;
    if (map_voxels == 0) throw Error(o->map + ": the map has no usable voxel at resolution " + fmt::format("{}", s.resolution));
    std::size_t map_swaps = 0;
    Samples map_wait_ms;  // per swap: how long the frame waited for it (0 unless --map-update-wait)
    if (o->init_radius > 0.0) {
      localizer.set_initial_region(initial, o->init_radius, o->init_yaw_range);
    } else {
      localizer.set_initial_pose(initial);
    }

    // The loop: readers fill the queue while the aligner works on the current scan. Each
    // frame is written out as it finishes; what stays is what the summary needs: a few
    // numbers per frame and, when there is a reference to evaluate against, the poses.
    const fs::path out(o->out);
    // From here the folder holds this run's results or none: an earlier run's go before
    // the first frame, this run's are put in place when it ends or is stopped.
    folder.remove_earlier(kLocalizeOutputs);
    FrameFiles files(out);
    // SIGINT and SIGTERM stop the run between two frames: what is finished is written and
    // the exit code says which signal (130, 143). Before this point nothing was written.
    const InterruptWatch interrupt;
    std::optional<std::size_t> last_frame;
    const bool show_progress = log_level() <= LogLevel::Info;
    const std::size_t frame_count = scans.size();
    Progress progress(frame_count, show_progress);
    std::size_t done = 0, localized = 0, lost = 0, recovered = 0, skipped = 0;
    // The odometry chain: the previous frame's pose, time and covariance (the initial pose,
    // with its time unknown, starts no chain: the first frame predicts as without odometry).
    Eigen::Matrix4d chain_pose = initial;
    Eigen::Matrix<double, 6, 6> chain_covariance = Eigen::Matrix<double, 6, 6>::Zero();
    double chain_time = 0.0;
    bool have_chain = false;
    std::size_t odometry_used = 0, odometry_missing = 0;
    // The success rate: frames with a reference pose, and those of them localized within
    // kSuccessRadius of it (lost and skipped frames count as failures).
    std::size_t judged = 0, within = 0, accepted_wrong = 0, degenerate = 0;
    Trajectory estimate;  // the localized poses, for ATE and RPE
    // (estimate index, reference index): each frame's own match, so that the ATE and RPE
    // cover exactly the frames that have an error.
    std::vector<std::pair<std::size_t, std::size_t>> estimate_pairs;
    if (!reference.empty()) estimate.reserve(frame_count);
    Samples latency, align_ms, iterations, points, sigma_x, sigma_y, covariance_ms;
    // Reserved, not grown: no copy at each doubling (pages never written cost nothing).
    for (Samples* v : {&latency, &align_ms, &iterations, &points, &sigma_x, &sigma_y, &covariance_ms}) {
      v->reserve(frame_count);
    }
    const auto loop_start = std::chrono::steady_clock::now();
    // The readers filter the scans they read (each GPU filter on a stream of its own), so
    // filtering overlaps the alignments. With --gpu-filter-in-line this thread filters each
    // scan just before aligning it instead: no filter kernels run during an alignment
    // (BALM on an H100, three runs each: alignment p95 1.30-1.44 ms in line, 1.35-1.45 ms
    // on the readers).
    const bool filter_in_line = std::string(localizer.preprocess_backend()) == "cuda" && o->gpu_filter_in_line;
    {
      ScanPrefetcher::Preprocess on_reader;
      if (!filter_in_line) on_reader = [&localizer](const PointCloud& c) { return localizer.preprocess(c); };
      ScanPrefetcher::Reader read_scan;
      if (bag) {
        read_scan = [bag, bag_topic](std::size_t k, const ScanEntry&) {
          ReadOptions ro;
          ro.read_intensity = false;  // NDT uses geometry only, as for files
          return bag->read_point_cloud(bag_topic, k, ro);
        };
      }
      ScanPrefetcher prefetcher(std::move(scans), read_scan, on_reader, o->readers, o->queue);
      while (interrupt.received() == 0) {
        auto scan = prefetcher.next();
        if (!scan) break;
        const std::optional<std::size_t> match = matches.empty() ? std::nullopt : matches[scan->index];
        const StampedPose* matched = match ? &reference[*match] : nullptr;
        judged += matched != nullptr;
        if (!scan->error.empty()) {
          ++skipped;
          progress.message(fmt::format("ndtcu: warning: frame {} skipped: {}", scan->index, scan->error));
          files.frame(frames_csv_row(*scan, nullptr, matched, std::nullopt));
        } else {
          if (streamer) {
            // A finished map update goes in between two frames (with --map-update-wait, the
            // one asked for after the last frame, waited for).
            const auto wait0 = std::chrono::steady_clock::now();
            if (auto next = streamer->take(o->map_update_wait)) {
              map_wait_ms.push_back(static_cast<float>(ms_since(wait0)));
              localizer.update_map(std::move(next));
              ++map_swaps;
            } else if (streamer->take_published(o->map_update_wait)) {
              // The localizer takes the published version as this frame starts.
              map_wait_ms.push_back(static_cast<float>(ms_since(wait0)));
              ++map_swaps;
            }
          }
          // The odometry's prediction from the previous frame, where it covers both times.
          std::optional<std::pair<Eigen::Matrix4d, Eigen::Matrix<double, 6, 6>>> predicted;
          if (odometry && have_chain) predicted = odometry->predict(chain_pose, chain_time, chain_covariance, scan->entry.time);
          if (odometry && have_chain && !predicted && ++odometry_missing == 1) {
            progress.message(fmt::format("ndtcu: warning: frame {} at time {:.6f}: {} does not cover it and the frame "
                                         "before; predicting at constant velocity where it does not (counted in "
                                         "summary.json, odometry.frames_outside)",
                                         scan->index, scan->entry.time, odometry_source));
          }
          LocalizationResult r =
              predicted ? (filter_in_line ? localizer.localize(scan->cloud, scan->entry.time, predicted->first,
                                                               predicted->second)
                                          : localizer.localize_preprocessed(scan->cloud, scan->entry.time,
                                                                            predicted->first, predicted->second))
                        : (filter_in_line ? localizer.localize(scan->cloud, scan->entry.time)
                                          : localizer.localize_preprocessed(scan->cloud, scan->entry.time));
          if (predicted) ++odometry_used;
          // The next frame's odometry prediction starts from this frame: its pose and
          // covariance when it has one (valid or degenerate), else its prediction's.
          if (odometry && (localizer.initialized())) {
            const bool has_pose = r.status != FrameStatus::Lost;
            chain_pose = has_pose ? r.pose : r.prediction;
            chain_covariance = has_pose ? r.covariance : r.prediction_covariance;
            chain_time = scan->entry.time;
            have_chain = true;
          }
          if (filter_in_line) scan->preprocess_ms = r.preprocess_ms;
          r.points_in = scan->points_read;
          if (r.status == FrameStatus::Lost) {
            ++lost;
            progress.message(fmt::format("ndtcu: warning: frame {} ({}) lost after {} attempt{}: {}; not written to "
                                         "the trajectory",
                                         scan->index, fs::path(scan->entry.path).filename().string(), r.attempts,
                                         r.attempts == 1 ? "" : "s", lost_reason(r, ls)));
          } else if (r.status == FrameStatus::Recovered) {
            ++recovered;
          } else if (r.status == FrameStatus::Degenerate) {
            ++degenerate;
          }
          latency.push_back(static_cast<float>(scan->read_ms + scan->preprocess_ms + r.align_ms));
          align_ms.push_back(static_cast<float>(r.align_ms));
          iterations.push_back(static_cast<float>(r.alignment.iterations));
          points.push_back(static_cast<float>(r.points_used));
          std::optional<double> error_m;
          if (r.valid) {
            // The trajectory holds valid frames only (lost frames are in frames.csv, flagged).
            const AlignResult& a = r.alignment;
            if (a.covariance_valid) {
              sigma_x.push_back(static_cast<float>(std::sqrt(std::max(0.0, a.covariance_xy(0, 0)))));
              sigma_y.push_back(static_cast<float>(std::sqrt(std::max(0.0, a.covariance_xy(1, 1)))));
              covariance_ms.push_back(static_cast<float>(a.timings.covariance_ms));
            }
            StampedPose p;
            p.time = scan->entry.time;
            p.pose = Eigen::Isometry3d(r.pose);
            files.pose(p);
            ++localized;
            if (streamer) streamer->request(r.pose.topRightCorner<2, 1>());
            if (!reference.empty()) {
              if (matched) {
                // The frame's error against the reference pose it was matched to: the same
                // pair the ATE below is computed over.
                error_m = (p.pose.translation() - matched->pose.translation()).norm();
                estimate_pairs.emplace_back(estimate.size(), static_cast<std::size_t>(matched - reference.data()));
              }
              estimate.push_back(p);
            }
          }
          within += matched && error_m && *error_m <= kSuccessRadius;
          if (error_m && *error_m > kWrongRadius) {
            ++accepted_wrong;
            progress.message(fmt::format("ndtcu: warning: frame {} ({}) was accepted {:.2f} m from its reference pose",
                                         scan->index, fs::path(scan->entry.path).filename().string(), *error_m));
          }
          files.frame(frames_csv_row(*scan, &r, matched, error_m));
        }
        last_frame = scan->index;
        progress.update(++done, lost, skipped);
      }
    }
    const double loop_s = ms_since(loop_start) / 1000.0;
    progress.finish();
    files.commit();
    // Stopped by a signal with frames left (one that comes after the last frame stops
    // nothing: the run is complete).
    const int stopped_by = done < frame_count ? interrupt.received() : 0;
    if (stopped_by != 0) {
      progress.message(fmt::format("ndtcu: {} received: localize stopped after {} of {} frames{}; the results of "
                                   "those are in {}",
                                   InterruptWatch::name(stopped_by), done, frame_count,
                                   last_frame ? fmt::format(" (the last, frame {})", *last_frame) : std::string(),
                                   o->out));
    }

    const std::size_t aligned = done - skipped;
    nlohmann::json j;
    // The run: whether it ran to the end, and what it was run on (its settings below).
    j["status"] = stopped_by != 0 ? "interrupted" : "complete";
    j["last_frame"] = last_frame ? nlohmann::json(*last_frame) : nlohmann::json(nullptr);
    j["run"] = {{"command", "ndtcu localize"},
                {"pid", ::getpid()},
                {"started", folder.started()},
                {"ended", nullptr},
                {"signal", stopped_by != 0 ? nlohmann::json(InterruptWatch::name(stopped_by)) : nlohmann::json(nullptr)},
                {"frames_listed", frame_count},
                {"out", json_text(o->out)}};
    auto optional_text = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : json_text(v); };
    j["inputs"] = {{"map", json_text(o->map)},
                   {"scans", json_text(o->scans)},
                   {"topic", bag ? json_text(bag_topic) : nlohmann::json(nullptr)},
                   {"reference", optional_text(o->reference)},
                   {"init_from", optional_text(o->init_from)},
                   {"odometry", optional_text(o->odometry)},
                   {"odometry_topic", optional_text(o->odometry_topic)},
                   {"config", optional_text(o->ndt.config)}};
    j["frames"] = done;
    j["aligned"] = aligned;
    j["localized"] = localized;
    j["lost"] = lost;
    j["recovered"] = recovered;
    j["degenerate"] = degenerate;
    j["skipped"] = skipped;
    j["odometry"] = odometry ? nlohmann::json{{"file", json_text(o->odometry.empty() ? o->scans : o->odometry)},
                                              {"topic", o->odometry_topic.empty() ? nlohmann::json(nullptr)
                                                                                  : json_text(o->odometry_topic)},
                                              {"poses", odometry->size()},
                                              {"frames_predicted", odometry_used},
                                              {"frames_outside", odometry_missing}}
                             : nlohmann::json(nullptr);
    j["fps"] = loop_s > 0 ? static_cast<double>(aligned) / loop_s : 0.0;
    j["wall_s"] = loop_s;
    j["latency_ms"] = stats_json(latency);
    j["align_ms"] = stats_json(align_ms);
    j["iterations"] = stats_json(iterations);
    j["points_per_scan"] = stats_json(points);
    // sigma_x, sigma_y: square roots of the diagonal of covariance_xy (map frame).
    j["pose_covariance"] = {{"mode", to_string(s.pose_covariance)},
                            {"frames_with_covariance", sigma_x.size()},
                            {"sigma_x_m", stats_json(sigma_x)},
                            {"sigma_y_m", stats_json(sigma_y)},
                            {"time_ms", stats_json(covariance_ms)}};
    j["backend"] = localizer.backend();
    std::string device;
    nlohmann::json cuda_device = nullptr;  // the index (--device; the CLI's current device is 0)
    if (std::string(localizer.backend()) == "cuda") {
      const auto devices = cuda_devices();
      const std::size_t k = s.device < 0 ? 0 : static_cast<std::size_t>(s.device);
      device = k < devices.size() ? devices[k].name : fmt::format("CUDA device {}", k);
      cuda_device = k;
    } else {
      const int threads = s.threads > 0 ? s.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      device = fmt::format("CPU, {} threads", threads);
    }
    j["device"] = device;
    j["cuda_device"] = cuda_device;
    nlohmann::json tiles_json = nullptr;
    if (streamer) {
      // The counts of finished updates (one still running at the end is not counted).
      const TiledMapStreamStats ts = streamer->stats();
      nlohmann::json skipped_json = nlohmann::json::array();
      for (const std::string& f : ts.skipped) skipped_json.push_back(json_text(f));
      tiles_json = {{"listed", ts.listed},
                    {"loaded", ts.loaded},
                    {"radius_m", o->map_radius},
                    {"update_distance_m", o->map_update_distance},
                    {"memory_budget_mb", o->map_memory_mb},
                    {"updates", ts.updates},
                    {"swaps", map_swaps},
                    {"tiles_read", ts.tiles_read},
                    {"tiles_dropped", ts.tiles_dropped},
                    {"tiles_skipped", ts.skipped.size()},
                    {"skipped", skipped_json},
                    {"peak_loaded", ts.peak_loaded},
                    {"peak_mb", static_cast<double>(ts.peak_bytes) / 1e6},
                    {"published_on_device", streamer->tiled_map()->publishes_on_device()},
                    {"device_peak_mb", static_cast<double>(ts.peak_device_bytes) / 1e6},
                    {"read_ms", ts.read_ms},
                    {"join_ms", ts.join_ms},
                    {"wait_ms", stats_json(map_wait_ms)}};
    }
    j["map"] = {{"path", json_text(o->map)},
                {"points_read", map_points_read},
                {"points", map_points},
                {"voxels", map_voxels},
                {"load_ms", map_load_ms},
                {"tiles", tiles_json},
                {"build_ms", map_build_ms}};
    j["scans"] = json_text(o->scans);
    if (bag) j["topic"] = json_text(bag_topic);
    const Pose6 ip = matrix_to_pose(initial);
    j["initial_pose"] = {{"source", initial_source}, {"xyzrpy", {ip(0), ip(1), ip(2), ip(3), ip(4), ip(5)}}};
    // With --init-radius the pose is only the centre of the first frames' search.
    j["initial_pose"]["search"] = o->init_radius > 0.0 ? nlohmann::json{{"radius_m", o->init_radius},
                                                                      {"yaw_range_deg", o->init_yaw_range}}
                                                     : nlohmann::json(nullptr);
    j["settings"] = ndt_settings_json(o->ndt.preset, s, o->ndt.config);
    j["settings"].update({{"min_range", ls.min_range},
                     {"max_range", ls.max_range},
                     {"voxel", ls.voxel_leaf},
                     {"min_scan_points", ls.min_scan_points},
                     {"min_frame_points", ls.min_frame_points},
                     {"gpu_preprocess", ls.gpu_preprocess},
                     {"preprocess", localizer.preprocess_backend()},
                     {"map_voxel", o->map_voxel},
                     {"nvtl_threshold", ls.nvtl_threshold},
                     {"reject_max_iterations", ls.reject_max_iterations},
                     {"recovery_attempts", ls.recovery_attempts},
                     {"min_matched_ratio", ls.min_matched_ratio},
                     {"degeneracy_probe_m", ls.degeneracy_probe_m},
                     {"degeneracy_margin", ls.degeneracy_margin},
                     {"gate_chi2", ls.gate_chi2},
                     {"motion_sigma", {ls.motion_translation_sigma, ls.motion_rotation_sigma}},
                     {"prediction_prior", ls.prediction_prior},
                     {"regularization_scale_factor", ls.regularization_scale_factor},
                     {"odometry", o->odometry.empty() ? nlohmann::json(nullptr) : json_text(o->odometry)},
                     {"odometry_topic", o->odometry_topic.empty() ? nlohmann::json(nullptr) : json_text(o->odometry_topic)},
                     {"odometry_noise", o->odometry_noise},
                     {"recovery", to_string(ls.recovery)},
                     {"search_nvtl_ratio", ls.search_nvtl_ratio},
                     {"rotation_search_range_deg", ls.rotation_search_range_deg},
                     {"rotation_search_step_deg", ls.rotation_search_step_deg},
                     {"search_radius", ls.search_radius},
                     {"max_speed", ls.max_speed},
                     {"max_turn_rate_deg", ls.max_turn_rate_deg},
                     {"max_search_radius", ls.max_search_radius},
                     {"map_radius", o->map_radius},
                     {"map_update_distance", o->map_update_distance},
                     {"max_time_difference", o->max_time_difference},
                     {"init_max_time_difference", init_time_difference},
                     {"readers", o->readers},
                     {"gpu_filter_in_line", o->gpu_filter_in_line},
                     {"queue", o->queue}});

    std::string eval_text;
    if (!o->reference.empty()) {
      const AteStats ate = absolute_trajectory_error(estimate, reference, estimate_pairs);
      const auto rpe = relative_pose_error(estimate, reference, {1.0, 5.0, 10.0}, estimate_pairs);
      const std::size_t matched = matches.size() - unmatched_frames;
      j["reference"] = {{"path", json_text(o->reference)}, {"poses", reference.size()}, {"matched_scans", matched},
                        {"matching", matching}, {"out_of_order", reference_check.out_of_order},
                        {"unmatched_frames", unmatched_frames}};
      if (reference_check.out_of_order > 0) {
        eval_text += fmt::format("  WARNING     {} reference pose{} out of time order in {}; sorted by time\n",
                                 reference_check.out_of_order, reference_check.out_of_order == 1 ? "" : "s",
                                 o->reference);
      }
      if (unmatched_frames > 0) {
        eval_text += fmt::format("  WARNING     {} of {} frames matched no reference pose (matching by {}{}); they "
                                 "are not in the success rate, ATE or RPE\n",
                                 unmatched_frames, matches.size(), matching,
                                 matching == "time" ? fmt::format(", within {} s", o->max_time_difference) : "");
        progress.message(fmt::format("ndtcu: warning: {} of {} frames matched no pose of {} (matching by {}; counted "
                                     "in summary.json, reference.unmatched_frames)",
                                     unmatched_frames, matches.size(), o->reference, matching));
      }
      // Over every frame with a reference pose: the ATE below covers the localized ones only.
      j["success"] = {{"within_m", kSuccessRadius},
                      {"frames", judged},
                      {"succeeded", within},
                      {"accepted_wrong", accepted_wrong},
                      {"wrong_beyond_m", kWrongRadius},
                      {"rate", judged > 0 ? nlohmann::json(static_cast<double>(within) / static_cast<double>(judged))
                                          : nlohmann::json(nullptr)}};
      eval_text += judged == 0 ? std::string("  success     none: no frame has a reference pose\n")
                               : fmt::format("  success     {} of {} frames ({:.1f}%) within {} m of the reference "
                                             "(lost, degenerate and skipped frames count as failures); {} accepted "
                                             "more than {} m off\n",
                                             within, judged, 100.0 * static_cast<double>(within) / static_cast<double>(judged),
                                             kSuccessRadius, accepted_wrong, kWrongRadius);
      if (ate.pairs > 0) {
        j["ate"] = {{"pairs", ate.pairs}, {"rmse_m", ate.rmse_m}, {"mean_m", ate.mean_m},
                    {"median_m", ate.median_m}, {"max_m", ate.max_m}};
        eval_text += fmt::format("  ATE         RMSE {:.4f} m, mean {:.4f} m, median {:.4f} m, max {:.4f} m over {} localized poses "
                                 "(matched by {}, no alignment)\n",
                                 ate.rmse_m, ate.mean_m, ate.median_m, ate.max_m, ate.pairs, matching);
      } else {
        // No error to average: null, never a 0 that reads as a perfect run.
        const std::string why = estimate.empty() ? "no localized frame"
                                                 : fmt::format("no localized frame matches a reference pose (matching by {})", matching);
        j["ate"] = {{"pairs", 0}, {"rmse_m", nullptr}, {"mean_m", nullptr}, {"median_m", nullptr}, {"max_m", nullptr},
                    {"reason", why}};
        eval_text += fmt::format("  ATE         none: {}\n", why);
      }
      auto& jr = j["rpe"] = nlohmann::json::array();
      for (const auto& r : rpe) {
        const std::string why = estimate.empty() ? "no localized frame" : "path too short";
        jr.push_back({{"segment_m", r.segment_m}, {"pairs", r.pairs},
                      {"translation_percent", r.pairs > 0 ? nlohmann::json(r.translation_percent) : nlohmann::json(nullptr)},
                      {"rotation_deg_per_m", r.pairs > 0 ? nlohmann::json(r.rotation_deg_per_m) : nlohmann::json(nullptr)}});
        if (r.pairs == 0) jr.back()["reason"] = why;
        eval_text += r.pairs == 0 ? fmt::format("  RPE {:>4} m  no segment ({})\n", r.segment_m, why)
                                  : fmt::format("  RPE {:>4} m  {:.3f} % translation, {:.5f} deg/m rotation over {} "
                                                "segments\n",
                                                r.segment_m, r.translation_percent, r.rotation_deg_per_m, r.pairs);
      }
      if (ate.pairs == 0 && !estimate.empty()) {
        progress.message(fmt::format("ndtcu: warning: no localized scan matches a pose of {} (matching by {})",
                                     o->reference, matching));
      }
    }

    // Plots: run the script with a Python that has matplotlib: python3 on PATH, else the
    // system's (/usr/bin/python3, which scripts/setup.sh gives python3-matplotlib; a PATH
    // python3 from pyenv or a virtual environment often has no matplotlib). A missing
    // plotter never fails the localization, it only leaves the command to run. The script
    // reads summary.json for its titles, so the summary is written first and rewritten
    // with the plots' paths once they exist.
    const auto script = plot_script();
    std::vector<std::string> pythons_passed_over;
    // A run stopped by a signal (or one that came after its last frame) draws no plots:
    // whoever sent it wants the program to end.
    const bool signalled = interrupt.received() != 0;
    const std::optional<std::string> python =
        o->no_plot || signalled || !script ? std::nullopt
                              : find_python_with_matplotlib({"python3", "/usr/bin/python3"}, &pythons_passed_over);
    const std::string plot_cmd =
        fmt::format("{} {} {}", python ? shell_quote(*python) : "python3",
                    script ? shell_quote(script->string()) : "scripts/plot_localization.py", shell_quote(o->out));
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
    if (o->no_plot) {
      plot_note = "plots: run " + plot_cmd;
    } else if (signalled) {
      plot_note = fmt::format("plots: not drawn ({} received); run {}", InterruptWatch::name(interrupt.received()),
                              plot_cmd);
    } else if (!script) {
      plot_note = "plots: plot_localization.py not found (set NDTCU_SCRIPTS_DIR); run " + plot_cmd;
    } else if (!python) {
      plot_note = fmt::format("plots: python3 with matplotlib not available ({}); install python3-matplotlib and run {}",
                              fmt::join(pythons_passed_over, ", "), plot_cmd);
    } else if (std::system((plot_cmd + " 1>&2").c_str()) != 0) {
      plot_note = fmt::format("plots: the plot script failed ({}); run {}", *python, plot_cmd);
    } else {
      const std::string a = (out / "trajectory.png").string(), b = (out / "frames.png").string();
      j["files"]["plots"] = {json_text(a), json_text(b)};
      plot_note = fmt::format("plots: {} and {} (drawn by {})", a, b, *python);
      write_summary();
    }

    if (global.json) {
      std::cout << dump_json(j) << "\n";
    } else {
      std::string text = fmt::format("{} scans -> {} (map {}: {} points, {} voxels at {} m)\n", o->scans, o->out, o->map,
                                     map_points, map_voxels, s.resolution);
      text += fmt::format("  frames      {} localized, {} recovered, {} lost, {} degenerate, {} skipped of {}\n",
                          localized, recovered, lost, degenerate, skipped, done);
      if (!j["odometry"].is_null()) {
        text += fmt::format("  odometry    {} frames predicted from {}, {} outside it\n", odometry_used, odometry_source,
                            odometry_missing);
      }
      if (streamer) {
        const TiledMapStreamStats ts = streamer->stats();
        text += fmt::format("  tiles       {} of {} loaded at the end (at most {}, {:.1f} MB); {} updates, {} swapped in, "
                            "{} tiles read, {} dropped, {} skipped; frames waited {:.1f} ms at most\n",
                            ts.loaded, ts.listed, ts.peak_loaded, static_cast<double>(ts.peak_bytes) / 1e6, ts.updates,
                            map_swaps, ts.tiles_read, ts.tiles_dropped, ts.skipped.size(), largest(map_wait_ms));
      }
      text += fmt::format("  speed       {:.1f} fps ({} backend, {}); latency median {:.1f} ms, p95 {:.1f} ms, max "
                          "{:.1f} ms\n",
                          j["fps"].get<double>(), localizer.backend(), device, percentile(latency, 0.5),
                          percentile(latency, 0.95), largest(latency));
      text += fmt::format("  per scan    {:.0f} points after the filter ({}), {:.1f} iterations (medians)\n",
                          percentile(points, 0.5), localizer.preprocess_backend(), percentile(iterations, 0.5));
      if (s.pose_covariance != PoseCovariance::None && sigma_x.empty()) {
        text += fmt::format("  covariance  {}: no frame with a covariance\n", to_string(s.pose_covariance));
      } else if (s.pose_covariance != PoseCovariance::None) {
        text += fmt::format("  covariance  {} for {} frames: sigma x {:.4f} m, y {:.4f} m (medians), {:.2f} ms "
                            "(median)\n",
                            to_string(s.pose_covariance), sigma_x.size(), percentile(sigma_x, 0.5),
                            percentile(sigma_y, 0.5), percentile(covariance_ms, 0.5));
      }
      text += eval_text;
      if (stopped_by != 0) {
        text += fmt::format("  status      interrupted by {} after {} of {} frames\n", InterruptWatch::name(stopped_by),
                            done, frame_count);
      }
      text += fmt::format("  files       trajectory_tum.txt, trajectory_kitti.txt (localized frames only), frames.csv, "
                          "summary.json\n");
      text += "  " + plot_note + "\n";
      std::cout << printable_lines(text);  // paths and topic names: no terminal commands
    }
    return stopped_by != 0 ? InterruptWatch::exit_code(stopped_by) : 0;
  };
}

}  // namespace ndtcu::cli
