#pragma once
/// \file
/// ndtcu logs through spdlog to its own logger named "ndtcu" (stderr by default). An
/// application that wants the messages elsewhere registers its own spdlog logger under
/// that name before the first ndtcu call; ndtcu never touches spdlog's default logger.

namespace ndtcu {

/// Severity levels, as spdlog's.
enum class LogLevel { Trace, Debug, Info, Warn, Error, Off };

/// Sets the level of ndtcu's logger.
void set_log_level(LogLevel level);

/// The current level of ndtcu's logger.
LogLevel log_level();

}  // namespace ndtcu
