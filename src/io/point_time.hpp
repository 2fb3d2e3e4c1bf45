#pragma once
// Per-point time, shared by the PCD, PLY and PointCloud2 readers: which field holds it, and
// its values turned into seconds relative to the scan's reference time, or dropped with a
// warning when they cannot be a sweep's (docs/formats.md, "Per-point time").
#include "bytes.hpp"

#include <ndtcu/io.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ndtcu::detail {

/// A field a reader could take the time from.
struct TimeFieldCandidate {
  std::string_view name;
  ScalarKind kind = ScalarKind::Invalid;  ///< Invalid: a type the reader does not know
  std::uint64_t count = 1;                ///< values per point
};

/// The index in `fields` of the time field `options` asks for, or -1 for none: the named
/// one (ReadOptions::time_field; IoError naming `source` when it is missing, not a number
/// or not one value a point), else the first of the names sensors use with one numeric
/// value a point.
int choose_time_field(const std::vector<TimeFieldCandidate>& fields, const ReadOptions& options,
                      const std::string& source);

/// The raw values of a time field (one a point, as read) as seconds relative to the scan's
/// reference time into `out`, and true; or, when they are implausible, false with `out`
/// empty, the reason in `info->time_dropped` and a warning naming `source` and `field`.
bool settle_point_times(const std::vector<double>& raw, ScalarKind kind, const std::string& field, TimeUnit unit,
                        const std::string& source, std::vector<float>& out, CloudInfo* info);

}  // namespace ndtcu::detail
