#pragma once
// Shared by every reader: turns x y z (double) and intensity into a PointCloud,
// applying the origin policy and dropping non-finite points.
#include <ndtcu/io.hpp>

#include <cmath>
#include <cstdint>
#include <string>

namespace ndtcu::detail {

class CloudBuilder {
 public:
  /// `expected_points` is only a hint, already bounded by the caller by what the file
  /// can hold.
  CloudBuilder(const ReadOptions& options, bool with_intensity, std::uint64_t expected_points);

  void add(double x, double y, double z, float intensity) {
    if (!(std::isfinite(x) && std::isfinite(y) && std::isfinite(z))) {
      ++non_finite_;
      return;
    }
    if (!origin_decided_) decide_origin(x, y, z);
    cloud_.points.emplace_back(static_cast<float>(x - cloud_.origin.x()),
                               static_cast<float>(y - cloud_.origin.y()),
                               static_cast<float>(z - cloud_.origin.z()));
    if (with_intensity_) cloud_.intensity.push_back(intensity);
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
  PointCloud cloud_;
};

}  // namespace ndtcu::detail
