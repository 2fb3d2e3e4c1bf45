#pragma once
// Shared by every reader: turns x y z (double) and intensity into a PointCloud,
// applying the origin policy and dropping non-finite points and points float32 cannot hold.
#include <ndtcu/io.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace ndtcu::detail {

class CloudBuilder {
 public:
  /// The largest float32 (FLT_MAX): a coordinate, relative to the cloud's origin, beyond it
  /// cannot be stored.
  static constexpr double kFloatMax = 3.4028234663852886e38;

  /// `expected_points` is only a hint, already bounded by the caller by what the file
  /// can hold.
  CloudBuilder(const ReadOptions& options, bool with_intensity, std::uint64_t expected_points);

  void add(double x, double y, double z, double intensity) {
    if (!(std::isfinite(x) && std::isfinite(y) && std::isfinite(z))) {
      ++non_finite_;
      return;
    }
    if (!origin_decided_) decide_origin(x, y, z);
    const double rx = x - cloud_.origin.x(), ry = y - cloud_.origin.y(), rz = z - cloud_.origin.z();
    // Beyond float32's range a coordinate cannot be stored (and the conversion would be
    // undefined): the point is dropped, and counted apart from the non-finite ones (its
    // coordinates are finite numbers, just too large).
    if (!(std::abs(rx) <= kFloatMax && std::abs(ry) <= kFloatMax && std::abs(rz) <= kFloatMax)) {
      ++out_of_range_;
      return;
    }
    cloud_.points.emplace_back(static_cast<float>(rx), static_cast<float>(ry), static_cast<float>(rz));
    if (with_intensity_) {
      // Intensity outside float32's range saturates (NaN stays NaN) instead of an
      // undefined conversion.
      cloud_.intensity.push_back(std::abs(intensity) <= kFloatMax ? static_cast<float>(intensity)
                                 : std::isnan(intensity)          ? std::numeric_limits<float>::quiet_NaN()
                                 : intensity > 0                  ? std::numeric_limits<float>::infinity()
                                                                  : -std::numeric_limits<float>::infinity());
    }
  }

  /// Finishes the cloud, fills the counts of `info` (if given) and warns when float32
  /// coordinates lose precision.
  PointCloud finish(const std::string& name, bool xyz_double, CloudInfo* info);

 private:
  void decide_origin(double x, double y, double z);

  ReadOptions options_;
  bool with_intensity_;
  bool origin_decided_ = false;
  std::uint64_t non_finite_ = 0;
  std::uint64_t out_of_range_ = 0;
  PointCloud cloud_;
};

}  // namespace ndtcu::detail
