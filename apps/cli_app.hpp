#pragma once
// The `ndtcu` command line as a whole: every subcommand registered on one CLI::App, and
// the run that main() does (parse, dispatch, one-line errors, exit codes), callable from
// the tests with any argument bytes.
#include "commands.hpp"

#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <string>

namespace ndtcu::cli {

/// The parser with every subcommand's options, and what the subcommands run. Not movable:
/// the commands refer to `global`.
struct CliApp {
  CLI::App app;
  GlobalOptions global;
  bool verbose = false;
  bool quiet = false;
  std::map<std::string, Command> commands;

  CliApp();
  CliApp(const CliApp&) = delete;
  CliApp& operator=(const CliApp&) = delete;
};

/// Builds the whole command line (global flags, every subcommand, the finite-number check
/// on every floating-point option).
std::unique_ptr<CliApp> make_cli_app();

/// What `ndtcu` does with its arguments: 0 on success, 1 on an error (one line on stderr,
/// "ndtcu: error: ..."), 2 on a usage error (CLI11's message).
int run_cli(int argc, char** argv);

}  // namespace ndtcu::cli
