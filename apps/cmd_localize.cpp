// `ndtcu localize --map MAP --scans DIR_OR_LIST_OR_BAG`: scan-to-map localization over a sequence,
// with per-frame records, a summary, evaluation against reference poses, and plots.
// The pieces are in localize/: options (the option definitions and the settings they make),
// inputs (scans, reference, odometry, first pose, map), runner (the frame loop), frame_files
// (frames.csv and the trajectories) and report (progress, summary.json, evaluation, plots).
#include "commands.hpp"
#include "localize/options.hpp"
#include "localize/runner.hpp"

#include <memory>

namespace ndtcu::cli {

Command add_localize(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<localize::LocalizeOptions>();
  auto* cmd = app.add_subcommand("localize", "Localize a sequence of scans in a map (NDT, Autoware's settings)");
  const localize::ConfigurableOptions given = localize::add_localize_options(cmd, *o);
  return [o, &global, given]() { return localize::run_localize(*o, given, global); };
}

}  // namespace ndtcu::cli
