// `ndtcu localize`: the row of frames.csv for one frame.
#include "localize/frame_files.hpp"

#include <ndtcu/covariance_calibration.hpp>
#include <ndtcu/localizability.hpp>
#include <ndtcu/pose_covariance.hpp>

#include <fmt/format.h>

#include <cmath>
#include <string_view>

namespace ndtcu::cli::localize {

namespace {

namespace fs = std::filesystem;

std::string csv_number(double v) { return fmt::format("{:.6f}", v); }

// A text field of frames.csv (a scan's file name, which may hold any byte but '/'): a name
// starting with =, +, -, @, a tab or CR gets an apostrophe before it, so that a spreadsheet
// shows it as text instead of running it as a formula (OWASP, "CSV Injection"); then a
// field holding a comma, a double quote, CR or LF is quoted, its quotes doubled (RFC 4180).
// A name `000001,"x",=1+2.pcd` made a row of 58 fields, and a newline split a row in two.
std::string csv_text(std::string text) {
  if (!text.empty() && std::string_view("=+-@\t\r").find(text.front()) != std::string_view::npos) {
    text.insert(text.begin(), '\'');
  }
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + '"';
}

// Whether the frame ran an alignment (not one lost before any: too few points).
bool ran_alignment(const LocalizationResult& r) { return r.decided_by != FrameCheck::TooFewPoints; }

}  // namespace

std::string covariance6_header() {
  std::string header;
  for (const std::string& name : covariance6_columns()) header += (header.empty() ? "" : ",") + name;
  return header;
}

std::string frames_csv_row(const PreparedScan& s, const LocalizationResult* result, const StampedPose* reference,
                           std::optional<double> error_m) {
  std::string row = fmt::format("{},{:.6f},{},", s.index, s.entry.time, csv_text(fs::path(s.entry.path).filename().string()));
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
  // The x-y covariance of the frame's pose (m^2, map frame): the x-y block of its
  // calibrated covariance (LocalizationResult::covariance); empty for skipped, lost and
  // degenerate frames and where there is none.
  const bool has_covariance_xy = result && (result->valid || result->status == FrameStatus::Uncertain) &&
                                 result->alignment.covariance_valid;
  if (has_covariance_xy) {
    const Eigen::Matrix2d c = result->covariance.topLeftCorner<2, 2>();
    row += fmt::format(",{:.6e},{:.6e},{:.6e}", c(0, 0), c(0, 1), c(1, 1));
  } else {
    row += ",,,";
  }
  // How the frame was recovered: the stage that gave (or last tried) the pose, the
  // hypotheses its searches aligned and screened, and the last search's best rival.
  if (result) {
    const auto& r = *result;
    row += fmt::format(",{},{},{},{},{}", to_string(r.stage), r.hypotheses, r.screened,
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
    row += fmt::format(",{},{}", to_string(result->decided_by),
                       std::isnan(result->mahalanobis2) ? std::string() : fmt::format("{:.4f}", result->mahalanobis2));
  } else {
    row += ",,";
  }
  // Whether the pose is the refinement's (--refine-ratio), and how far it moved the
  // accepted alignment's position (m; empty when none ran).
  if (result) {
    row += fmt::format(",{},{}", result->refined ? 1 : 0,
                       std::isnan(result->refinement_m) ? std::string() : fmt::format("{:.4f}", result->refinement_m));
  } else {
    row += ",,";
  }
  // The frame's full pose covariance (LocalizationResult::covariance: [x y z roll pitch yaw],
  // m and rad, map frame), its 21 upper-triangle entries row by row (kCovariance6Columns):
  // the accepted alignment's for a valid frame, the remapped one for a degenerate frame;
  // empty for skipped and lost frames and where there is none. `ndtcu eval covariance`
  // reads them.
  const bool has_covariance6 = result && result->status != FrameStatus::Lost &&
                               (result->valid ? result->alignment.covariance_valid : !result->covariance.isZero());
  for (int i = 0; i < 6; ++i) {
    for (int j = i; j < 6; ++j) {
      row += has_covariance6 ? fmt::format(",{:.6e}", result->covariance(i, j)) : std::string(",");
    }
  }
  // The points that found a voxel at the accepted alignment (the sparsity term's N), the
  // largest position standard deviation of the frame's covariance (m; the bound's
  // LocalizerSettings::max_position_sigma) and the term of the calibrated covariance that
  // dominated it (none, laplace, sparsity, residual, disagreement); empty where no
  // alignment or no covariance.
  if (result && ran_alignment(*result)) {
    row += fmt::format(",{}", result->alignment.matched_points);
  } else {
    row += ",";
  }
  if (has_covariance6) {
    row += fmt::format(",{:.6f},{}", max_position_sigma(result->covariance), to_string(result->covariance_term));
  } else {
    row += ",,";
  }
  // Whether the scan's points were moved to its reference time (--deskew); empty when skipped.
  row += result ? (result->deskewed ? ",1" : ",0") : ",";
  // Where its motion came from (off when not de-skewed), and with --deskew imu whether the
  // IMU samples covered the sweep (covered) or why the frame fell back (gap, missing).
  row += result ? fmt::format(",{},{}", to_string(result->deskew_motion), to_string(result->imu_coverage)) : ",,";
  // Its re-de-skew passes after the first alignment (--deskew-passes); empty when skipped.
  row += result ? fmt::format(",{}", result->deskew_passes) : ",";
  return row + "\n";
}

}  // namespace ndtcu::cli::localize
