#include "cli_app.hpp"

#include "cli_common.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/log.hpp>
#include <ndtcu/version.hpp>

#include <iostream>
#include <new>

namespace ndtcu::cli {

CliApp::CliApp() : app("ndtcu " NDTCU_VERSION_STRING ": NDT scan registration (CPU and CUDA)", "ndtcu") {}

std::unique_ptr<CliApp> make_cli_app() {
  auto cli = std::make_unique<CliApp>();
  CLI::App& app = cli->app;
  app.require_subcommand(1);
  app.set_version_flag("--version", NDTCU_VERSION_STRING);
  auto* v = app.add_flag("-v,--verbose", cli->verbose, "log debug messages");
  app.add_flag("-q,--quiet", cli->quiet, "log only errors")->excludes(v);
  app.add_flag("--json", cli->global.json, "machine-readable output (one JSON document on stdout)");
  app.fallthrough();  // global flags may also follow the subcommand

  cli->commands = {
      {"info", add_info(app, cli->global)},
      {"convert", add_convert(app, cli->global)},
      {"devices", add_devices(app, cli->global)},
      {"align", add_align(app, cli->global)},
      {"simulate", add_simulate(app, cli->global)},
      {"localize", add_localize(app, cli->global)},
      {"initpose", add_initpose(app, cli->global)},
      {"map", add_map(app, cli->global)},
      {"eval", add_eval(app, cli->global)},
  };
  require_finite_numbers(app);
  return cli;
}

int run_cli(int argc, char** argv) {
  auto cli = make_cli_app();
  CLI::App& app = cli->app;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2 after CLI11's message.
    return app.exit(e) == 0 ? 0 : 2;
  }
  ndtcu::set_log_level(cli->verbose ? ndtcu::LogLevel::Debug
                       : cli->quiet ? ndtcu::LogLevel::Error
                                    : ndtcu::LogLevel::Info);
  try {
    for (auto* sub : app.get_subcommands()) return cli->commands.at(sub->get_name())();
  } catch (const ndtcu::Error& e) {
    std::cerr << "ndtcu: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "ndtcu: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ndtcu: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace ndtcu::cli
