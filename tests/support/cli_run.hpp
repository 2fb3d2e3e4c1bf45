#pragma once
// Runs the command-line tool in-process, as main() does, with stdout and stderr captured
// (the CLI tests and the simulator's command tests).
#include "cli_app.hpp"

#include <ndtcu/log.hpp>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace ndtcu::test {

/// What a run of the tool gave: its exit code and what it wrote.
struct CliRun {
  int rc = -1;
  std::string out, err;
};

/// Runs `ndtcu ARGS...` as main() does, stdout and stderr captured; the log level and the
/// streams are restored afterwards, whatever the run did.
inline CliRun run_ndtcu(std::vector<std::string> args) {
  args.insert(args.begin(), "ndtcu");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::ostringstream out, err;
  struct Restore {
    std::streambuf* out;
    std::streambuf* err;
    LogLevel level;
    ~Restore() {
      std::cout.rdbuf(out);
      std::cerr.rdbuf(err);
      set_log_level(level);
    }
  } restore{std::cout.rdbuf(out.rdbuf()), std::cerr.rdbuf(err.rdbuf()), log_level()};
  CliRun r;
  r.rc = cli::run_cli(static_cast<int>(args.size()), argv.data());
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace ndtcu::test
