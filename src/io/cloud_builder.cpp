#include "cloud_builder.hpp"

#include "../log.hpp"

#include <algorithm>

namespace ndtcu::detail {

CloudBuilder::CloudBuilder(const ReadOptions& options, bool with_intensity, std::uint64_t expected_points)
    : options_(options), with_intensity_(with_intensity) {
  cloud_.points.reserve(expected_points);
  if (with_intensity_) cloud_.intensity.reserve(expected_points);
  if (options_.origin_policy == OriginPolicy::Fixed) {
    if (!options_.origin.allFinite()) throw Error("ReadOptions::origin is not finite");
    cloud_.origin = options_.origin;
    origin_decided_ = true;
  } else if (options_.origin_policy == OriginPolicy::Zero) {
    origin_decided_ = true;
  }
}

void CloudBuilder::decide_origin(double x, double y, double z) {
  origin_decided_ = true;
  double magnitude = std::max({std::abs(x), std::abs(y), std::abs(z)});
  if (magnitude > options_.auto_origin_threshold) {
    cloud_.origin = Eigen::Vector3d(std::round(x), std::round(y), std::round(z));
  }
}

PointCloud CloudBuilder::finish(const std::string& name, bool xyz_double, CloudInfo* info) {
  // float32 has a 24-bit mantissa: at magnitude m its spacing is about m * 2^-23.
  float largest = 0.0f;
  for (const auto& p : cloud_.points) largest = std::max(largest, p.cwiseAbs().maxCoeff());
  constexpr double kFloatSpacing = 1.0 / (1 << 23);
  double spacing_mm = 1e3 * largest * kFloatSpacing;
  if (spacing_mm > 1.0) {
    log().warn("{}: coordinates reach {:.0f} m from the cloud origin ({:.0f}, {:.0f}, {:.0f}); "
               "float32 resolves only about {:.1f} mm there. Read with a fixed origin near the data.",
               name, largest, cloud_.origin.x(), cloud_.origin.y(), cloud_.origin.z(), spacing_mm);
  }
  if (!xyz_double && !cloud_.origin.isZero()) {
    double world = cloud_.origin.cwiseAbs().maxCoeff() + largest;
    double file_mm = 1e3 * world * kFloatSpacing;
    if (file_mm > 1.0) {
      log().warn("{}: the file stores x y z as float32 at about {:.0f} m, which resolves only {:.1f} mm; "
                 "store them as float64 to keep millimetres", name, world, file_mm);
    }
  }
  if (non_finite_ > 0) log().debug("{}: dropped {} non-finite points", name, non_finite_);
  if (out_of_range_ > 0) {
    log().warn("{}: dropped {} points with a coordinate beyond float32's range (|coordinate - origin| > {:.3g})", name,
               out_of_range_, kFloatMax);
  }
  if (info) {
    info->non_finite = non_finite_;
    info->out_of_range = out_of_range_;
    info->xyz_double = xyz_double;
  }
  cloud_.points.shrink_to_fit();
  cloud_.intensity.shrink_to_fit();
  return std::move(cloud_);
}

}  // namespace ndtcu::detail
