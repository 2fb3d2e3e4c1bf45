// `ndtcu eval covariance RUN_DIR --reference FILE`: how honest the pose covariance of a
// `ndtcu localize` run was, against reference poses (ndtcu/covariance_calibration.hpp).
#include "cli_common.hpp"
#include "commands.hpp"
#include "covariance_report.hpp"

#include <ndtcu/covariance_calibration.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/scan_sequence.hpp>
#include <ndtcu/text.hpp>
#include <ndtcu/trajectory.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <vector>

namespace ndtcu::cli {

namespace {

namespace fs = std::filesystem;

struct EvalCovarianceOptions {
  std::string run, reference, reference_format = "auto";
  double period = 0.1;
  std::optional<double> max_time_difference;
  CovarianceCalibrationOptions calibration;
  std::vector<double> reference_sigma = {0.0, 0.0};  // --reference-sigma P,A
};

// What the run's summary.json says about matching: the scans it listed (index matching
// when the reference has as many poses) and its --max-time-difference.
struct RunMatching {
  std::size_t frames_listed = 0;
  double max_time_difference = 0.01;
};

RunMatching read_run_matching(const fs::path& summary_path) {
  std::ifstream in(summary_path, std::ios::binary);
  if (!in) {
    throw IoError(summary_path.string(), "cannot be read (the summary `ndtcu localize --out` writes when a run ends)");
  }
  std::stringstream bytes;
  bytes << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(bytes.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw IoError(summary_path.string(), "not a JSON object");
  RunMatching m;
  const auto run = j.find("run");
  if (run == j.end() || !run->is_object() || !run->contains("frames_listed") ||
      !(*run)["frames_listed"].is_number_unsigned()) {
    throw IoError(summary_path.string(), "no run.frames_listed (a summary of `ndtcu localize`?)");
  }
  m.frames_listed = (*run)["frames_listed"].get<std::size_t>();
  const auto settings = j.find("settings");
  if (settings != j.end() && settings->is_object() && settings->contains("max_time_difference")) {
    const nlohmann::json& v = (*settings)["max_time_difference"];
    if (!v.is_number() || !(v.get<double>() >= 0.0)) {
      throw IoError(summary_path.string(), "settings.max_time_difference is not a number >= 0");
    }
    m.max_time_difference = v.get<double>();
  }
  return m;
}

int run_eval_covariance(const EvalCovarianceOptions& in, const GlobalOptions& global) {
  EvalCovarianceOptions o = in;
  o.calibration.reference_sigma_m = o.reference_sigma.at(0);
  o.calibration.reference_sigma_rad = o.reference_sigma.at(1);
  const fs::path dir(o.run);
  if (!fs::is_directory(dir)) throw IoError(o.run, "not a folder (the --out folder of `ndtcu localize`)");
  RunMatching matching = read_run_matching(dir / "summary.json");
  if (o.max_time_difference) matching.max_time_difference = *o.max_time_difference;
  Trajectory reference = read_trajectory(o.reference, trajectory_format_from_string(o.reference_format), o.period);
  const ReferenceCheck check = sort_reference(reference, o.reference);
  const bool by_index = reference.size() == matching.frames_listed;
  const LocalizeRunCalibration run = calibrate_localize_run((dir / "frames.csv").string(), reference,
                                                            matching.frames_listed, matching.max_time_difference,
                                                            o.calibration);
  const CovarianceCalibration& c = run.calibration;
  const std::string how = by_index ? "index" : "time";
  if (global.json) {
    nlohmann::json j = covariance_calibration_json(c);
    j["run"] = json_text(o.run);
    j["reference"] = {{"path", json_text(o.reference)},
                      {"poses", reference.size()},
                      {"out_of_order", check.out_of_order},
                      {"matching", how},
                      {"max_time_difference", matching.max_time_difference},
                      {"sigma_m", o.calibration.reference_sigma_m},
                      {"sigma_rad", o.calibration.reference_sigma_rad}};
    j["frames_listed"] = matching.frames_listed;
    j["frames_in_csv"] = run.frames;
    j["frames_with_pose"] = run.with_pose;
    j["frames_matched"] = run.matched;
    std::cout << dump_json(j) << "\n";
  } else {
    std::string text = fmt::format("{} against {}: {} frames, {} with a pose, {} of them matched a reference pose (by "
                                   "{}{}), {} reported a covariance\n",
                                   o.run, o.reference, run.frames, run.with_pose, run.matched, how,
                                   by_index ? "" : fmt::format(", within {} s", matching.max_time_difference), c.frames);
    if (o.calibration.reference_sigma_m > 0.0 || o.calibration.reference_sigma_rad > 0.0) {
      text += fmt::format("  the reference's own sigma, {} m and {} rad, is added to each covariance in the NEES and "
                          "the ellipses\n",
                          o.calibration.reference_sigma_m, o.calibration.reference_sigma_rad);
    }
    text += covariance_calibration_text(c, "  ");
    std::cout << printable_lines(text);
  }
  return 0;
}

}  // namespace

Command add_eval(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<EvalCovarianceOptions>();
  auto* cmd = app.add_subcommand("eval", "Evaluate the output of a run against reference poses");
  cmd->require_subcommand(1);
  auto* cov = cmd->add_subcommand(
      "covariance",
      "How honest a `ndtcu localize` run's pose covariance was: NEES, errors within the 95% and 99% ellipses, the "
      "most over-confident frames");
  cov->add_option("RUN_DIR", o->run, "the --out folder of `ndtcu localize` (frames.csv, summary.json)")->required();
  cov->add_option("--reference", o->reference, "reference poses (TUM or KITTI), matched as `localize --reference` does")
      ->required();
  cov->add_option("--reference-format", o->reference_format, "format of --reference")
      ->capture_default_str()
      ->check(CLI::IsMember({"tum", "kitti", "auto"}));
  cov->add_option("--period", o->period, "time between KITTI poses (s)")
      ->capture_default_str()
      ->check(positive_number());
  cov->add_option("--max-time-difference", o->max_time_difference,
                  "largest time gap (s) when matching frames to reference poses by time (default: the run's)")
      ->check(non_negative_number());
  cov->add_option("--far", o->calibration.far_m, "a frame more than this off in x-y (m) is far")
      ->capture_default_str()
      ->check(positive_number());
  cov->add_option("--small-sigma", o->calibration.small_sigma_m,
                  "a far frame reporting a sigma below this (m) along its error is counted as confident")
      ->capture_default_str()
      ->check(positive_number());
  cov->add_option("--reference-sigma", o->reference_sigma,
                  "the reference poses' own standard deviation, position P (m) and angles A (rad) as P,A: added to "
                  "each frame's covariance in the NEES and the ellipses, the error being the difference of two "
                  "estimates (0,0: exact truth, as the simulator's)")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str()
      ->check(non_negative_number());
  cov->add_option("--worst", o->calibration.worst, "how many of the most over-confident frames to list")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  return [o, &global]() { return run_eval_covariance(*o, global); };
}

}  // namespace ndtcu::cli
