#pragma once
// The CUDA scan filter's host-side face (host compiler only; the CUDA state hides behind
// a pimpl): the localizer's per-scan range crop and voxel filter on the GPU.
//
// One call uploads the scan's points (and intensities) through pinned staging, crops them
// by range and reduces their bounds, stably compacts the kept indices, reads back the kept
// count and the bounds (the one mid-way synchronization: the lattice, its index width and
// its errors are decided on the host, by the same code as voxel_downsample), keys each
// kept point by its cell, radix-sorts (cell, point) pairs, finds the runs of equal cells
// and sums each run in point order, then reads back the centroids. Every device and pinned
// buffer is sized by the input and only grows, so a sequence of scans of similar size
// allocates nothing after the first.
#include <ndtcu/point_cloud.hpp>

#include <cstdint>
#include <memory>

namespace ndtcu::math {
struct SweepPath;  // kernels/deskew.hpp
}

namespace ndtcu::detail {

/// What the filter did, summed since construction.
struct CudaFilterTelemetry {
  std::uint64_t calls = 0;        ///< crop_and_downsample() calls
  std::uint64_t points_in = 0;    ///< points given
  std::uint64_t points_out = 0;   ///< points returned
  double gpu_ms = 0.0;            ///< device time from the upload to the last read-back (events)
};

/// Range crop and voxel filter on one device and one stream of its own. Not thread-safe:
/// one call at a time per object (the Localizer keeps one per concurrent caller).
class CudaScanFilter {
 public:
  /// Uses device `device` (-1: the calling thread's current device) and creates its own
  /// non-blocking stream there, so its work neither waits for nor holds up the legacy
  /// default stream or an aligner's stream. Throws CudaError when CUDA is not compiled in
  /// or no device is usable.
  explicit CudaScanFilter(int device = -1);
  ~CudaScanFilter();
  CudaScanFilter(const CudaScanFilter&) = delete;
  CudaScanFilter& operator=(const CudaScanFilter&) = delete;

  /// The same cloud as `leaf > 0 ? voxel_downsample(crop_range(scan, min_range,
  /// max_range), leaf) : crop_range(scan, min_range, max_range)`: the same crop (bit for
  /// bit), the same cells in the same order (ascending lattice index), each centroid and
  /// mean intensity the float mean of the cell's points. The points of a cell are summed
  /// in input order; the CPU filter sums them in PCL's sort order, so a centroid may differ
  /// from the CPU's in the last float bits (on the 64-bit lattice, where the CPU also sums
  /// in input order, they are equal). Intensities are averaged when the scan has them
  /// (has_intensity()), as on the CPU. The origin is kept.
  ///
  /// `leaf` 0 crops only (the Localizer's "no filter"); a negative or non-finite leaf, a
  /// bad range, or a leaf too small for the cropped extent throw Error with the CPU
  /// filter's message. A NaN coordinate is cropped away (its range compares false); an
  /// infinite one is too unless max_range is infinite, and then the lattice check throws.
  /// Calls the device on the calling thread (switching its current device for the call
  /// when it differs). Throws CudaError when a CUDA call fails.
  /// `scan`'s points where they lie, with `intensity` (one per point) or none (null).
  /// With `time` (one per point) the output keeps it (a cell's time the mean of its
  /// points', summed in double as on the CPU); with `time` and `path` every point is first
  /// de-skewed on the device (math::deskew_point, before the crop, as the Localizer's CPU
  /// preprocessing does).
  PointCloud crop_and_downsample(PointCloudView scan, const float* intensity, double min_range, double max_range,
                                 double leaf, const float* time = nullptr, const math::SweepPath* path = nullptr);
  /// The same for a cloud, its intensities and times included when it has them.
  PointCloud crop_and_downsample(const PointCloud& scan, double min_range, double max_range, double leaf) {
    return crop_and_downsample(scan, scan.intensity_or_null(), min_range, max_range, leaf, scan.time_or_null());
  }

  /// The device the filter runs on.
  int device() const noexcept;
  /// Telemetry since construction.
  const CudaFilterTelemetry& telemetry() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndtcu::detail
