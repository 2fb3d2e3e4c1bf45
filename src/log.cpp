#include "log.hpp"

#include <ndtcu/log.hpp>
#include <ndtcu/text.hpp>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>
#include <mutex>

namespace ndtcu {
namespace detail {

namespace {

// The message as spdlog's %v writes it, with the control characters of the text it quotes
// (paths, field names, topics) escaped: a warning naming a file cannot send commands to the
// terminal it is printed on.
class PrintablePayload : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string text = printable_lines(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PrintablePayload>(); }
};

}  // namespace

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    if (auto existing = spdlog::get("ndtcu")) return existing;
    auto created = spdlog::stderr_color_mt("ndtcu");
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<PrintablePayload>('*').set_pattern("[%H:%M:%S.%e] [ndtcu] [%^%l%$] %*");
    created->set_formatter(std::move(formatter));
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
