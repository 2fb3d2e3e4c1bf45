#pragma once
// The CUDA backend's host-side face (host compiler only; the CUDA state hides behind a
// pimpl). A CudaBackend owns everything that lives on the device for a sequence of
// alignments: the voxel map (uploaded once per map), the source points (grow-only
// buffers, uploaded once per alignment), the per-point derivative buffers of the
// precomputed variant, the reduction scratch and pinned staging. Each evaluate() uploads
// 64 bytes of pose terms, runs the kernels on the stream, reads back the 31 reduced sums
// and synchronizes once.
#include <ndtcu/settings.hpp>
#include <ndtcu/voxel_map.hpp>

#include "../ndt/evaluator.hpp"

#include <Eigen/Core>

#include <cstdint>
#include <memory>
#include <vector>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace ndtcu::detail {

/// How the per-point Jacobian and point Hessian reach the derivative kernel. Fused is the
/// default: measured on an H100 (KITTI 00 0<-1, 1.5k to 125k source points,
/// ndtcu_gpu_bench, BENCHMARK.md) it costs 5-15 us less GPU time per evaluation than
/// Precomputed, whose extra launch and 23 doubles per point written and read back cost
/// more than recomputing them in registers.
enum class DerivativeVariant {
  Fused,        ///< computed in registers inside the one per-iteration kernel
  Precomputed,  ///< written by a first kernel into preallocated per-point buffers, then read
};

/// How a voxel's lattice cell is found on the device. The radius search makes 27 lookups
/// per point, each a dependent load chain, so lookup latency sets the kernel's time:
/// measured on an H100 the dense index (one load) takes 27-30 us per evaluation against
/// 46-48 us for the hash (probe, key compare, value load) at 1.5k-20k points, and 91 vs
/// 117 us at 125k. Auto therefore takes the dense index whenever the occupied lattice box
/// fits the budget (a 1 km x 1 km x 50 m map at 2 m is 6 million cells, 25 MB) and falls
/// back to the hash for wide or sparse maps. Sorted keys with a binary search were not
/// built: they need more dependent loads per lookup than the hash.
enum class VoxelLookup {
  Auto,   ///< dense when the occupied box fits the budget, hash otherwise
  Hash,   ///< the map's open-addressing hash (linear probing)
  Dense,  ///< a dense index over the occupied lattice box
};

/// The fixed-step Newton loop's rules, as optimize() applies them (GpuNewtonLoop::Device).
struct DeviceLoopSettings {
  double step_min = 0.0;        ///< shortest step (epsilon / 2, as PCL and Autoware)
  double step_max = 0.0;        ///< longest step (the step size)
  double epsilon = 0.0;         ///< convergence threshold
  int max_iterations = 0;       ///< Newton iterations at most
  bool pcl_convergence = false; ///< PCL's stopping rule instead of Autoware's
};

/// What the device-resident loop produced (poses map-relative).
struct DeviceLoopOutput {
  Pose6 pose = Pose6::Zero();
  int iterations = 0;
  int evaluations = 0;
  StopReason reason = StopReason::MaxIterations;
  math::DerivativeSums final_sums{};        ///< the evaluation at the final pose
  std::vector<IterationTrace> trace;        ///< one entry per iteration
};

/// What the device did, summed since the last reset.
struct CudaTelemetry {
  std::uint64_t evaluations = 0;       ///< evaluations (Newton iterations and line-search trials)
  std::uint64_t graph_builds = 0;      ///< device-loop graphs built (a new source size or variant)
  std::uint64_t bytes_up = 0;          ///< per-evaluation bytes sent to the device
  std::uint64_t bytes_down = 0;        ///< per-evaluation bytes read back
  std::uint64_t setup_bytes_up = 0;    ///< map and scan uploads
  double gpu_ms = 0.0;                 ///< device time of the evaluation kernels (and the device loop's step kernels)
  std::uint64_t device_allocations = 0;  ///< DeviceBuffer allocations made by this backend
};

/// Device-resident NDT state for one device and one stream.
class CudaBackend {
 public:
  /// Uses the current CUDA device and `stream` (null: the default stream; the backend
  /// never creates or destroys the caller's stream). Throws CudaError when CUDA is not
  /// compiled in or no device is usable.
  explicit CudaBackend(CUstream_st* stream = nullptr);
  ~CudaBackend();
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  /// Uploads `map` (means, inverse covariances, centroids, lookup). The map must outlive
  /// nothing: everything needed is copied. `dense_budget_bytes` bounds the dense index
  /// (VoxelLookup::Auto picks it when it fits). Throws CudaError (with the sizes asked
  /// and free) when the device memory is too small; the backend stays usable.
  void set_map(const VoxelMap& map, VoxelLookup lookup = VoxelLookup::Auto,
               std::size_t dense_budget_bytes = std::size_t(256) << 20);
  /// Uploads the source points (relative to the source origin); buffers only grow.
  void set_source(const std::vector<Eigen::Vector3f>& points);
  /// Search, Gaussian constants and variant for the following evaluations.
  void configure(SearchMethod search, double outlier_ratio, DerivativeVariant variant = DerivativeVariant::Fused);

  /// The reduced sums at `pose` (map-relative), exactly as CpuEvaluator reduces them.
  math::DerivativeSums evaluate(const Pose6& pose, bool with_hessian);

  /// True when the driver runs conditional graph nodes (CUDA 12.4 and later), which the
  /// device-resident loop needs.
  bool device_loop_supported() const noexcept;
  /// Runs optimize()'s fixed-step Newton loop from `initial` (map-relative) entirely on the
  /// device: one graph launch whose conditional loop alternates the derivative kernel and
  /// a one-thread step kernel (the Newton direction by LU with partial pivoting, the
  /// step clamp, the convergence rule), then one read-back. Throws CudaError when
  /// device_loop_supported() is false.
  DeviceLoopOutput run_fixed_step(const Pose6& initial, const DeviceLoopSettings& settings);
  /// Which lookup the current map uses.
  VoxelLookup lookup() const noexcept;
  /// Telemetry since construction or the last reset.
  const CudaTelemetry& telemetry() const noexcept;
  /// Zeroes the telemetry.
  void reset_telemetry() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// DerivativeEvaluator over a CudaBackend that already holds the map and the source.
class CudaEvaluator final : public DerivativeEvaluator {
 public:
  /// `backend` must outlive the evaluator.
  explicit CudaEvaluator(CudaBackend& backend) : backend_(backend) {}
  Evaluation evaluate(const Pose6& pose, bool with_hessian) override {
    return to_evaluation(backend_.evaluate(pose, with_hessian));
  }

 private:
  CudaBackend& backend_;
};

/// Total DeviceBuffer allocations in this process (0 without CUDA).
std::uint64_t device_allocations() noexcept;

}  // namespace ndtcu::detail
