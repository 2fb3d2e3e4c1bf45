#pragma once
// Pieces every `ndtcu` subcommand shares.
#include "autoware_params.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/fields.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>

#include <CLI/CLI.hpp>

#include <ndtcu/localizability.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <type_traits>
#include <string>
#include <string_view>
#include <vector>

namespace ndtcu::cli {

/// A path or any other user or file-provided string as a JSON string. Paths are bytes, and
/// JSON text is UTF-8: valid UTF-8 is kept as is, and every byte that is not part of a
/// valid UTF-8 sequence is written as the four characters \xNN (NN its value in upper-case
/// hex, so "caf\xE9" in the JSON text's value for the Latin-1 name caf<0xE9>). Every JSON
/// writer of the tool puts strings it did not write itself through this.
nlohmann::json json_text(std::string_view bytes);

/// j.dump(2) that cannot throw on a string that is not UTF-8 (one that did not go through
/// json_text): such bytes become U+FFFD. A finished run is never lost to its report.
std::string dump_json(const nlohmann::json& j);

/// Adds to every floating-point option of `app` and of its subcommands (CLI11 type FLOAT,
/// single values and lists) a check that rejects NaN and infinity (also a decimal beyond
/// the double range, such as 1e999) with the option's name. Call once every option is
/// registered.
void require_finite_numbers(CLI::App& app);

/// JSON description of a loaded file (what `info --json` prints per file).
nlohmann::json describe_json(const CloudInfo& info, const PointCloud& cloud);

/// Human-readable description of a loaded file (what `info` prints per file).
std::string describe_text(const CloudInfo& info, const PointCloud& cloud);

/// ", N out of range dropped (...)" for N > 0 points dropped because float32 cannot hold
/// a coordinate; empty for 0.
std::string out_of_range_text(std::uint64_t dropped);

/// "1.2 MB" style size.
std::string human_bytes(std::uint64_t bytes);

/// `s` as one /bin/sh word (in single quotes), whatever bytes it holds.
std::string shell_quote(const std::string& s);

/// The first of `candidates` (a command looked up on PATH, or a path) that imports every
/// one of `modules` (`CANDIDATE -c 'import MODULE'` exits 0 for each, in order), or
/// nullopt. Each candidate passed over is added to `passed_over` as "CANDIDATE: why" (not
/// found, not executable, or "cannot import MODULE" for the first module it failed), for a
/// message that says what was tried.
std::optional<std::string> find_python_importing(const std::vector<std::string>& candidates,
                                                 const std::vector<std::string>& modules,
                                                 std::vector<std::string>* passed_over = nullptr);

/// Registers `name` (--origin) on `cmd`: the origin of the point clouds `what` names (their
/// coordinates are kept in float32 relative to it): "auto" (the default: the per-axis median
/// of the points, rounded to whole metres, when it lies beyond 10 km of zero, else zero),
/// "zero", or X,Y,Z in metres; `note` ends its help.
CLI::Option* add_origin_option(CLI::App* cmd, std::string& origin, const std::string& what,
                               const std::string& name = "--origin", const std::string& note = "");

/// ReadOptions for an --origin value (see add_origin_option()); throws Error naming
/// `option` and the text for anything else.
ReadOptions read_options_for_origin(const std::string& text, const std::string& option = "--origin");

/// The NDT options `align` and `localize` share: a preset, the Autoware parameter file
/// (--config) whose values come after it, and one option per AlignSettings field and per
/// ExecutionOptions field (from ndtcu/fields.hpp), bound onto a default-constructed
/// AlignSettings and ExecutionOptions, that overrides both when given.
struct NdtOptions {
  std::string preset = "autoware";
  std::string config;            ///< --config FILE (empty: none)
  AlignSettings values;          ///< what the options set (the library's defaults where not given)
  ExecutionOptions execution;    ///< what the options of how it runs set (--backend, --threads, ...)
  std::set<std::string> given;   ///< names of the fields given on the command line

  /// The struct of type S the options set (values or execution).
  template <typename S>
  S& target() {
    if constexpr (std::is_same_v<S, ExecutionOptions>) {
      return execution;
    } else {
      return values;
    }
  }

