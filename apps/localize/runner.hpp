#pragma once
// `ndtcu localize`: one run, from the options to the summary.
#include "commands.hpp"
#include "localize/options.hpp"

namespace ndtcu::cli::localize {

/// Localizes the scans of `o` in its map, writing the per-frame files as frames finish and
/// the summary at the end; returns the command's exit code (128 + the signal for a run a
/// signal stopped). `given` says which options the command line set (over --config).
int run_localize(LocalizeOptions& o, const ConfigurableOptions& given, const GlobalOptions& global);

}  // namespace ndtcu::cli::localize
