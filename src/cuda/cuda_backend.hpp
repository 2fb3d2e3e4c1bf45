#pragma once
// The CUDA backend (host-compiler header; the CUDA state hides behind a pimpl). A
// CudaBackend is an AlignBackend that owns everything that lives on the device for a
// sequence of alignments: the voxel map (DeviceVoxelMap: uploaded once per map, staged or
// taken from a tiled map), the source points of one or more scans (grow-only buffers,
// uploaded once per call), each hypothesis's loop state, the reduction scratch, pinned
// staging and the loop graphs (LoopGraphCache). evaluate() uploads one pose frame (104
// bytes), runs the kernels, reads back the 31 reduced sums and synchronizes once;
// run_fixed_step() runs the fixed-step Newton loop of a whole batch of hypotheses on the
// device. The AlignBackend members (cuda_backend.cpp) make the backend's device current
// and forward to the device members (cuda_backend.cu).
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/voxel_map.hpp>

#include "../ndt/align_backend.hpp"
#include "../ndt/evaluator.hpp"
#include "device_voxel_map.hpp"
#include "ndt_step.hpp"

#include <cstdint>
#include <memory>
#include <vector>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace ndtcu::detail {

struct DeviceVoxelCells;  // cuda_voxel_build.hpp
class DeviceTiledMap;     // device_tiled_map.hpp

/// How the device-resident loop is launched. `Auto` (the default): a batch of one runs
/// its whole loop in one cooperative kernel (grid-wide barriers between the evaluation
/// and the step) when the device supports cooperative launch and the source's blocks are
/// all resident at once; anything else as `Graph`. `Graph`: one launch of a graph whose
/// conditional while node repeats the body (the derivative kernel, then the step kernel)
/// until no hypothesis runs; it is also how a device without cooperative launch runs a
/// batch of one. `Stream`: the same body launched on the stream max_iterations + 1 times,
/// a hypothesis's most evaluations (passes with nothing running return at once). All three
/// evaluate the same blocks and take the same steps, so they give the same bits; the
/// stream form costs a launch per pass and exists for tools that do not follow
/// conditional graph nodes (compute-sanitizer's racecheck). A new backend takes the
/// environment's NDTCU_CUDA_LOOP (`auto`, the default, `graph` or `stream`; any other
/// value is an Error naming it).
enum class LoopLaunch { Auto, Graph, Stream };

/// Device-resident NDT state for one device and one stream.
class CudaBackend final : public AlignBackend {
 public:
  /// Uses `device` (-1: the calling thread's current device) and `stream` (null: the
  /// default stream; the backend never creates or destroys the caller's stream). Every
  /// AlignBackend member runs on that device, whichever thread calls it. Throws CudaError
  /// when CUDA is not compiled in or no device is usable.
  explicit CudaBackend(CUstream_st* stream = nullptr, int device = -1);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // AlignBackend (cuda_backend.cpp): the device made current, then the members below.
  Backend kind() const noexcept override { return Backend::Cuda; }
  void set_map(const std::shared_ptr<const VoxelMap>& map) override;
  std::shared_ptr<const VoxelMap> build_map(PointCloudView target, const VoxelMapOptions& options) override;
  std::size_t use_device_tiled_map(DeviceTiledMap& map, bool take_newer) override;
  void stage_map(const std::shared_ptr<const VoxelMap>& map) override;
  void set_sources(const std::vector<PointCloudView>& sources) override;
  /// The fixed step with PCL's direction runs as device batches (run_fixed_step);
  /// More-Thuente, the saddle-free direction and GpuNewtonLoop::Host run the host loop over
  /// device evaluations, one hypothesis after the other.
  std::vector<OptimizerOutput> align_batch(const std::vector<Hypothesis>& hypotheses, const AlignSettings& settings,
                                           bool keep_trace) override;
  math::DerivativeSums evaluate(int source, const Pose6& pose, bool with_hessian) override;
  std::vector<math::DerivativeSums> evaluate_batch(int source, const std::vector<Pose6>& poses,
                                                   bool with_hessian) override;
  void reset_telemetry() noexcept override;
  BackendTelemetry telemetry() const override;

