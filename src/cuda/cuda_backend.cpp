// The CUDA backend's AlignBackend members: each makes the backend's device current
// (DeviceScope), whichever thread calls, and forwards to the device members
// (cuda_backend.cu); batches larger than one launch holds run in parts.
#include "cuda_backend.hpp"

#include "cuda_voxel_build.hpp"
#include "device_scope.hpp"

#include "../nvtx.hpp"
#include "../map/voxel_cells.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

namespace ndtcu::detail {
namespace {

// Hypotheses or poses per CUDA launch: a grid dimension holds at most 65535 blocks, and
// a batch larger than this runs in parts of this size.
constexpr std::size_t kBatchPart = 32768;
// Poses per evaluation launch: a larger evaluation runs in parts of this size, so its
// pinned staging (frames and sums, 352 bytes a pose) stays small. Pinning is slow: the
// staging of a whole 30,168-pose screen made it take 14-20 ms on an H200's host, for 0.9
// ms of GPU time; see BENCHMARK.md, "The initial pose search's screen".
constexpr std::size_t kEvaluationPart = 4096;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void CudaBackend::set_map(const std::shared_ptr<const VoxelMap>& map) {
  DeviceScope scope(device_);
  if (map == map_) return;
  NDTCU_NVTX_RANGE("upload");
  const auto t0 = std::chrono::steady_clock::now();
  set_map(*map);  // leaves no map behind when it fails
  map_ = map;
  upload_ms_ += ms_since(t0);
}

std::shared_ptr<const VoxelMap> CudaBackend::build_map(PointCloudView target, const VoxelMapOptions& options) {
  DeviceScope scope(device_);
  VoxelMapOptions o = options;
  o.backend = Backend::Cuda;
  o.device = device_;
  // A voxelizer for this build only: its buffers (the points, their keys, the sort) go
  // with it, and the map's arrays are copied out of them on the device.
  CudaVoxelizer voxelizer(false);
  DeviceVoxelCells cells;
  auto map = std::make_shared<const VoxelMap>(build_voxel_map(target, o, &voxelizer, &cells));
  set_map_from_device(*map, cells);  // leaves no map behind when it fails
  map_ = map;
  return map;
}

void CudaBackend::stage_map(const std::shared_ptr<const VoxelMap>& map) {
  DeviceScope scope(device_);
  stage_map(map, VoxelLookup::Auto, kDenseBudget);
}

std::size_t CudaBackend::use_device_tiled_map(DeviceTiledMap& map, bool take_newer) {
  DeviceScope scope(device_);
  return use_tiled_map(map, take_newer);
}

void CudaBackend::set_sources(const std::vector<PointCloudView>& sources) {
  DeviceScope scope(device_);
  NDTCU_NVTX_RANGE("upload");
  const auto t0 = std::chrono::steady_clock::now();
  set_sources_on_device(sources);
  upload_ms_ += ms_since(t0);
}

std::vector<OptimizerOutput> CudaBackend::align_batch(const std::vector<Hypothesis>& hypotheses,
                                                      const AlignSettings& s, bool keep_trace) {
  DeviceScope scope(device_);
  std::vector<OptimizerOutput> out(hypotheses.size());
  ExecutionOptions execution;
  execution.gpu_loop = gpu_loop_;
  if (wants_device_loop(s, execution) && device_loop_supported()) {
    // The grid holds at most 65535 running hypotheses; larger batches run in parts, which
    // changes no bit (a hypothesis's result does not depend on the others).
    for (std::size_t first = 0; first < hypotheses.size(); first += kBatchPart) {
      const std::size_t count = std::min(kBatchPart, hypotheses.size() - first);
      const auto begin = hypotheses.begin() + static_cast<std::ptrdiff_t>(first);
      std::vector<OptimizerOutput> r =
          run_fixed_step(std::vector<Hypothesis>(begin, begin + static_cast<std::ptrdiff_t>(count)), step_rules(s),
                         keep_trace);
      std::move(r.begin(), r.end(), out.begin() + static_cast<std::ptrdiff_t>(first));
    }
    return out;
  }
  for (std::size_t k = 0; k < hypotheses.size(); ++k) {
    CudaEvaluator e(*this, hypotheses[k].source);
    out[k] = optimize(e, hypotheses[k].start, s, keep_trace, hypotheses[k].prior_center);
  }
  return out;
}

math::DerivativeSums CudaBackend::evaluate(int source, const Pose6& pose, bool with_hessian) {
  DeviceScope scope(device_);
  return evaluate_on_device(source, pose, with_hessian);
}

std::vector<math::DerivativeSums> CudaBackend::evaluate_batch(int source, const std::vector<Pose6>& poses,
                                                              bool with_hessian) {
  DeviceScope scope(device_);
  // In parts of kEvaluationPart poses (a wide recovery search screens about 87,000);
  // each pose's sums do not depend on the others, so the parts change no bit.
  if (poses.size() <= kEvaluationPart) return evaluate_batch_on_device(source, poses, with_hessian);
  std::vector<math::DerivativeSums> out;
  out.reserve(poses.size());
  std::vector<Pose6> part;
  for (std::size_t first = 0; first < poses.size(); first += kEvaluationPart) {
    const std::size_t count = std::min(kEvaluationPart, poses.size() - first);
    part.assign(poses.begin() + static_cast<std::ptrdiff_t>(first),
                poses.begin() + static_cast<std::ptrdiff_t>(first + count));
    std::vector<math::DerivativeSums> r = evaluate_batch_on_device(source, part, with_hessian);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

}  // namespace ndtcu::detail
