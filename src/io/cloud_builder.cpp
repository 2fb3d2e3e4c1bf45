#include "cloud_builder.hpp"
#include "point_time.hpp"

#include "../log.hpp"

#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace ndtcu::detail {

namespace {

// float32 has a 24-bit mantissa: at magnitude m its spacing is about m * 2^-23, so beyond
// 1 mm / 2^-23 = 8388.6 m from the origin it resolves coarser than a millimetre.
constexpr double kFloatSpacing = 1.0 / (1 << 23);
constexpr double kMillimetreReach = 1e-3 / kFloatSpacing;

}  // namespace

CloudBuilder::CloudBuilder(const ReadOptions& options, bool with_intensity, std::uint64_t expected_points)
    : options_(options), with_intensity_(with_intensity) {
  cloud_.points.reserve(expected_points);
  if (with_intensity_) cloud_.intensity.reserve(expected_points);
  if (options_.origin_policy == OriginPolicy::Fixed) {
    if (!options_.origin.allFinite()) throw Error("ReadOptions::origin is not finite");
    cloud_.origin = options_.origin;
    origin_known_ = true;
  } else if (options_.origin_policy == OriginPolicy::Zero) {
    origin_known_ = true;
  }
}

void CloudBuilder::keep_as_double() {
  world_.reserve(std::max(cloud_.points.capacity(), cloud_.points.size() + 1));
  for (const Eigen::Vector3f& p : cloud_.points) world_.push_back(p.cast<double>());
  std::vector<Eigen::Vector3f>().swap(cloud_.points);
}

void CloudBuilder::settle_origin() {
  origin_known_ = true;
  const bool doubles = !world_.empty();
  const std::size_t n = doubles ? world_.size() : cloud_.points.size();
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();
  // No median can exceed the threshold when no coordinate does: then nothing to sort.
  if (n > 0 && largest_ > options_.auto_origin_threshold) {
    // The median of each axis: a function of the set of points, not of their order, that
    // half of them can stray from without moving it.
    std::vector<double> axis(n);
    Eigen::Vector3d median;
    for (int a = 0; a < 3; ++a) {
      for (std::size_t i = 0; i < n; ++i) axis[i] = doubles ? world_[i][a] : cloud_.points[i][a];
      const auto middle = axis.begin() + static_cast<std::ptrdiff_t>((n - 1) / 2);
      std::nth_element(axis.begin(), middle, axis.end());
      median[a] = *middle;
    }
    if (median.cwiseAbs().maxCoeff() > options_.auto_origin_threshold) origin = median.array().round().matrix();
  }
  cloud_.origin = origin;
  if (!doubles && origin.isZero()) return;  // the float32 points are their coordinates already

  // Each point relative to the origin; one that float32 cannot hold there is dropped (and
  // its intensity with it).
  if (doubles) cloud_.points.reserve(n);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Eigen::Vector3d r = (doubles ? world_[i] : cloud_.points[i].cast<double>()) - origin;
    if (!(r.cwiseAbs().maxCoeff() <= kFloatMax)) {
      ++out_of_range_;
      continue;
    }
    if (doubles) cloud_.points.push_back(r.cast<float>());
    else cloud_.points[kept] = r.cast<float>();
    if (with_intensity_) cloud_.intensity[kept] = cloud_.intensity[i];
    if (with_time_) times_[kept] = times_[i];
    ++kept;
  }
  cloud_.points.resize(kept);
  if (with_intensity_) cloud_.intensity.resize(kept);
  if (with_time_) times_.resize(kept);
  std::vector<Eigen::Vector3d>().swap(world_);
}

void CloudBuilder::warn_precision(const std::string& name, bool xyz_double) const {
  // OriginPolicy::Auto kept the points where they were read (origin zero) and tracked the
  // largest coordinate meanwhile: when it is within the reach, neither warning applies, and
  // the points need not be read again (a scan of 100,000 points streamed by the ROS 2 node
  // spent 0.4 ms here per message).
  if (options_.origin_policy == OriginPolicy::Auto && cloud_.origin.isZero() && largest_ <= kMillimetreReach) return;
  const std::size_t n = cloud_.points.size();
  std::size_t far = 0;
  float largest = 0.0f;
  constexpr auto kReach = static_cast<float>(kMillimetreReach);
  for (const Eigen::Vector3f& p : cloud_.points) {
    const float m = p.cwiseAbs().maxCoeff();
    largest = std::max(largest, m);
    far += m > kReach;
  }
  const Eigen::Vector3d& o = cloud_.origin;
  if (far > 0) {
    // Another origin helps only when the points' own extent fits float32's millimetres
    // (an origin at their middle, rounded to whole metres); a few far strays do not.
    Eigen::Array3f lo = Eigen::Array3f::Constant(std::numeric_limits<float>::infinity()), hi = -lo;
    for (const Eigen::Vector3f& p : cloud_.points) {
      lo = lo.min(p.array());
      hi = hi.max(p.array());
    }
    std::string advice;
    const Eigen::Array3d lo_d = lo.cast<double>(), hi_d = hi.cast<double>();
    if (((hi_d - lo_d) / 2.0).maxCoeff() + 1.0 <= kMillimetreReach) {
      const Eigen::Vector3d middle = (o.array() + (lo_d + hi_d) / 2.0).round().matrix();
      advice = fmt::format(
          "; an origin at the middle of the points keeps millimetres: {},{},{} (ndtcu's --origin, or "
          "OriginPolicy::Fixed in C++)",
          middle.x(), middle.y(), middle.z());
    }
    log().warn("{}: {} of {} points lie more than {:.1f} km from the cloud's origin ({}, {}, {}), where float32 "
               "resolves coarser than 1 mm (about {:.1f} mm at the farthest, {:.0f} m away){}",
               printable(name), far, n, kMillimetreReach / 1e3, o.x(), o.y(), o.z(), 1e3 * largest * kFloatSpacing,
               static_cast<double>(largest), advice);
  }
  if (!xyz_double && !o.isZero()) {
    const double world = o.cwiseAbs().maxCoeff() + static_cast<double>(largest);
    const double file_mm = 1e3 * world * kFloatSpacing;
    if (file_mm > 1.0) {
      log().warn("{}: the file stores x y z as float32 at about {:.0f} m, which resolves only {:.1f} mm; "
                 "store them as float64 to keep millimetres",
                 printable(name), world, file_mm);
    }
  }
}

PointCloud CloudBuilder::finish(const std::string& name, bool xyz_double, CloudInfo* info) {
  if (!origin_known_) settle_origin();
  warn_precision(name, xyz_double);
  if (non_finite_ > 0) log().debug("{}: dropped {} non-finite points", printable(name), non_finite_);
  if (out_of_range_ > 0) {
    log().warn("{}: dropped {} points with a coordinate beyond float32's range (|coordinate - origin| > {:.3g})",
               printable(name), out_of_range_, kFloatMax);
  }
  if (info) {
    info->non_finite = non_finite_;
    info->out_of_range = out_of_range_;
    info->xyz_double = xyz_double;
  }
  if (with_time_) {
    settle_point_times(times_, time_kind_, time_field_, options_.time_unit, name, cloud_.time, info);
    std::vector<double>().swap(times_);
  }
  cloud_.points.shrink_to_fit();
  cloud_.intensity.shrink_to_fit();
  return std::move(cloud_);
}

}  // namespace ndtcu::detail
