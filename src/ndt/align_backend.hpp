#pragma once
// The one dispatch point between the Aligner and a backend. Backend is resolved once, in
// make_align_backend, into an AlignBackend; Aligner and Localizer then only call through
// this interface and never ask which backend they hold.
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/voxel_map.hpp>

#include "evaluator.hpp"
#include "optimizer.hpp"

#include <Eigen/Core>

#include <cstdint>
#include <memory>
#include <vector>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace ndtcu::detail {

class DeviceTiledMap;  // ../cuda/device_tiled_map.hpp

/// One hypothesis of a batch: where it starts (map-relative, internal) and which of the
/// sources set by set_sources it aligns.
struct Hypothesis {
  Pose6 start = Pose6::Zero();
  int source = 0;
  Pose6 prior_center = Pose6::Zero();  ///< the pose prior's centre, map-relative (when the settings have one)
};

/// What a backend did since its last reset_telemetry (AlignTimings' backend part, and the
/// CUDA backend's counters; the CPU backend reports none).
struct BackendTelemetry {
  double upload_ms = 0.0;                ///< map (when it changed) and source upload
  double gpu_ms = 0.0;                   ///< device time of the kernels
  std::uint64_t bytes_up = 0;            ///< per-evaluation (and per-batch) bytes sent
  std::uint64_t bytes_down = 0;          ///< bytes read back
  std::uint64_t setup_bytes_up = 0;      ///< source (and map) upload bytes
  std::uint64_t evaluations = 0;         ///< evaluations (Newton iterations and line-search trials)
  std::uint64_t graph_builds = 0;        ///< device-loop graphs built (a new grid shape)
  std::uint64_t cooperative_loops = 0;   ///< device loops run by the cooperative kernel (LoopLaunch::Auto)
  std::uint64_t device_allocations = 0;  ///< DeviceBuffer allocations made by the backend
  std::uint64_t map_swaps = 0;           ///< staged or tiled map versions swapped in
};

/// A backend that aligns batches of hypotheses against one voxel map.
class AlignBackend {
 public:
  virtual ~AlignBackend() = default;
  /// The backend this is (never Backend::Auto).
  virtual Backend kind() const noexcept = 0;
  /// Uses `map` for the following calls (the pointer must stay valid until the next
  /// set_map). Cheap when it is the map already set.
  virtual void set_map(const std::shared_ptr<const VoxelMap>& map) = 0;
  /// The voxel map of `target` by `options`, built where this backend runs (the CPU's
  /// reference build, or the GPU's), and set as by set_map. A CUDA backend takes the map's
  /// device arrays from the GPU build where they lie, without sending the map back up.
  virtual std::shared_ptr<const VoxelMap> build_map(PointCloudView target, const VoxelMapOptions& options);
  /// Aligns on `map`, a tiled map's device twin, and returns the voxels of its version in
  /// use; with `take_newer` a version published since the last call is taken first
  /// (between two alignments). Only a CUDA backend has one to align on: Error otherwise.
  virtual std::size_t use_device_tiled_map(DeviceTiledMap& map, bool take_newer);
  /// Prepares `map` for a later set_map while the current one stays in use; may run on
  /// another thread than the other members (see CudaBackend::stage_map). The CPU backend
  /// has nothing to prepare.
  virtual void stage_map(const std::shared_ptr<const VoxelMap>& map) { (void)map; }
  /// The source points of the following calls (each relative to its cloud's origin; the
  /// views' origins are not used). The memory the views point to is read where it lies and
  /// must stay valid, and unchanged, until the next set_sources.
  virtual void set_sources(const std::vector<PointCloudView>& sources) = 0;
  /// Runs the Newton loop of `settings` for every hypothesis and returns one output per
  /// hypothesis (map-relative), each with the bits of a batch of one.
  virtual std::vector<OptimizerOutput> align_batch(const std::vector<Hypothesis>& hypotheses,
                                                   const AlignSettings& settings, bool keep_trace) = 0;
  /// The derivative sums of source `source` at `pose` (map-relative).
  virtual math::DerivativeSums evaluate(int source, const Pose6& pose, bool with_hessian) = 0;
  /// The sums of source `source` at every pose, as one batch; each has the bits of
  /// evaluate() at that pose.
  virtual std::vector<math::DerivativeSums> evaluate_batch(int source, const std::vector<Pose6>& poses,
                                                           bool with_hessian) = 0;
  /// Zeroes the telemetry (at the start of an Aligner call).
  virtual void reset_telemetry() noexcept {}
  /// What the backend did since the last reset.
  virtual BackendTelemetry telemetry() const { return {}; }
};

/// Resolves `execution.backend` by resolve_backend (Auto: CUDA when a device is usable) into
/// a backend with `settings`' search and Gaussian constants and `execution`'s threads,
/// device, stream and Newton loop. Throws CudaError for Backend::Cuda without a usable
/// device.
std::unique_ptr<AlignBackend> make_align_backend(const AlignSettings& settings, const ExecutionOptions& execution);

}  // namespace ndtcu::detail
