// `ndtcu align TARGET SOURCE`: one NDT alignment on files, as a table or one JSON object;
// with --guesses, one alignment per hypothesis of a guess file, run as one batch.
#include "cli_common.hpp"
#include "commands.hpp"
#include "guess_file.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

namespace ndtcu::cli {

namespace {

struct AlignOptions {
  std::string target, source, output, init_matrix, guesses;
  std::string target_origin = "auto", source_origin = "auto";  // --origin, --source-origin
  std::vector<double> init;
  std::vector<double> prior;                // --prior
  std::vector<std::string> prior_sigma;     // --prior-sigma (numbers or "inf")
  std::optional<double> regularization;    // --regularization
  double target_voxel = 0.0, source_voxel = 0.0;
  bool best = false;  // --guesses: print only the best hypothesis
  NdtOptions ndt;
};

// What a printed result says besides the AlignResult itself: the inputs, the settings and
// the time spent before the alignment.
struct AlignContext {
  std::string target, source, preset, config;
  AlignSettings settings;
  ExecutionOptions execution;
  std::size_t source_points_read = 0, target_points = 0, target_points_read = 0;
  double map_ms = 0.0, load_ms = 0.0;
};

// A 4x4 (16 numbers) or 3x4 (12 numbers, KITTI pose line) row-major matrix.
Eigen::Matrix4d read_matrix(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw IoError(path, "cannot open initial-guess matrix");
  std::ostringstream bytes;
  bytes << file.rdbuf();
  std::istringstream in(std::string(without_bom(bytes.str())));  // past a byte-order mark
  std::vector<double> v;
  std::string token;
  while (in >> token) {
    try {
      std::size_t used = 0;
      v.push_back(std::stod(token, &used));
      if (used != token.size()) throw std::invalid_argument(token);
    } catch (const std::exception&) {
      throw IoError(path, "not a number: '" + token + "'");
    }
  }
  if (v.size() != 16 && v.size() != 12) {
    throw IoError(path, fmt::format("expected 16 (4x4) or 12 (3x4) numbers, found {}", v.size()));
  }
  Eigen::Matrix4d m = Eigen::Matrix4d::Identity();
  for (int r = 0; r < static_cast<int>(v.size()) / 4; ++r) {
    for (int c = 0; c < 4; ++c) m(r, c) = v[static_cast<std::size_t>(4 * r + c)];
  }
  return m;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One alignment's JSON object: what `ndtcu --json align` prints, and each entry of the
// `results` list with --guesses.
nlohmann::json result_json(const AlignResult& r, const AlignContext& c) {
  nlohmann::json j = align_result_json(r);
  j["source_points_read"] = c.source_points_read;
  j["target_points"] = c.target_points;
  j["target_points_read"] = c.target_points_read;
  if (r.backend == Backend::Cuda) {
    j["gpu"] = {{"gpu_ms", r.timings.gpu_ms},
                {"upload_ms", r.timings.upload_ms},
                {"bytes_up", r.timings.bytes_up},
                {"bytes_down", r.timings.bytes_down},
                {"setup_bytes_up", r.timings.setup_bytes_up},
                {"newton_loop", wants_device_loop(c.settings, c.execution) ? to_string(c.execution.gpu_loop) : "host"}};
  }
  j["map_build_ms"] = c.map_ms;
  j["load_ms"] = c.load_ms;
  j["settings"] = ndt_settings_json(c.preset, c.settings, c.execution, c.config);
  return j;
}

// The first lines of the text output: which clouds, how many points and voxels, which
// settings.
std::string inputs_text(const AlignContext& c, std::size_t source_points, std::size_t target_voxels) {
  const AlignSettings& s = c.settings;
  std::string out = fmt::format("{} -> {}\n", printable(c.source), printable(c.target));
  out += fmt::format("  points      source {} (of {} read), target {} (of {} read), {} voxels\n", source_points,
                     c.source_points_read, c.target_points, c.target_points_read, target_voxels);
  out += fmt::format("  settings    preset {}{}, resolution {} m, {} search, {} step {}, epsilon {}, {} covariance\n",
                     c.preset, c.config.empty() ? "" : ", --config " + printable(c.config), s.resolution, to_string(s.search),
                     to_string(s.line_search), s.step_size, s.epsilon, to_string(s.covariance));
  if (s.prior.active()) {
    const PosePrior& p = s.prior;
    std::string sigma;
    for (int i = 0; i < 6; ++i) {
      const double info = p.information(i, i);
      sigma += fmt::format("{}{}", i ? "," : "", info > 0.0 ? fmt::format("{:.4g}", 1.0 / std::sqrt(info)) : "inf");
    }
    out += fmt::format("  prior       x {:.4f}  y {:.4f}  z {:.4f}  roll {:.5f}  pitch {:.5f}  yaw {:.5f}, sigma {}{}\n",
                       p.pose(0), p.pose(1), p.pose(2), p.pose(3), p.pose(4), p.pose(5), sigma,
                       p.regularization_scale_factor > 0.0
                           ? fmt::format(", regularization {}", p.regularization_scale_factor)
                           : std::string());
  }
  return out;
}

// One alignment as text: what `ndtcu align` prints.
std::string result_text(const AlignResult& r, const AlignContext& c) {
  std::string out = inputs_text(c, r.source_points, r.target_voxels);
  out += fmt::format("  result      {} after {} iterations ({})\n", r.converged ? "converged" : "not converged",
                     r.iterations, to_string(r.reason));
  out += fmt::format("  pose        x {:.4f}  y {:.4f}  z {:.4f}  roll {:.5f}  pitch {:.5f}  yaw {:.5f}\n", r.pose(0),
                     r.pose(1), r.pose(2), r.pose(3), r.pose(4), r.pose(5));
  out += fmt::format("  fitness     score {:.3f}, TP {:.4f}, NVTL {:.4f}, {} correspondences, oscillation {}\n",
                     r.score, r.tp, r.nvtl, r.correspondences, r.oscillation_count);
  out += "  directions  " + localizability_text(r.localizability) + "\n";
  out += fmt::format("  time        align {:.2f} ms ({:.2f} ms/iteration, {} evaluations, backend {}), map {:.1f} ms, "
                     "load {:.1f} ms\n",
                     r.timings.total_ms, r.timings.per_iteration_ms, r.timings.evaluations, to_string(r.backend), c.map_ms,
                     c.load_ms);
  if (r.backend == Backend::Cuda) {
    out += fmt::format("  gpu         {:.3f} ms kernels ({:.1f} us/evaluation), upload {:.3f} ms, {} B up and {} B down "
                       "per evaluation\n",
                       r.timings.gpu_ms, r.timings.evaluations ? 1e3 * r.timings.gpu_ms / r.timings.evaluations : 0.0,
                       r.timings.upload_ms, r.timings.evaluations ? r.timings.bytes_up / r.timings.evaluations : 0,
                       r.timings.evaluations ? r.timings.bytes_down / r.timings.evaluations : 0);
  }
  if (r.covariance_mode != PoseCovariance::None) {
    if (r.covariance_valid) {
      const auto sd = [&r](int i) { return std::sqrt(std::max(0.0, r.covariance(i, i))); };
      constexpr double kDeg = 180.0 / 3.14159265358979323846;
      out += fmt::format("  covariance  {} ({:.2f} ms): sigma x {:.4f} m, y {:.4f} m, z {:.4f} m, roll {:.4f} deg, "
                         "pitch {:.4f} deg, yaw {:.4f} deg\n",
                         to_string(r.covariance_mode), r.timings.covariance_ms, sd(0), sd(1), sd(2), sd(3) * kDeg,
                         sd(4) * kDeg, sd(5) * kDeg);
      for (int row = 0; row < 6; ++row) {
        out += "   ";
        for (int col = 0; col < 6; ++col) out += fmt::format(" {:13.6e}", r.covariance(row, col));
        out += "\n";
      }
      out += fmt::format("  cov x-y     {:13.6e} {:13.6e} / {:13.6e} {:13.6e} (m^2, as Autoware's estimator)\n",
                         r.covariance_xy(0, 0), r.covariance_xy(0, 1), r.covariance_xy(1, 0), r.covariance_xy(1, 1));
    } else {
      const bool laplace = r.covariance_mode == PoseCovariance::Laplace || r.covariance_mode == PoseCovariance::Calibrated;
      const char* why = laplace ? "-H is not positive definite at this pose"
                        : r.covariance_mode == PoseCovariance::Sandwich
                            ? "the points' -H is not positive definite at this pose, or the map is only on the GPU"
                            : "not finite";
      out += fmt::format("  covariance  {}: not available ({})\n", to_string(r.covariance_mode), why);
    }
  }
  out += "  transform\n";
  for (int row = 0; row < 4; ++row) {
    out += fmt::format("    {:12.8f} {:12.8f} {:12.8f} {:12.6f}\n", r.transform(row, 0), r.transform(row, 1),
                       r.transform(row, 2), r.transform(row, 3));
  }
  return out;
}

// Writes `source` moved by `transform` into the target's frame, relative to the target's
// origin (the frame `target_origin` names).
void write_aligned(const std::string& path, const PointCloud& source, const Eigen::Vector3d& target_origin,
                   const Eigen::Matrix4d& transform) {
  PointCloud out;
  out.origin = target_origin;
  out.intensity = source.intensity;
  const Eigen::Matrix3d rot = transform.topLeftCorner<3, 3>();
  const Eigen::Vector3d shift = transform.topRightCorner<3, 1>() - target_origin;
  out.points.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) out.points.push_back((rot * source.world(i) + shift).cast<float>());
  write_point_cloud(path, out);
}

// The clouds of an align command, read and filtered, and what the output says about them
// (map_ms is filled in once the map is built).
struct AlignInputs {
  PointCloud target, source;
  AlignContext context;
};

AlignInputs load_inputs(const AlignOptions& o, const AlignSettings& s, const ExecutionOptions& e) {
  const auto t0 = std::chrono::steady_clock::now();
  AlignInputs in;
  in.target = read_point_cloud(o.target, read_options_for_origin(o.target_origin));
  in.source = read_point_cloud(o.source, read_options_for_origin(o.source_origin, "--source-origin"));
  const std::size_t target_points_read = in.target.size(), source_points_read = in.source.size();
  if (o.target_voxel > 0) in.target = voxel_downsample(in.target, o.target_voxel);
  if (o.source_voxel > 0) in.source = voxel_downsample(in.source, o.source_voxel);
  in.context.target = o.target;
  in.context.source = o.source;
  in.context.preset = o.ndt.preset;
  in.context.config = o.ndt.config;
  in.context.settings = s;
  in.context.execution = e;
  in.context.source_points_read = source_points_read;
  in.context.target_points = in.target.size();
  in.context.target_points_read = target_points_read;
  in.context.load_ms = ms_since(t0);
  return in;
}

// The hypothesis of highest NVTL; ties go to the lowest index, and a NaN NVTL never wins
// over a number.
std::size_t best_hypothesis(const std::vector<AlignResult>& results) {
  std::size_t best = 0;
  for (std::size_t k = 1; k < results.size(); ++k) {
    if (results[k].nvtl > results[best].nvtl || (std::isnan(results[best].nvtl) && !std::isnan(results[k].nvtl))) {
      best = k;
    }
  }
  return best;
}

// The --guesses table: the inputs, the batch's wall time and one row per hypothesis, the
// best marked with '*'.
std::string batch_text(const std::vector<AlignResult>& results, std::size_t best, double batch_ms,
                       const std::string& guesses_path, const AlignContext& c) {
  const AlignResult& first = results.front();
  std::string out = inputs_text(c, first.source_points, first.target_voxels);
  out += fmt::format("  batch       {} hypotheses from {} in one batch: {:.2f} ms ({:.1f} aligns/s), backend {}, map "
                     "{:.1f} ms, load {:.1f} ms\n",
                     results.size(), printable(guesses_path), batch_ms, batch_ms > 0 ? 1e3 * results.size() / batch_ms : 0.0,
                     to_string(first.backend), c.map_ms, c.load_ms);
  out += fmt::format("  {:>6} {:>10} {:>10} {:>9} {:>8} {:>8} {:>8}  {:<9} {:<18} {:>4} {:>10} {:>7} {:>7}\n", "#", "x",
                     "y", "z", "roll", "pitch", "yaw", "converged", "reason", "iter", "score", "TP", "NVTL");
  for (std::size_t k = 0; k < results.size(); ++k) {
    const AlignResult& r = results[k];
    out += fmt::format("  {} {:>4} {:>10.4f} {:>10.4f} {:>9.4f} {:>8.5f} {:>8.5f} {:>8.5f}  {:<9} {:<18} {:>4} {:>10.3f} "
                       "{:>7.4f} {:>7.4f}\n",
                       k == best ? '*' : ' ', k, r.pose(0), r.pose(1), r.pose(2), r.pose(3), r.pose(4), r.pose(5),
                       r.converged ? "yes" : "no", to_string(r.reason), r.iterations, r.score, r.tp, r.nvtl);
  }
  out += fmt::format("  best        * hypothesis {}: highest NVTL {:.4f} (ties go to the lowest index)\n", best,
                     results[best].nvtl);
  return out;
}

// --guesses: every hypothesis of the file aligned in one align_batch call. Prints the
// table (or {"results": [...], "best": i, "time_ms": t}), or with --best only the best
// hypothesis as a single align prints it; --output writes the source moved by the best.
int align_guesses(const AlignOptions& o, const AlignSettings& s, const ExecutionOptions& e, bool json) {
  const std::vector<Pose6> guesses = read_guesses(o.guesses);  // a bad file fails before the clouds load
  AlignInputs in = load_inputs(o, s, e);
  Aligner aligner(s, e);
  auto t0 = std::chrono::steady_clock::now();
  aligner.set_target(in.target);
  in.context.map_ms = ms_since(t0);

  BatchOptions batch;
  // Traces for the JSON, which prints them, and for --best, whose text prints the
  // oscillation count the library derives from them.
  batch.trace = json || o.best;
  t0 = std::chrono::steady_clock::now();
  std::vector<AlignResult> results = aligner.align_batch(in.source, guesses, batch);
  attach_pose_covariance(aligner, in.source, results);  // --pose-covariance
  const double batch_ms = ms_since(t0);
  const std::size_t best = best_hypothesis(results);

  if (!o.output.empty()) write_aligned(o.output, in.source, in.target.origin, results[best].transform);
  if (o.best) {
    if (json) {
      std::cout << dump_json(result_json(results[best], in.context)) << "\n";
    } else {
      std::cout << fmt::format("hypothesis {} of {} (highest NVTL), from {}; batch {:.2f} ms\n", best, results.size(),
                               printable(o.guesses), batch_ms)
                << result_text(results[best], in.context);
    }
  } else if (json) {
    nlohmann::json j;
    auto& list = j["results"] = nlohmann::json::array();
    for (const AlignResult& r : results) list.push_back(result_json(r, in.context));
    j["best"] = best;
    j["time_ms"] = batch_ms;
    std::cout << dump_json(j) << "\n";
  } else {
    std::cout << batch_text(results, best, batch_ms, o.guesses, in.context);
  }
  return 0;
}

// The prior of --prior, --prior-sigma and the regularization (--regularization or the
// file's); none without --prior. A regularization asked for on the command line without a
// pose is an error, one from the file a warning.
PosePrior align_prior(const AlignOptions& o, const AutowareParams* config) {
  PosePrior p;
  p.regularization_scale_factor = regularization_scale(o.regularization, config);
  if (o.prior.empty()) {
    if (o.regularization && *o.regularization > 0.0) {
      throw Error("--regularization needs a pose to regularize towards: give it with --prior x,y,z,roll,pitch,yaw");
    }
    if (p.regularization_scale_factor > 0.0) {
      std::cerr << fmt::format("ndtcu: warning: {}: ndt.regularization is enabled, but align has no regularization "
                               "pose (give one with --prior); aligning without it\n",
                               printable(config->path));
    }
    return PosePrior{};
  }
  for (int i = 0; i < 6; ++i) p.pose(i) = o.prior[static_cast<std::size_t>(i)];
  if (!o.prior_sigma.empty()) p.information = information_from_sigmas(o.prior_sigma, "--prior-sigma");
  if (!p.active()) {
    if (!o.prior_sigma.empty()) {
      throw Error("--prior-sigma: every standard deviation is inf, so the prior holds no direction; give a finite one "
                  "for at least one direction, or a regularization scale factor (--regularization, or "
                  "ndt.regularization in --config)");
    }
    throw Error("--prior needs --prior-sigma (its standard deviations) or a regularization scale factor "
                "(--regularization, or ndt.regularization in --config)");
  }
  validate(p);
  return p;
}

}  // namespace

Command add_align(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<AlignOptions>();
  auto* cmd = app.add_subcommand("align", "Align SOURCE to TARGET with NDT (Autoware's settings unless told otherwise)");
  cmd->add_option("TARGET", o->target, "target (map) point cloud: .pcd, .ply or .bin")->required();
  cmd->add_option("SOURCE", o->source, "source (scan) point cloud")->required();
  add_origin_option(cmd, o->target_origin, "TARGET");
  add_origin_option(cmd, o->source_origin, "SOURCE", "--source-origin",
                    "a scan in its sensor frame is best kept at auto (zero)");
  auto* init = cmd->add_option("--init", o->init, "initial guess x,y,z,roll,pitch,yaw (m, rad)")
                   ->delimiter(',')
                   ->expected(6);
  auto* init_matrix =
      cmd->add_option("--init-matrix", o->init_matrix, "initial guess as a 4x4 or 3x4 row-major matrix file")
          ->excludes(init);
  cmd->add_option("--target-voxel", o->target_voxel, "voxel-filter the target first (leaf, m; 0 = no)")
      ->check(non_negative_number());
  cmd->add_option("--source-voxel", o->source_voxel, "voxel-filter the source first (leaf, m; 0 = no)")
      ->check(non_negative_number());
  add_ndt_options(cmd, o->ndt);
  add_config_option(cmd, o->ndt, ", ndt.regularization (its pose: --prior)");
  auto* prior = cmd->add_option("--prior", o->prior,
                                "a pose prior x,y,z,roll,pitch,yaw (m, rad) added to the NDT objective: the result "
                                "follows it where the scan does not pin the pose; with --prior-sigma and/or "
                                "--regularization")
                    ->delimiter(',')
                    ->expected(6);
  cmd->add_option("--prior-sigma", o->prior_sigma,
                  "the prior's standard deviations x,y,z,roll,pitch,yaw (m, rad; inf: none in that direction)")
      ->delimiter(',')
      ->expected(6)
      ->needs(prior);
  add_regularization_option(cmd, o->regularization, "--prior");
  cmd->add_option("--output", o->output,
                  "write the source, aligned into the target's frame (.pcd or .bin); with --guesses by the best");
  auto* guesses =
      cmd->add_option("--guesses", o->guesses,
                      "align from every guess of FILE as one batch: one per line, x,y,z,roll,pitch,yaw (m, rad) or "
                      "a TUM line t x y z qx qy qz qw")
          ->excludes(init)
          ->excludes(init_matrix);
  cmd->add_flag("--best", o->best, "with --guesses: print only the hypothesis of highest NVTL, as a single align")
      ->needs(guesses);

  return [o, &global]() {
    const std::optional<AutowareParams> config = load_autoware_params(o->ndt.config);
    AlignSettings s = ndt_settings(o->ndt, config ? &*config : nullptr);
    const ExecutionOptions e = execution_options(o->ndt, config ? &*config : nullptr);
    s.prior = align_prior(*o, config ? &*config : nullptr);
    if (!o->guesses.empty()) return align_guesses(*o, s, e, global.json);

    Pose6 guess = Pose6::Zero();
    if (!o->init.empty()) {
      for (int i = 0; i < 6; ++i) guess(i) = o->init[static_cast<std::size_t>(i)];
    } else if (!o->init_matrix.empty()) {
      guess = matrix_to_pose(read_matrix(o->init_matrix));
    }

    AlignInputs in = load_inputs(*o, s, e);
    Aligner aligner(s, e);
    const auto t0 = std::chrono::steady_clock::now();
    aligner.set_target(in.target);
    in.context.map_ms = ms_since(t0);
    AlignResult r = aligner.align_from_pose(in.source, guess);
    attach_pose_covariance(aligner, in.source, r);  // --pose-covariance

    if (!o->output.empty()) write_aligned(o->output, in.source, in.target.origin, r.transform);
    if (global.json) {
      std::cout << dump_json(result_json(r, in.context)) << "\n";
    } else {
      std::cout << result_text(r, in.context);
    }
    return 0;
  };
}

}  // namespace ndtcu::cli
