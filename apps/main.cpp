// ndtcu: NDT scan registration on the command line.
#include "commands.hpp"

#include <ndtcu/error.hpp>
#include <ndtcu/log.hpp>
#include <ndtcu/version.hpp>

#include <iostream>
#include <map>

int main(int argc, char** argv) {
  using namespace ndtcu::cli;
  CLI::App app{"ndtcu " NDTCU_VERSION_STRING ": NDT scan registration (CPU and CUDA)", "ndtcu"};
  app.require_subcommand(1);
  app.set_version_flag("--version", NDTCU_VERSION_STRING);
  GlobalOptions global;
  bool verbose = false, quiet = false;
  auto* v = app.add_flag("-v,--verbose", verbose, "log debug messages");
  app.add_flag("-q,--quiet", quiet, "log only errors")->excludes(v);
  app.add_flag("--json", global.json, "machine-readable output (one JSON document on stdout)");
  app.fallthrough();  // global flags may also follow the subcommand

  std::map<std::string, Command> commands{
      {"info", add_info(app, global)},
      {"convert", add_convert(app, global)},
      {"devices", add_devices(app, global)},
      {"align", add_align(app, global)},
      {"simulate", add_simulate(app, global)},
      {"localize", add_localize(app, global)},
      {"initpose", add_initpose(app, global)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2 after CLI11's message.
    return app.exit(e) == 0 ? 0 : 2;
  }
  ndtcu::set_log_level(verbose ? ndtcu::LogLevel::Debug : quiet ? ndtcu::LogLevel::Error : ndtcu::LogLevel::Info);
  try {
    for (auto* sub : app.get_subcommands()) return commands.at(sub->get_name())();
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
