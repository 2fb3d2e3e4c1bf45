#pragma once
// Pieces every `ndtcu` subcommand shares.
#include <ndtcu/io.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace ndtcu::cli {

/// JSON description of a loaded file (what `info --json` prints per file).
nlohmann::json describe_json(const CloudInfo& info, const PointCloud& cloud);

/// Human-readable description of a loaded file (what `info` prints per file).
std::string describe_text(const CloudInfo& info, const PointCloud& cloud);

/// "1.2 MB" style size.
std::string human_bytes(std::uint64_t bytes);

}  // namespace ndtcu::cli
