// The one list of fields (ndtcu/fields.hpp) against what is made from it: every
// AlignSettings and ExecutionOptions field is an option of the commands that align and a
// key of their JSON,
// every AlignResult field a key of `ndtcu --json align`, and every range check names the
// field and the value.
#include "cli_app.hpp"
#include "cli_common.hpp"
#include "localize/options.hpp"
#include "../support/test_support.hpp"

#include <ndtcu/fields.hpp>
#include <ndtcu/log.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

using namespace ndtcu;
namespace fs = std::filesystem;

namespace {

// `ndtcu ARGS...` in-process; its stdout, or the exit status and stderr in the failure.
std::string run_json(std::vector<std::string> args) {
  args.insert(args.begin(), "ndtcu");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::ostringstream out, err;
  std::streambuf* old_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* old_err = std::cerr.rdbuf(err.rdbuf());
  const LogLevel level = log_level();
  const int rc = cli::run_cli(static_cast<int>(args.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  set_log_level(level);
  INFO(err.str());
  REQUIRE(rc == 0);
  return out.str();
}

const fs::path kSample = ndtcu::test::source_dir() / "data" / "sample";

}  // namespace

TEST_CASE("every settings field is an option of the aligning commands and a key of their JSON",
          "[unit][cli][fields]") {
  const auto cli = cli::make_cli_app();
  std::size_t fields = 0;
  std::size_t execution_fields = 0;
  for (const char* command : {"align", "initpose", "localize"}) {
    const CLI::App* sub = cli->app.get_subcommand(command);
    visit_fields<AlignSettings>([&](const auto& f) {
      CAPTURE(command, f.name);
      CHECK(sub->get_option_no_throw(cli::option_name(f.name)) != nullptr);
      ++fields;
    });
    visit_fields<ExecutionOptions>([&](const auto& f) {
      CAPTURE(command, f.name);
      CHECK(sub->get_option_no_throw(cli::option_name(f.name)) != nullptr);
      ++execution_fields;
    });
  }
  CHECK(fields == 3 * field_names<AlignSettings>().size());
  CHECK(execution_fields == 3 * field_names<ExecutionOptions>().size());
  CHECK(field_names<ExecutionOptions>() == std::vector<std::string>{"backend", "threads", "device", "gpu_loop"});
  // No name is in both lists: an option names one field.
  for (const std::string& name : field_names<ExecutionOptions>()) {
    const auto settings = field_names<AlignSettings>();
    CHECK(std::find(settings.begin(), settings.end(), name) == settings.end());
  }
  // localize sets every LocalizerSettings field from an option too.
  visit_fields<LocalizerSettings>([&](const auto& f) {
    CAPTURE(f.name);
    CHECK(cli->app.get_subcommand("localize")->get_option_no_throw(cli::localize::localize_option(f.name)) != nullptr);
  });
  CHECK(field_names<AlignSettings>().size() >= 13);

  // The options once missing from the command line, given, reach the settings in use.
  const nlohmann::json j = nlohmann::json::parse(
      run_json({"--json", "align", (kSample / "map.pcd").string(), (kSample / "scans" / "000000.pcd").string(),
                "--backend", "cpu", "--threads", "2", "--outlier-ratio", "0.4", "--min-points-per-voxel", "5",
                "--eigenvalue-ratio", "0.02", "--pose-covariance", "laplace", "--gpu-loop", "host"}));
  const nlohmann::json& settings = j.at("settings");
  visit_fields<AlignSettings>([&](const auto& f) {
    CAPTURE(f.name);
    CHECK(settings.contains(f.name));
  });
  visit_fields<ExecutionOptions>([&](const auto& f) {
    CAPTURE(f.name);
    CHECK(settings.contains(f.name));
  });
  CHECK(settings.at("backend") == "cpu");
  CHECK(settings.at("threads") == 2);
  CHECK(settings.at("device") == -1);  // not given: the library's default
  CHECK(settings.at("gpu_loop") == "host");
  CHECK(settings.at("outlier_ratio") == 0.4);
  CHECK(settings.at("min_points_per_voxel") == 5);
  CHECK(settings.at("eigenvalue_ratio") == 0.02);
  CHECK(settings.at("pose_covariance") == "laplace");
  CHECK(settings.at("resolution") == AlignSettings{}.resolution);  // not given: the library's default
  visit_fields<AlignResult>([&](const auto& f) {
    CAPTURE(f.name);
    CHECK(j.contains(f.name));
  });
  CHECK(j.at("covariance").size() == 36);
  CHECK(j.at("transform").size() == 16);
  CHECK(j.at("covariance_mode") == "laplace");
}

namespace {

// Sets each number field of S with a range, in turn, just outside it (or to NaN for a
// field that need only be finite) and checks that validate() names the field (after
// `prefix`) and the value; returns how many were checked.
template <typename S>
std::size_t check_validated_ranges(const std::string& prefix) {
  std::size_t checked = 0;
  visit_fields<S>([&](const auto& f) {
    using T = typename std::decay_t<decltype(f)>::Type;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      if (!f.range.checked()) return;
      CAPTURE(f.name);
      S s;
      CHECK_NOTHROW(validate(s));  // the defaults lie in range
      if (f.range.bounded()) {
        // Just outside the lower bound (or the upper one for a field without a lower).
        const double bad = std::isfinite(f.range.lo) ? (f.range.lo_open ? f.range.lo : f.range.lo - 1)
                                                     : (f.range.hi_open ? f.range.hi : f.range.hi + 1);
        s.*f.member = static_cast<T>(bad);
        const std::string value =
            std::is_floating_point_v<T> ? number_text(bad) : std::to_string(static_cast<T>(bad));
        CHECK_THROWS_WITH(validate(s), Catch::Contains(prefix + f.name) && Catch::Contains(value));
      }
      if constexpr (std::is_floating_point_v<T>) {
        s.*f.member = std::numeric_limits<T>::quiet_NaN();
        CHECK_THROWS_WITH(validate(s), Catch::Contains(prefix + f.name) && Catch::Contains("nan"));
      }
      ++checked;
    }
  });
  return checked;
}

}  // namespace

TEST_CASE("the ranges of the list are validate()'s, naming the field and the value", "[unit][fields]") {
  CHECK(check_validated_ranges<AlignSettings>("invalid setting ") == 7);
  CHECK(check_validated_ranges<ExecutionOptions>("invalid setting ") == 2);
  // The IMU's four, deskew_passes, refine_min_support, the refined residual scale, the
  // weak directions' sigma and ratio, the de-skew term's jerk and IMU rate sigma among them.
  CHECK(check_validated_ranges<LocalizerSettings>("localizer ") == 43);
}

TEST_CASE("every Autoware parameter renamed names an AlignSettings or ExecutionOptions field of its type",
          "[unit][cli][fields]") {
  std::size_t renames = 0, execution = 0;
  cli::visit_autoware_renames([&](const char* key, const char* field, auto value) {
    CAPTURE(key, field);
    using T = typename std::decay_t<decltype(cli::AutowareParams{}.*value)>::value_type;
    AlignSettings s;
    ExecutionOptions e;
    const bool in_settings = set_field(s, field, T{});
    const bool in_execution = set_field(e, field, T{});
    CHECK(in_settings != in_execution);  // one field, in one of the two lists
    execution += in_execution;
    ++renames;
  });
  CHECK(renames == 5);
  CHECK(execution == 1);  // ndt.num_threads -> threads
}

namespace {

// Each listed name parses back to its value, and a name not listed is refused with every
// value named (the one list of fields.hpp makes both).
template <typename E>
void check_enum_parser(const char* what) {
  INFO(what);
  const std::vector<std::string> names = enum_names<E>();
  REQUIRE(!names.empty());
  for (E e : EnumValues<E>::all()) CHECK(EnumValues<E>::parse(to_string(e)) == e);
  std::string message;
  try {
    EnumValues<E>::parse("no-such-value");
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Contains(std::string(what) + " 'no-such-value' is not one of "));
  for (const std::string& n : names) CHECK_THAT(message, Catch::Contains(n));
}

}  // namespace

TEST_CASE("every enum's parser names all its values when it refuses one", "[unit][fields]") {
  check_enum_parser<SearchMethod>("search method");
  check_enum_parser<LineSearch>("line search");
  check_enum_parser<ConvergenceRule>("convergence rule");
  check_enum_parser<NewtonDirection>("Newton direction");
  check_enum_parser<CovarianceMode>("covariance mode");
  check_enum_parser<Backend>("backend");
  check_enum_parser<GpuNewtonLoop>("GPU Newton loop");
  check_enum_parser<PoseCovariance>("pose covariance");
  check_enum_parser<Recovery>("recovery");
  check_enum_parser<Deskew>("deskew");
  check_enum_parser<FrameCheck>("frame check");
  check_enum_parser<FrameStage>("frame stage");
  // The term the calibrated covariance added last is named too.
  check_enum_parser<CovarianceTerm>("covariance term");
}
