// `ndtcu localize --map MAP --scans DIR_OR_LIST_OR_BAG`: scan-to-map localization over a sequence,
// with per-frame records, a summary, evaluation against reference poses, and plots.
// The pieces are in localize/: options (the option definitions and the settings they make),
// inputs (scans, reference, odometry, first pose, map), runner (the frame loop), frame_files
// (frames.csv and the trajectories) and report (progress, summary.json, evaluation, plots).
#include "commands.hpp"
#include "localize/options.hpp"
#include "localize/runner.hpp"

#include <memory>
#include <string>
#include <vector>

namespace ndtcu::cli {

Command add_localize(CLI::App& app, const GlobalOptions& global) {
  auto o = std::make_shared<localize::LocalizeOptions>();
  auto* cmd = app.add_subcommand("localize", "Localize a sequence of scans in a map (NDT, Autoware's settings)");
  const localize::ConfigurableOptions given = localize::add_localize_options(cmd, *o);
  // --init takes a pose or `global`: any other count is a usage error, found while parsing.
  cmd->callback([o]() {
    const std::vector<std::string>& init = o->init;
    if (!init.empty() && init.size() != 6 && !(init.size() == 1 && init[0] == "global")) {
      throw CLI::ValidationError("--init", "6 values (x,y,z,roll,pitch,yaw) or `global`, received " +
                                               std::to_string(init.size()));
    }
  });
  return [o, &global, given]() { return localize::run_localize(*o, given, global); };
}

}  // namespace ndtcu::cli
