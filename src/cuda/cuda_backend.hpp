#pragma once
// The CUDA backend's host-side face (host compiler only; the CUDA state hides behind a
// pimpl). A CudaBackend owns everything that lives on the device for a sequence of
// alignments: the voxel map (uploaded once per map), the source points of one or more
// scans (grow-only buffers, uploaded once per call), each hypothesis's loop state, the
// reduction scratch and pinned staging. evaluate() uploads one pose frame (104 bytes),
// runs the kernels, reads back the 31 reduced sums and synchronizes once; run_fixed_step()
// runs the fixed-step Newton loop of a whole batch of hypotheses on the device.
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/voxel_map.hpp>

#include "../ndt/evaluator.hpp"
#include "ndt_step.hpp"

#include <Eigen/Core>

#include <cstdint>
#include <memory>
#include <vector>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace ndtcu::detail {

struct DeviceVoxelCells;  // cuda_voxel_build.hpp
class DeviceTiledMap;     // device_tiled_map.hpp

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

/// One hypothesis of a device batch: its start (map-relative) and the source it aligns.
struct DeviceHypothesis {
  Pose6 start = Pose6::Zero();
  int source = 0;  ///< index into the sources of set_sources
  Pose6 prior_center = Pose6::Zero();  ///< the pose prior's centre (when the rules have one)
};

/// What the device-resident loop produced for one hypothesis (poses map-relative).
struct DeviceLoopOutput {
  Pose6 pose = Pose6::Zero();
  int iterations = 0;
  int evaluations = 0;
  StopReason reason = StopReason::MaxIterations;
  math::DerivativeSums final_sums{};        ///< the evaluation at the final pose
  std::vector<IterationTrace> trace;        ///< one entry per iteration, when asked for
};

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

/// What the device did, summed since the last reset.
struct CudaTelemetry {
  std::uint64_t evaluations = 0;       ///< evaluations (Newton iterations and line-search trials)
  std::uint64_t graph_builds = 0;      ///< device-loop graphs built (a new grid shape)
  std::uint64_t cooperative_loops = 0; ///< device loops run by the cooperative kernel (LoopLaunch::Auto)
  std::uint64_t bytes_up = 0;          ///< per-evaluation bytes sent to the device
  std::uint64_t bytes_down = 0;        ///< per-evaluation bytes read back
  std::uint64_t setup_bytes_up = 0;    ///< map and scan uploads
  double gpu_ms = 0.0;                 ///< device time of the evaluation kernels (and the device loop's step kernels)
  std::uint64_t device_allocations = 0;  ///< DeviceBuffer allocations made by this backend
  std::uint64_t map_swaps = 0;         ///< staged maps swapped in by set_map
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
  /// Uses `map` as set_map does, taking its voxels from `cells`, where the GPU build that
  /// `map` was assembled from left them (VoxelMap::build's, through a CudaVoxelizer on
  /// this device): copied on the device, and the hash table and dense index built there,
  /// so that nothing of the map is sent up. Lookups find what set_map's find. Returns
  /// once `cells` is no longer read. Throws Error when `cells` is not `map`'s (another
  /// voxel count), CudaError as set_map does.
  void set_map_from_device(const VoxelMap& map, const DeviceVoxelCells& cells, VoxelLookup lookup = VoxelLookup::Auto,
                           std::size_t dense_budget_bytes = std::size_t(256) << 20);
  /// Uploads `map` into a second set of map buffers on a stream of the backend's own,
  /// leaving the map in use alone: the one member that may run on another thread while
  /// this backend evaluates (a worker preparing the next map of a moving vehicle). A later
  /// set_map() of the same VoxelMap object (and lookup arguments) then swaps it in without
  /// an upload: the caller's stream waits on the device for the staging to finish, the
  /// host does not. The buffers grow with headroom and are reused from map to map, the
  /// two alternating; a growth frees a buffer, which synchronizes the device. Staging
  /// another map replaces the staged one. Throws CudaError as set_map does (the map in
  /// use is untouched).
  void stage_map(std::shared_ptr<const VoxelMap> map, VoxelLookup lookup = VoxelLookup::Auto,
                 std::size_t dense_budget_bytes = std::size_t(256) << 20);
  /// Aligns on `map`, the device twin of a tiled map, from now on: binds this backend to
  /// it (one backend at a time; Error while another is bound) and takes its newest
  /// published version when that is newer than the one in use, without waiting (see
  /// device_tiled_map.hpp); without `take_newer` the version in use stays (once bound).
  /// Called between two alignments, never during one. Returns the voxels of the version
  /// in use (0 before the first publish). set_map() and set_map_from_device() unbind it;
  /// `map` must outlive the binding.
  std::size_t use_tiled_map(DeviceTiledMap& map, bool take_newer = true);
  /// Uploads the points of B sources (each relative to its own origin; the views' origins
  /// are not used), one after the other into grow-only buffers; hypotheses name them by
  /// index. The points are read during the call only (copied into the device's layout as
  /// they are uploaded).
  void set_sources(const std::vector<PointCloudView>& sources);
  /// One source (set_sources of one).
  void set_source(PointCloudView points) { set_sources({points}); }
  /// Search and Gaussian constants for the following evaluations.
  void configure(SearchMethod search, double outlier_ratio);

  /// The reduced sums of source `source` at `pose` (map-relative), by the kernel the loop
  /// runs.
  math::DerivativeSums evaluate(const Pose6& pose, bool with_hessian, int source = 0);
  /// The reduced sums of source `source` at every pose, in one launch of the derivative
  /// kernel over all of them and one read-back; each has the bits of evaluate() there.
  std::vector<math::DerivativeSums> evaluate_batch(const std::vector<Pose6>& poses, bool with_hessian,
                                                   int source = 0);

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
  /// on the others or on their number. Traces are read back when `keep_trace`. Throws
  /// CudaError when device_loop_supported() is false or the device memory is too small
  /// (the backend stays usable).
  std::vector<DeviceLoopOutput> run_fixed_step(const std::vector<DeviceHypothesis>& hypotheses,
                                               const math::StepRules& rules, bool keep_trace);
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

/// DerivativeEvaluator over a CudaBackend that already holds the map and the sources.
class CudaEvaluator final : public DerivativeEvaluator {
 public:
  /// `backend` must outlive the evaluator; evaluations are of source `source`.
  explicit CudaEvaluator(CudaBackend& backend, int source = 0) : backend_(backend), source_(source) {}
  math::DerivativeSums evaluate_sums(const Pose6& pose, bool with_hessian) override {
    return backend_.evaluate(pose, with_hessian, source_);
  }

 private:
  CudaBackend& backend_;
  int source_;
};

/// Total DeviceBuffer allocations in this process (0 without CUDA).
std::uint64_t device_allocations() noexcept;

}  // namespace ndtcu::detail
