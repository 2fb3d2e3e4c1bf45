#pragma once
// Each subcommand registers its options on the app and returns the function that runs it.
#include <CLI/CLI.hpp>

#include <functional>

namespace ndtcu::cli {

/// Global flags every subcommand sees.
struct GlobalOptions {
  bool json = false;
};

using Command = std::function<int()>;

Command add_info(CLI::App& app, const GlobalOptions& global);
Command add_convert(CLI::App& app, const GlobalOptions& global);
Command add_devices(CLI::App& app, const GlobalOptions& global);
Command add_align(CLI::App& app, const GlobalOptions& global);
Command add_simulate(CLI::App& app, const GlobalOptions& global);
Command add_localize(CLI::App& app, const GlobalOptions& global);
Command add_initpose(CLI::App& app, const GlobalOptions& global);
Command add_map(CLI::App& app, const GlobalOptions& global);
Command add_eval(CLI::App& app, const GlobalOptions& global);

}  // namespace ndtcu::cli