  /// Sets a field (of AlignSettings or ExecutionOptions) as the command line would, and
  /// marks it given.
  template <typename S, typename T>
  void set(T S::*member, T value) {
    target<S>().*member = value;
    visit_fields<S>([&](const auto& f) {
      if constexpr (std::is_same_v<typename std::decay_t<decltype(f)>::Type, T>) {
        if (f.member == member) given.insert(f.name);
      }
    });
  }
  /// Whether the field `name` was given.
  bool was_given(const std::string& name) const { return given.count(name) > 0; }
};

/// "--NAME" of a field, '_' spelt '-'.
std::string option_name(const std::string& field);

/// Checks a real-number option against `range` (a field's, ndtcu/fields.hpp), naming the
/// value and the range.
void check_number_range(CLI::Option* option, const FieldRange& range);

/// The check of a number option against `range`: "value -1 must be >= 0" (CLI's message
/// then starts with the option's name); anything that is not a number is left to the
/// option's conversion.
CLI::Validator range_validator(const FieldRange& range);
/// range_validator(), >= 0. (CLI11's NonNegativeNumber printed the largest double in 309
/// digits as the upper end of its range.)
CLI::Validator non_negative_number();
/// range_validator(), > 0 (for CLI11's PositiveNumber, as non_negative_number()).
CLI::Validator positive_number();

/// Registers --preset, one option per AlignSettings field (--resolution, --step-size,
/// --epsilon, --max-iterations, --outlier-ratio, --search, --line-search, --convergence,
/// --newton-direction, --covariance, --min-points-per-voxel, --eigenvalue-ratio,
/// --pose-covariance) and one per ExecutionOptions field (--backend, --threads, --device,
/// --gpu-loop).
void add_ndt_options(CLI::App* cmd, NdtOptions& o);

/// Registers --config FILE (Autoware's ndt_scan_matcher.param.yaml) on a command that also
/// has add_ndt_options; `keys` names the keys this command takes from the file besides the
/// ndt section and covariance_estimation_type, for its --help.
CLI::Option* add_config_option(CLI::App* cmd, NdtOptions& o, const std::string& keys);

/// Registers --regularization SCALE (Autoware's ndt.regularization.scale_factor) on a
/// command whose prior pose comes from `pose_from` (for its --help).
CLI::Option* add_regularization_option(CLI::App* cmd, std::optional<double>& scale, const std::string& pose_from);

/// The regularization scale factor in effect: --regularization when given, else the
/// --config file's (ndt.regularization), else 0 (off).
double regularization_scale(const std::optional<double>& option, const AutowareParams* config);

/// A prior's information matrix from six standard deviations [x y z roll pitch yaw] (m,
/// rad) as given on the command line: diag(1 / sigma^2), and zero information where a
/// sigma is "inf" (nothing known in that direction). Throws Error naming `option` and the
/// entry for a count other than 6, or a sigma that is not "inf" or a number in
/// [1e-150, 1e150] (beyond, 1/sigma^2 is 0 or infinite).
Eigen::Matrix<double, 6, 6> information_from_sigmas(const std::vector<std::string>& sigmas, const std::string& option);

/// JSON of a pose prior: pose, information (36, row-major), regularization_scale_factor;
/// null when it adds nothing.
nlohmann::json prior_json(const PosePrior& prior);

/// JSON of the NDT settings in use: every AlignSettings field and every ExecutionOptions
/// field by its name (enums by name), the prior (prior_json), the preset they started
/// from, and the --config file (null without one).
nlohmann::json ndt_settings_json(const std::string& preset, const AlignSettings& s, const ExecutionOptions& execution,
                                 const std::string& config = {});

/// JSON of an alignment's localizability: valid, eigenvalues (ascending), directions (row
/// i: the pose change [x y z roll pitch yaw] of eigenvalue i, moving the points 1 m RMS),
/// condition (null when infinite), weakest_ratio, weak, degenerate.
nlohmann::json localizability_json(const Localizability& l);

/// JSON of an alignment's result: every AlignResult field by its name (matrices row-major,
/// enums by name), localizability, time_ms, per_iteration_ms, evaluations and trace (one
/// {xyzrpy, score, step} per iteration).
nlohmann::json align_result_json(const AlignResult& r);

/// One line of text for it: "degenerate: 1 weak direction (...)" or the condition.
std::string localizability_text(const Localizability& l);

/// The preset, then the NDT values of `config` (Autoware's parameter file, when given),
/// then every option given on the command line, names parsed and the result checked by
/// ndtcu::validate (throws Error naming the setting, before any point cloud is read).
AlignSettings ndt_settings(const NdtOptions& o, const AutowareParams* config = nullptr);

/// How the alignment runs: the library's defaults, then `config`'s ndt.num_threads, then
/// the options given on the command line (--backend, --threads, --device, --gpu-loop),
/// checked by ndtcu::validate and, for --device, against the CUDA devices present (throws
/// Error in the option's words, before any point cloud is read).
ExecutionOptions execution_options(const NdtOptions& o, const AutowareParams* config = nullptr);

}  // namespace ndtcu::cli
