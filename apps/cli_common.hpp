#pragma once
// Pieces every `ndtcu` subcommand shares.
#include <ndtcu/io.hpp>
#include <ndtcu/settings.hpp>

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace ndtcu::cli {

/// JSON description of a loaded file (what `info --json` prints per file).
nlohmann::json describe_json(const CloudInfo& info, const PointCloud& cloud);

/// Human-readable description of a loaded file (what `info` prints per file).
std::string describe_text(const CloudInfo& info, const PointCloud& cloud);

/// "1.2 MB" style size.
std::string human_bytes(std::uint64_t bytes);

/// The NDT options `align` and `localize` share: a preset and every setting that
/// overrides it (unset: the preset's value).
struct NdtOptions {
  std::string preset = "autoware";
  std::optional<double> resolution, step_size, epsilon;
  std::optional<int> max_iterations, threads;
  std::optional<std::string> search, line_search, covariance, convergence, backend, gpu_loop, newton_direction,
      pose_covariance;
};

/// Registers --preset, --resolution, --search, --line-search, --step-size, --epsilon,
/// --max-iterations, --convergence, --newton-direction, --covariance, --pose-covariance,
/// --threads, --backend, --gpu-loop.
void add_ndt_options(CLI::App* cmd, NdtOptions& o);

/// JSON of the NDT settings in use (with the preset they started from).
nlohmann::json ndt_settings_json(const std::string& preset, const AlignSettings& s);

/// The preset with every given option applied (names parsed, ranges checked by the caller
/// through ndtcu::validate).
AlignSettings ndt_settings(const NdtOptions& o);

}  // namespace ndtcu::cli
