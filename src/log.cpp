#include "log.hpp"

#include <ndtcu/log.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

namespace ndtcu {
namespace detail {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    if (auto existing = spdlog::get("ndtcu")) return existing;
    auto created = spdlog::stderr_color_mt("ndtcu");
    created->set_pattern("[%H:%M:%S.%e] [ndtcu] [%^%l%$] %v");
    created->set_level(spdlog::level::info);
    return created;
  }();
  return *logger;
}

}  // namespace detail

void set_log_level(LogLevel level) {
  static constexpr spdlog::level::level_enum map[] = {
      spdlog::level::trace, spdlog::level::debug, spdlog::level::info,
      spdlog::level::warn,  spdlog::level::err,   spdlog::level::off};
  detail::log().set_level(map[static_cast<int>(level)]);
}

LogLevel log_level() {
  switch (detail::log().level()) {
    case spdlog::level::trace: return LogLevel::Trace;
    case spdlog::level::debug: return LogLevel::Debug;
    case spdlog::level::info: return LogLevel::Info;
    case spdlog::level::warn: return LogLevel::Warn;
    case spdlog::level::err:
    case spdlog::level::critical: return LogLevel::Error;
    default: return LogLevel::Off;
  }
}

}  // namespace ndtcu
