#pragma once
// Shared by every reader: turns x y z (double), intensity and time into a PointCloud,
// applying the origin policy and dropping non-finite points and points float32 cannot hold.
#include "bytes.hpp"

#include <ndtcu/io.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace ndtcu::detail {

class CloudBuilder {
 public:
  /// The largest float32 (FLT_MAX): a coordinate, relative to the cloud's origin, beyond it
  /// cannot be stored.
  static constexpr double kFloatMax = 3.4028234663852886e38;

  /// `expected_points` is only a hint, already bounded by the caller by what the file
  /// can hold.
  CloudBuilder(const ReadOptions& options, bool with_intensity, std::uint64_t expected_points);

  /// Keeps a per-point time from now on: the values add() is given, read from `field` of
  /// type `kind` (settled into seconds, or dropped as implausible, by finish()). Call it
  /// before the first add().
  void keep_time(const std::string& field, ScalarKind kind) {
    with_time_ = true;
    time_field_ = field;
    time_kind_ = kind;
    times_.reserve(cloud_.points.capacity());
  }

  void add(double x, double y, double z, double intensity, double time = 0.0) {
    if (!(std::isfinite(x) && std::isfinite(y) && std::isfinite(z))) {
      ++non_finite_;
      return;
    }
    if (origin_known_) {
      add_relative(x - cloud_.origin.x(), y - cloud_.origin.y(), z - cloud_.origin.z(), intensity, time);
      return;
    }
    // OriginPolicy::Auto: the origin is a median of all the points, known at finish(). Until
    // then each point is kept exactly as read: as float32 while every coordinate so far is
    // one (float32 files, the common case: no memory beyond the cloud's own), as double from
    // the first that is not.
    const float fx = static_cast<float>(x), fy = static_cast<float>(y), fz = static_cast<float>(z);
    if (world_.empty() && fx == x && fy == y && fz == z) {
      cloud_.points.emplace_back(fx, fy, fz);
      largest_ = std::max(largest_, std::max({std::abs(x), std::abs(y), std::abs(z)}));
    } else {
      if (world_.empty()) keep_as_double();
      world_.emplace_back(x, y, z);
      largest_ = std::max(largest_, std::max({std::abs(x), std::abs(y), std::abs(z)}));
    }
    add_intensity(intensity);
    if (with_time_) times_.push_back(time);
  }

  /// add() of `count` points of float32 x y z (and intensity, when the builder keeps it) in
  /// the host's byte order, one every `step` bytes from `first`, the fields at byte offsets
  /// `x`, `y`, `z` and `intensity` (and the time at `time`, of type `time_kind`, when the
  /// builder keeps it): the same cloud as add() of each, read without a call and
  /// a round trip through double per point (OriginPolicy::Auto with float32 points so far,
  /// the case of a LiDAR message: its 100,000 points in a third of the time).
  void add_float_points(const char* first, std::uint64_t count, std::size_t step, std::uint32_t x, std::uint32_t y,
                        std::uint32_t z, std::uint32_t intensity, std::uint32_t time = 0,
                        ScalarKind time_kind = ScalarKind::F32) {
    const auto at = [](const char* p) {
      float v;
      std::memcpy(&v, p, sizeof v);
      return v;
    };
    if (origin_known_ || !world_.empty()) {
      for (std::uint64_t i = 0; i < count; ++i) {
        const char* p = first + i * step;
        add(at(p + x), at(p + y), at(p + z), with_intensity_ ? at(p + intensity) : 0.0f,
            with_time_ ? load_scalar(p + time, time_kind) : 0.0);
      }
      return;
    }
    // Every float is a double exactly: add() would keep each point as it is, and its largest
    // coordinate is the same number in float.
    float largest = static_cast<float>(largest_);
    std::size_t kept = cloud_.points.size();
    cloud_.points.resize(kept + count);
    if (with_intensity_) cloud_.intensity.resize(kept + count);
    std::size_t timed = times_.size();
    if (with_time_) times_.resize(timed + count);
    for (std::uint64_t i = 0; i < count; ++i) {
      const char* p = first + i * step;
      const float fx = at(p + x), fy = at(p + y), fz = at(p + z);
      if (!(std::isfinite(fx) && std::isfinite(fy) && std::isfinite(fz))) {
        ++non_finite_;
        continue;
      }
      cloud_.points[kept] = Eigen::Vector3f(fx, fy, fz);
      largest = std::max(largest, std::max({std::abs(fx), std::abs(fy), std::abs(fz)}));
      if (with_intensity_) cloud_.intensity[kept] = at(p + intensity);  // a float: add_intensity() keeps it
      if (with_time_) times_[timed++] = load_scalar(p + time, time_kind);
      ++kept;
    }
    cloud_.points.resize(kept);
    if (with_intensity_) cloud_.intensity.resize(kept);
    if (with_time_) times_.resize(timed);
    largest_ = std::max(largest_, static_cast<double>(largest));
  }

  /// Finishes the cloud (with OriginPolicy::Auto, chooses its origin first), fills the
  /// counts of `info` (if given) and warns when float32 coordinates lose precision.
  PointCloud finish(const std::string& name, bool xyz_double, CloudInfo* info);

 private:
  void add_relative(double rx, double ry, double rz, double intensity, double time) {
    // Beyond float32's range a coordinate cannot be stored (and the conversion would be
    // undefined): the point is dropped, and counted apart from the non-finite ones (its
    // coordinates are finite numbers, just too large).
    if (!(std::abs(rx) <= kFloatMax && std::abs(ry) <= kFloatMax && std::abs(rz) <= kFloatMax)) {
      ++out_of_range_;
      return;
    }
    cloud_.points.emplace_back(static_cast<float>(rx), static_cast<float>(ry), static_cast<float>(rz));
    add_intensity(intensity);
    if (with_time_) times_.push_back(time);
  }

  void add_intensity(double intensity) {
    if (!with_intensity_) return;
    // Intensity outside float32's range saturates (NaN stays NaN) instead of an undefined
    // conversion.
    cloud_.intensity.push_back(std::abs(intensity) <= kFloatMax ? static_cast<float>(intensity)
                               : std::isnan(intensity)          ? std::numeric_limits<float>::quiet_NaN()
                               : intensity > 0                  ? std::numeric_limits<float>::infinity()
                                                                : -std::numeric_limits<float>::infinity());
  }

  // Moves the float32 points kept so far into world_ (exactly: a float is a double).
  void keep_as_double();
  // OriginPolicy::Auto, once every point is in: the origin, then each point relative to it.
  void settle_origin();
  void warn_precision(const std::string& name, bool xyz_double) const;

  ReadOptions options_;
  bool with_intensity_;
  bool with_time_ = false;
  std::string time_field_;                // keep_time(): the field the times come from
  ScalarKind time_kind_ = ScalarKind::F64;
  std::vector<double> times_;             // the times as read, one per point kept
  bool origin_known_ = false;
  std::uint64_t non_finite_ = 0;
  std::uint64_t out_of_range_ = 0;
  double largest_ = 0.0;                  // Auto: the largest |coordinate| read
  std::vector<Eigen::Vector3d> world_;    // Auto: the points as read, once one is not float32
  PointCloud cloud_;
};

}  // namespace ndtcu::detail
