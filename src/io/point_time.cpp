#include "point_time.hpp"

#include "../log.hpp"

#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ndtcu {

namespace {

// Where sensors put the time, in the order one is preferred when a cloud has several:
// Ouster `t` (uint32 ns), Velodyne and Hesai `time`/`timestamp`, Autoware's `time_stamp`,
// Livox `offset_time` (uint32 ns).
constexpr std::string_view kTimeNames[] = {"t", "time", "timestamp", "time_stamp", "offset_time"};

// Seconds since 1970 pass 1e6 on its 12th day: no offset within a sweep is that large, so
// values beyond it are absolute stamps.
constexpr double kAbsoluteSeconds = 1e6;

double seconds_per(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::Milliseconds: return 1e-3;
    case TimeUnit::Microseconds: return 1e-6;
    case TimeUnit::Nanoseconds: return 1e-9;
    default: return 1.0;
  }
}

bool is_integer(detail::ScalarKind kind) {
  return kind != detail::ScalarKind::F32 && kind != detail::ScalarKind::F64 && kind != detail::ScalarKind::Invalid;
}

// Auto: integers are nanoseconds (Ouster, Livox). Floating-point values are seconds, unless
// they are absolute stamps too large for seconds since 1970 (beyond 1e11 s, year 5138):
// then milliseconds, microseconds or nanoseconds by their magnitude (Livox's driver writes
// float64 `timestamp` in nanoseconds).
TimeUnit detect_unit(detail::ScalarKind kind, double largest) {
  if (is_integer(kind)) return TimeUnit::Nanoseconds;
  if (largest < 1e11) return TimeUnit::Seconds;
  if (largest < 1e14) return TimeUnit::Milliseconds;
  if (largest < 1e17) return TimeUnit::Microseconds;
  return TimeUnit::Nanoseconds;
}

}  // namespace

const char* to_string(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::Auto: return "auto";
    case TimeUnit::Seconds: return "s";
    case TimeUnit::Milliseconds: return "ms";
    case TimeUnit::Microseconds: return "us";
    case TimeUnit::Nanoseconds: return "ns";
  }
  return "?";
}

void parse_point_time(const std::string& text, ReadOptions& options) {
  if (text == "none") {
    options.read_time = false;
    options.time_field.clear();
    options.time_unit = TimeUnit::Auto;
    return;
  }
  const auto colon = text.rfind(':');
  const std::string field = text.substr(0, colon);
  const std::string unit = colon == std::string::npos ? "auto" : text.substr(colon + 1);
  if (field.empty()) {
    throw Error("--point-time '" + printable(text) + "' names no field (use FIELD:UNIT, FIELD or none)");
  }
  TimeUnit u = TimeUnit::Auto;
  if (unit == "s") u = TimeUnit::Seconds;
  else if (unit == "ms") u = TimeUnit::Milliseconds;
  else if (unit == "us") u = TimeUnit::Microseconds;
  else if (unit == "ns") u = TimeUnit::Nanoseconds;
  else if (unit != "auto") {
    throw Error("--point-time '" + printable(text) + "': unit '" + printable(unit) + "' is not s, ms, us, ns or auto");
  }
  options.read_time = true;
  options.time_field = field;
  options.time_unit = u;
}

namespace detail {

int choose_time_field(const std::vector<TimeFieldCandidate>& fields, const ReadOptions& options,
                      const std::string& source) {
  if (!options.read_time) return -1;
  if (!options.time_field.empty()) {
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const TimeFieldCandidate& f = fields[i];
      if (f.name != options.time_field) continue;
      if (f.kind == ScalarKind::Invalid || f.count != 1) {
        throw IoError(source, "time field '" + printable(options.time_field) + "' is not one number a point (" +
                                  (f.count != 1 ? std::to_string(f.count) + " values" : std::string("unknown type")) +
                                  ")");
      }
      return static_cast<int>(i);
    }
    std::string have;
    for (const auto& f : fields) have += (have.empty() ? "" : " ") + std::string(f.name);
    throw IoError(source, "has no time field '" + printable(options.time_field) + "' (fields: " + printable(have) +
                              "); --point-time names the field to read, or none");
  }
  for (std::string_view want : kTimeNames) {
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const TimeFieldCandidate& f = fields[i];
      if (f.name == want && f.kind != ScalarKind::Invalid && f.count == 1) return static_cast<int>(i);
    }
  }
  return -1;
}

bool settle_point_times(const std::vector<double>& raw, ScalarKind kind, const std::string& field, TimeUnit unit,
                        const std::string& source, std::vector<float>& out, CloudInfo* info) {
  out.clear();
  const auto drop = [&](const std::string& why) {
    log().warn("{}: per-point times of field '{}' dropped (the points are used without them): {}", printable(source),
               printable(field), why);
    if (info) {
      info->time_field.clear();
      info->time_dropped = why;
    }
    return false;
  };
  if (raw.empty()) return false;
  double lo = raw[0], hi = raw[0];
  for (double v : raw) {
    if (!std::isfinite(v)) return drop("a time is not finite (" + number_text(v) + ")");
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const TimeUnit used = unit == TimeUnit::Auto ? detect_unit(kind, std::max(std::abs(lo), std::abs(hi))) : unit;
  const double scale = seconds_per(used);
  const double lo_s = lo * scale, hi_s = hi * scale;
  const bool absolute = lo_s >= kAbsoluteSeconds;
  if (info) {
    info->time_field = field;
    info->time_unit = used;
    info->time_absolute = absolute;
  }
  const std::string range = fmt::format("{} to {} {}", number_text(lo), number_text(hi), to_string(used));
  if (absolute && kind == ScalarKind::F32) {
    // float32 holds stamps since 1970 (about 1.7e9 s) only to 128 s: a sweep's all alike.
    return drop("absolute stamps (" + range + ") stored as float32, which cannot resolve a sweep");
  }
  if (raw.size() > 1 && hi == lo) return drop("every point has the same time (" + number_text(lo) + ")");
  if (hi_s - lo_s > kMaxPointTimeSpan) {
    return drop(fmt::format("the times span {} s ({}), more than a sweep takes ({} s at most)",
                            number_text(hi_s - lo_s), range, number_text(kMaxPointTimeSpan)));
  }
  if (!absolute && std::max(std::abs(lo_s), std::abs(hi_s)) > kMaxPointTimeSpan) {
    return drop(fmt::format("the times ({}) lie more than {} s from the scan's stamp and are no absolute stamps",
                            range, number_text(kMaxPointTimeSpan)));
  }
  // Absolute stamps: relative to the earliest (the difference in double first: it is exact
  // for float64 stamps a few hundred milliseconds apart).
  const double zero = absolute ? lo : 0.0;
  out.resize(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) out[i] = static_cast<float>((raw[i] - zero) * scale);
  return true;
}

}  // namespace detail
}  // namespace ndtcu
