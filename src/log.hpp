#pragma once
// ndtcu's own spdlog logger (never spdlog's default one).
#include <spdlog/spdlog.h>

namespace ndtcu::detail {

/// The logger named "ndtcu": the one an application registered under that name, or a
/// stderr logger created on first use.
spdlog::logger& log();

}  // namespace ndtcu::detail