  /// Uploads `map` (means, inverse covariances, centroids, lookup). The map must outlive
  /// nothing: everything needed is copied. `dense_budget_bytes` bounds the dense index
  /// (VoxelLookup::Auto picks it when it fits). Throws CudaError (with the sizes asked
  /// and free) when the device memory is too small; the backend stays usable.
  void set_map(const VoxelMap& map, VoxelLookup lookup = VoxelLookup::Auto,
               std::size_t dense_budget_bytes = kDenseBudget);
  /// Uses `map` as set_map does, taking its voxels from `cells`, where the GPU build that
  /// `map` was assembled from left them (VoxelMap::build's, through a CudaVoxelizer on
  /// this device): copied on the device, and the hash table and dense index built there,
  /// so that nothing of the map is sent up. Lookups find what set_map's find. Returns
  /// once `cells` is no longer read. Throws Error when `cells` is not `map`'s (another
  /// voxel count), CudaError as set_map does.
  void set_map_from_device(const VoxelMap& map, const DeviceVoxelCells& cells, VoxelLookup lookup = VoxelLookup::Auto,
                           std::size_t dense_budget_bytes = kDenseBudget);
  /// Uploads `map` into a second set of map buffers on a stream of the backend's own,
  /// leaving the map in use alone: the one member that may run on another thread while
  /// this backend evaluates (a worker preparing the next map of a moving vehicle). A later
  /// set_map() of the same VoxelMap object (and lookup arguments) then swaps it in without
  /// an upload: the caller's stream waits on the device for the staging to finish, the
  /// host does not. The buffers grow with headroom and are reused from map to map, the
  /// two alternating; a growth frees a buffer, which synchronizes the device. Staging
  /// another map replaces the staged one. Throws CudaError as set_map does (the map in
  /// use is untouched).
  void stage_map(std::shared_ptr<const VoxelMap> map, VoxelLookup lookup, std::size_t dense_budget_bytes);
  /// Aligns on `map`, the device twin of a tiled map, from now on: binds this backend to
  /// it (one backend at a time; Error while another is bound) and takes its newest
  /// published version when that is newer than the one in use, without waiting (see
  /// device_tiled_map.hpp); without `take_newer` the version in use stays (once bound).
  /// Called between two alignments, never during one. Returns the voxels of the version
  /// in use (0 before the first publish). set_map() and set_map_from_device() unbind it;
  /// `map` must outlive the binding.
  std::size_t use_tiled_map(DeviceTiledMap& map, bool take_newer = true);
  /// One source (set_sources of one).
  void set_source(PointCloudView points) { set_sources({points}); }
  /// Search and Gaussian constants for the following evaluations.
  void configure(SearchMethod search, double outlier_ratio);
  /// Where align_batch runs the fixed step's Newton loop (ExecutionOptions::gpu_loop;
  /// Device, the default, when the settings and the driver allow it).
  void set_gpu_loop(GpuNewtonLoop loop) noexcept { gpu_loop_ = loop; }

  /// True when the device-resident loop can run: launched as a graph, it needs a driver
  /// that runs conditional graph nodes (CUDA 12.4 and later).
  bool device_loop_supported() const noexcept;
  /// How run_fixed_step launches the loop (LoopLaunch).
  void set_loop_launch(LoopLaunch launch) noexcept;
  LoopLaunch loop_launch() const noexcept;
  /// Runs the fixed-step Newton loop (kernels/ndt_step.hpp) of every hypothesis on the
  /// device: one graph launch whose conditional loop alternates the derivative kernel
  /// (all running hypotheses, several blocks each) and the step kernel (one block per
  /// running hypothesis: the fixed-order reduction of its blocks, then its step), until
  /// every hypothesis has stopped; then one read-back. A hypothesis's bits do not depend
  /// on the others or on their number. Traces are read back when `keep_trace`. At most
  /// 65535 hypotheses (align_batch runs larger batches in parts). Throws CudaError when
  /// device_loop_supported() is false or the device memory is too small (the backend
  /// stays usable).
  std::vector<OptimizerOutput> run_fixed_step(const std::vector<Hypothesis>& hypotheses, const math::StepRules& rules,
                                              bool keep_trace);
  /// Which lookup the current map uses.
  VoxelLookup lookup() const noexcept;

  /// The dense index's default budget (VoxelLookup::Auto).
  static constexpr std::size_t kDenseBudget = std::size_t(256) << 20;

 private:
  friend class CudaEvaluator;
  // The device members behind evaluate() and evaluate_batch(), on the current device.
  math::DerivativeSums evaluate_on_device(int source, const Pose6& pose, bool with_hessian);
  std::vector<math::DerivativeSums> evaluate_batch_on_device(int source, const std::vector<Pose6>& poses,
                                                             bool with_hessian);
  void set_sources_on_device(const std::vector<PointCloudView>& sources);

  struct Impl;
  int device_;
  GpuNewtonLoop gpu_loop_ = GpuNewtonLoop::Device;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<const VoxelMap> map_;  // the map set_map(shared_ptr) set, while it is the one in use
  double upload_ms_ = 0.0;
};

/// DerivativeEvaluator over a CudaBackend that already holds the map and the sources.
class CudaEvaluator final : public DerivativeEvaluator {
 public:
  /// `backend` must outlive the evaluator; evaluations are of source `source`.
  explicit CudaEvaluator(CudaBackend& backend, int source = 0) : backend_(backend), source_(source) {}
  math::DerivativeSums evaluate_sums(const Pose6& pose, bool with_hessian) override {
    return backend_.evaluate_on_device(source_, pose, with_hessian);
  }

 private:
  CudaBackend& backend_;
  int source_;
};

/// Total DeviceBuffer allocations in this process (0 without CUDA).
std::uint64_t device_allocations() noexcept;

}  // namespace ndtcu::detail
