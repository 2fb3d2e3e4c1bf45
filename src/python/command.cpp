// ndtcu.run_command and ndtcu.check_command: a command of the `ndtcu` tool (apps/, the
// library ndtcu_cli_app) run in this process, with the tool's own parser, options, checks
// and writers. A Python program (the fleet runner, ndtcu.fleet) localizes a sequence
// through it and gets the files `ndtcu localize` writes, byte for byte, without a
// subprocess and without a second copy of the command's logic.
#include <autoware_params.hpp>
#include <cli_app.hpp>

#include "common.hpp"

#include <ndtcu/log.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace ndtcu::python {
namespace {

// The command's arguments: each a str (through the file-system encoding, as os.fsencode
// spells it: a name os.listdir gave, its bytes that are not UTF-8 as surrogate escapes,
// comes back to those bytes), bytes as they are, or an os.PathLike, as every call taking a
// path accepts them (a list of str only raised TypeError for such a name). A single str
// or bytes is no list of arguments.
std::vector<std::string> command_args(nb::handle args) {
  if (PyUnicode_Check(args.ptr()) || PyBytes_Check(args.ptr())) {
    throw nb::type_error("args: expected a list of arguments (str, bytes or os.PathLike), got one string");
  }
  std::vector<std::string> out;
  for (nb::handle a : args) out.push_back(path_arg(a, ("args[" + std::to_string(out.size()) + "]").c_str()));
  return out;
}

// The tool's parser with `args` parsed (the arguments after the program name). A usage
// error is a ValueError with CLI11's message, which names the option and the value.
std::unique_ptr<cli::CliApp> parse(const std::vector<std::string>& args) {
  auto app = cli::make_cli_app();
  // CLI11 takes the arguments in reverse order (the last one first).
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app->app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw nb::value_error(app->app.help().c_str());
  } catch (const CLI::ParseError& e) {
    throw nb::value_error(e.what());
  }
  return app;
}

}  // namespace

void define_command(nb::module_& m) {
  m.def(
      "check_command",
      [](nb::handle args) { parse(command_args(args)); },
      "args"_a,
      "Parses `args` (e.g. ['localize', '--map', 'm.pcd', '--scans', 'dir', '--voxel', '0.5']) as `ndtcu` would "
      "and runs nothing: a ValueError naming the option for an unknown option, a missing value or one out of "
      "its range (the checks that need the files are the command's own, when it runs).");
  m.def(
      "check_autoware_config",
      [](nb::handle path) {
        const std::string file = path_arg(path, "path");
        nb::gil_scoped_release release;
        cli::read_autoware_params(file);
      },
      "path"_a,
      "Reads an Autoware ndt_scan_matcher parameter file as `--config PATH` does and keeps nothing: ndtcu.Error "
      "(naming the file, the key and the value) when the command would refuse it.");
  m.def(
      "run_command",
      [](nb::handle args) {
        auto app = parse(command_args(args));
        set_log_level(app->verbose ? LogLevel::Debug : app->quiet ? LogLevel::Error : LogLevel::Info);
        int code = 0;
        {
          nb::gil_scoped_release release;
          // Whatever ends the command, what it printed reaches its file descriptors (a
          // caller that redirected them, e.g. into a log, reads it whole).
          struct Flush {
            ~Flush() {
              std::cout.flush();
              std::cerr.flush();
              std::fflush(stdout);
              std::fflush(stderr);
            }
          } flush;
          for (auto* sub : app->app.get_subcommands()) code = app->commands.at(sub->get_name())();
        }
        return code;
      },
      "args"_a,
      "Runs an `ndtcu` command in this process, as `ndtcu ARGS...` runs it (the same parser, checks, output on "
      "stdout and stderr, and files): returns its exit code (0, or 130/143 when SIGINT/SIGTERM stopped a "
      "localization between two frames); its errors are ndtcu.Error (ndtcu.IoError, ndtcu.CudaError) with the "
      "message the tool prints, usage errors ValueError. The GIL is released while it runs; it sets the library's "
      "log level as the tool's -v/-q do. Each argument is a str, bytes or os.PathLike, as paths are everywhere in "
      "the module (a str through the file-system encoding, so a name os.listdir gave comes back to its bytes).");
}

}  // namespace ndtcu::python
