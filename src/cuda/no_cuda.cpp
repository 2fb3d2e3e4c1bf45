// Built instead of the CUDA sources when ndtcu is configured without CUDA: every CUDA
// entry point answers "not compiled in" instead of failing to link.
#include "cuda_voxel_build.hpp"
#include "device_scope.hpp"
#include "transform_points.hpp"
#include "../ndt/pyramid_scorer.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>

namespace ndtcu {

bool cuda_compiled() noexcept { return false; }
std::vector<CudaDeviceInfo> cuda_devices() { return {}; }
std::string cuda_unavailable_reason() { return "this build of ndtcu has no CUDA support (NDTCU_WITH_CUDA=OFF)"; }

namespace detail {
// Without CUDA nothing runs on a device: the index is only checked for its form, and the
// CUDA objects that would use it refuse to be made.
int resolve_device(int requested) {
  if (requested < -1) {
    throw Error("device " + std::to_string(requested) + ": not a CUDA device index (-1 = the current device, else >= 0)");
  }
  return requested;
}
DeviceScope::DeviceScope(int) {}
DeviceScope::~DeviceScope() = default;
std::vector<Eigen::Vector3f> cuda_transform_points(const std::vector<Eigen::Vector3f>&, const Eigen::Matrix4f&) {
  throw CudaError("CUDA requested, but " + cuda_unavailable_reason());
}
VoxelCells cuda_voxel_cells(PointCloudView, float, const VoxelMapOptions&) {
  throw CudaError("a GPU voxel map build was requested, but " + cuda_unavailable_reason());
}
struct CudaVoxelizer::Impl {};
CudaVoxelizer::CudaVoxelizer(bool) {
  throw CudaError("a GPU voxel map build was requested, but " + cuda_unavailable_reason());
}
CudaVoxelizer::~CudaVoxelizer() = default;
VoxelCells CudaVoxelizer::usable_cells(PointCloudView, float, const VoxelMapOptions&, DeviceVoxelCells*) { return {}; }
OccupiedCells CudaVoxelizer::occupied_cells(PointCloudView, float, const VoxelMapOptions&, DeviceOccupiedCells*) {
  return {};
}
std::unique_ptr<PyramidScorer> make_cuda_pyramid_scorer(const ScorePyramid&, CUstream_st*, int) {
  throw CudaError("a GPU global search was requested, but " + cuda_unavailable_reason());
}
}  // namespace detail

}  // namespace ndtcu

// Without CUDA compiled in, constructing the CUDA backend is the error; the other members
// exist only so that code naming them links.
#include "cuda_backend.hpp"

namespace ndtcu::detail {

struct CudaBackend::Impl {};
CudaBackend::CudaBackend(CUstream_st*, int) : device_(-1) {
  throw CudaError("CUDA backend unavailable: " + cuda_unavailable_reason());
}
CudaBackend::~CudaBackend() = default;
void CudaBackend::set_map(const VoxelMap&, VoxelLookup, std::size_t) {}
void CudaBackend::set_map_from_device(const VoxelMap&, const DeviceVoxelCells&, VoxelLookup, std::size_t) {}
void CudaBackend::stage_map(std::shared_ptr<const VoxelMap>, VoxelLookup, std::size_t) {}
std::size_t CudaBackend::use_tiled_map(DeviceTiledMap&, bool) { return 0; }
void CudaBackend::set_sources_on_device(const std::vector<PointCloudView>&) {}
void CudaBackend::configure(SearchMethod, double) {}
math::DerivativeSums CudaBackend::evaluate_on_device(int, const Pose6&, bool) {
  throw CudaError("CUDA backend unavailable: " + cuda_unavailable_reason());
}
std::vector<math::DerivativeSums> CudaBackend::evaluate_batch_on_device(int, const std::vector<Pose6>&, bool) {
  throw CudaError("CUDA backend unavailable: " + cuda_unavailable_reason());
}
bool CudaBackend::device_loop_supported() const noexcept { return false; }
void CudaBackend::set_loop_launch(LoopLaunch) noexcept {}
LoopLaunch CudaBackend::loop_launch() const noexcept { return LoopLaunch::Auto; }
std::vector<OptimizerOutput> CudaBackend::run_fixed_step(const std::vector<Hypothesis>&, const math::StepRules&, bool) {
  throw CudaError("CUDA backend unavailable: " + cuda_unavailable_reason());
}
VoxelLookup CudaBackend::lookup() const noexcept { return VoxelLookup::Hash; }
BackendTelemetry CudaBackend::telemetry() const { return {}; }
void CudaBackend::reset_telemetry() noexcept {}
std::uint64_t device_allocations() noexcept { return 0; }

}  // namespace ndtcu::detail

// The tiled map's device twin: constructing it is the error.
#include "device_tiled_map.hpp"

namespace ndtcu::detail {

struct DeviceTiledMap::Impl {};
DeviceTiledMap::DeviceTiledMap(double, float, float, std::size_t) {
  throw CudaError("a tiled map on the GPU was requested, but " + cuda_unavailable_reason());
}
DeviceTiledMap::~DeviceTiledMap() = default;
DevicePublishStats DeviceTiledMap::publish(const std::vector<std::uint64_t>&, const std::vector<VoxelWrite>&,
                                           const std::vector<VoxelAdopt>&) {
  return {};
}
std::vector<std::uint32_t> DeviceTiledMap::stage(const DeviceOccupiedCells&, const std::vector<std::uint32_t>&) {
  return {};
}
void DeviceTiledMap::release_staged(const std::vector<std::uint32_t>&) {}
bool DeviceTiledMap::acquire(const void*, CUstream_st*, std::uint64_t, DeviceMapVersion&) { return false; }
void DeviceTiledMap::release(const void*, CUstream_st*) noexcept {}
std::vector<std::uint64_t> DeviceTiledMap::keys() const { return {}; }
double DeviceTiledMap::resolution() const noexcept { return 0.0; }
std::size_t DeviceTiledMap::voxels() const { return 0; }
std::size_t DeviceTiledMap::device_bytes() const { return 0; }

}  // namespace ndtcu::detail

// The scan filter likewise: constructing it is the error.
#include "cuda_filter.hpp"

namespace ndtcu::detail {

struct CudaScanFilter::Impl {
  CudaFilterTelemetry telemetry;
};
CudaScanFilter::CudaScanFilter(int) { throw CudaError("CUDA scan filter unavailable: " + cuda_unavailable_reason()); }
CudaScanFilter::~CudaScanFilter() = default;
PointCloud CudaScanFilter::crop_and_downsample(PointCloudView, const float*, double, double, double, const float*,
                                               const math::SweepPath*) {
  throw CudaError("CUDA scan filter unavailable: " + cuda_unavailable_reason());
}
int CudaScanFilter::device() const noexcept { return -1; }
const CudaFilterTelemetry& CudaScanFilter::telemetry() const noexcept {
  static const CudaFilterTelemetry none;
  return none;
}

}  // namespace ndtcu::detail
