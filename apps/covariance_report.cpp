#include "covariance_report.hpp"

#include <fmt/format.h>

namespace ndtcu::cli {

namespace {

nlohmann::json nees_json(const NeesStats& s) {
  const bool any = s.frames > 0;
  auto value = [any](double v) { return any ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"dof", s.dof},
          {"frames", s.frames},
          {"not_positive_definite", s.invalid},
          {"nees_mean", value(s.mean)},
          {"nees_mean_bounds95", any ? nlohmann::json{s.mean_low95, s.mean_high95} : nlohmann::json(nullptr)},
          {"nees_median", value(s.median)},
          {"nees_max", value(s.max)},
          {"within95", value(s.within95)},
          {"within99", value(s.within99)}};
}

// One line: the NEES mean against what an honest covariance gives, and the ellipses.
std::string nees_line(const NeesStats& s) {
  if (s.frames == 0) return "no frame with this covariance";
  std::string line = fmt::format("NEES mean {:.2f} (honest: {}, 95% bounds {:.2f}-{:.2f}), median {:.2f}, max {:.1f}; "
                                 "error within the 95% ellipse on {:.1f}%, 99% on {:.1f}% of {} frames",
                                 s.mean, s.dof, s.mean_low95, s.mean_high95, s.median, s.max, 100.0 * s.within95,
                                 100.0 * s.within99, s.frames);
  if (s.invalid > 0) line += fmt::format(" ({} not positive definite, left out)", s.invalid);
  return line;
}

}  // namespace

nlohmann::json covariance_calibration_json(const CovarianceCalibration& c) {
  nlohmann::json axis = nlohmann::json::object();
  for (int a = 0; a < 6; ++a) axis[kPoseEntryNames[a]] = nees_json(c.axis[a]);
  nlohmann::json worst = nlohmann::json::array();
  for (const OverConfidentFrame& f : c.worst) {
    worst.push_back({{"frame", f.frame},
                     {"time", f.time},
                     {"status", f.status},
                     {"error_xy_m", f.error_xy_m},
                     {"sigma_along_error_m", f.sigma_m},
                     {"nees_xy", f.nees_xy}});
  }
  return {{"frames", c.frames},
          {"xy", nees_json(c.xy)},
          {"pose", nees_json(c.pose)},
          {"axis", axis},
          {"far", {{"beyond_m", c.options.far_m},
                   {"frames", c.far},
                   {"sigma_below_m", c.options.small_sigma_m},
                   {"confident", c.far_confident}}},
          {"worst", worst}};
}

std::string covariance_calibration_text(const CovarianceCalibration& c, const std::string& indent) {
  if (c.frames == 0) return indent + "calibration none: no frame with a reference pose reported a covariance\n";
  std::string text = indent + "calibration x-y: " + nees_line(c.xy) + "\n";
  text += indent + "            6-D: " + nees_line(c.pose) + "\n";
  std::string axes;
  for (int a = 0; a < 6; ++a) {
    if (c.axis[a].frames == 0) continue;
    axes += fmt::format("{}{} {:.2f}", axes.empty() ? "" : ", ", kPoseEntryNames[a], c.axis[a].mean);
  }
  if (!axes.empty()) text += indent + "            NEES per entry (honest: 1): " + axes + "\n";
  text += indent + fmt::format("            {} frames more than {} m off in x-y, {} of them reporting a sigma below {} m "
                               "along their error\n",
                               c.far, c.options.far_m, c.far_confident, c.options.small_sigma_m);
  for (const OverConfidentFrame& f : c.worst) {
    text += indent + fmt::format("            over-confident: frame {} ({}): {:.3f} m off in x-y, sigma {:.4f} m along "
                                 "the error ({:.1f}x), x-y NEES {:.1f}\n",
                                 f.frame, f.status, f.error_xy_m, f.sigma_m,
                                 f.sigma_m > 0.0 ? f.error_xy_m / f.sigma_m : 0.0, f.nees_xy);
  }
  return text;
}

}  // namespace ndtcu::cli
