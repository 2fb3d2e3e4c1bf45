#pragma once
// `ndtcu localize`: what a run reports: progress on stderr while it runs, then the summary
// (summary.json, the evaluation against the reference, the plots, the text on stdout).
#include "commands.hpp"
#include "localize/inputs.hpp"
#include "localize/options.hpp"
#include "output_folder.hpp"

#include <ndtcu/localizer.hpp>
#include <ndtcu/trajectory.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ndtcu::cli::localize {

// The per-frame numbers the summary reports (latencies, iterations, points, sigmas) are
// kept as floats, 4 bytes a frame each: their 7 significant digits are more than the
// summary prints, and a run of hours keeps only these and no per-frame record.
using Samples = std::vector<float>;

/// Percentile by nearest rank (p in [0, 1]) of a copy of `v`; 0 for an empty one.
double percentile(Samples v, double p);
/// The largest of `v`; 0 for an empty one.
double largest(const Samples& v);
/// median, p95, max and mean of `v`.
nlohmann::json stats_json(const Samples& v);

// A frame succeeds when its pose lies within this of its reference pose (m).
constexpr double kSuccessRadius = 0.10;
// A valid frame farther than this from its reference pose is a wrong pose accepted (m):
// the worst outcome, counted apart.
constexpr double kWrongRadius = 0.30;

// Progress on stderr: a bar redrawn in place on a terminal, a plain line now and then otherwise.
class Progress {
 public:
  Progress(std::size_t total, bool enabled);

  void update(std::size_t done, std::size_t lost, std::size_t skipped);

  // A message on its own line (clearing the bar first; it is redrawn on the next update).
  void message(const std::string& text);

  void finish();

 private:
  std::size_t total_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_;
  double last_draw_ = -1.0;
  bool drawn_ = false;
};

// Why a frame was lost, from its best attempt: the check that failed, in its own words.
std::string lost_reason(const LocalizationResult& r, const LocalizerSettings& ls);

/// What the frame loop counted, and what it keeps for the summary.
struct FrameTally {
  std::size_t frame_count = 0;  // the scans listed
  std::size_t done = 0, localized = 0, lost = 0, recovered = 0, skipped = 0, degenerate = 0, uncertain = 0;
  std::size_t refined = 0;  // valid frames whose pose is the refinement's
  std::size_t deskewed = 0;  // frames whose scan was de-skewed (--deskew)
  // The success rate: frames with a reference pose, and those of them localized within
  // kSuccessRadius of it (lost and skipped frames count as failures).
  std::size_t judged = 0, within = 0, accepted_wrong = 0;
  std::size_t odometry_used = 0, odometry_missing = 0;
  std::size_t odometry_sweeps = 0;  // frames given the odometry's motion over their sweep
  std::size_t odometry_sweep_parts = 0;  // ... of them in parts (odometry poses inside the sweep)
  std::size_t map_swaps = 0;
  // Per swap: how long the frame waited for it (0 unless --map-update-wait or the map in
  // hand did not cover the frame's scan).
  Samples map_wait_ms;
  std::size_t map_coverage_waits = 0;  // frames that waited because the map in hand did not cover their scan
  Samples latency, align_ms, iterations, points, sigma_x, sigma_y, covariance_ms;
  Trajectory estimate;  // the localized poses, for ATE and RPE
  // (estimate index, reference index): each frame's own match, so that the ATE and RPE
  // cover exactly the frames that have an error.
  std::vector<std::pair<std::size_t, std::size_t>> estimate_pairs;
  std::optional<std::size_t> last_frame;
  double loop_s = 0.0;  // the frame loop's wall time
  int stopped_by = 0;   // the signal that stopped the run with frames left, 0 when none
};

/// Everything the summary of a finished (or stopped) run reads.
struct LocalizeRun {
  const LocalizeOptions& options;
  const LocalizeSettings& settings;
  const LocalizeInputs& inputs;
  const LocalizeMap& map;
  const Localizer& localizer;
  const FrameTally& frames;
  const OutputFolder& folder;
  const InterruptWatch& interrupt;
  std::chrono::steady_clock::time_point start;
};

/// Writes summary.json, draws the plots (unless --no-plot) and prints the summary (text, or
/// the JSON with --json); returns the command's exit code.
int report_run(const LocalizeRun& run, Progress& progress, const GlobalOptions& global);

}  // namespace ndtcu::cli::localize
