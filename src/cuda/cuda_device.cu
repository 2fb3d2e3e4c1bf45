// Device queries, the allocation counter, and the rigid transform of a point array
// (kernels/rigid_transform.cuh).
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_scope.hpp"
#include "rigid_transform.cuh"
#include "transform_points.hpp"

#include <ndtcu/cuda_device.hpp>

namespace ndtcu {
namespace detail {

namespace {
std::atomic<std::uint64_t> g_allocations{0};

}  // namespace

int resolve_device(int requested) {
  if (requested < -1) {
    throw Error("device " + std::to_string(requested) + ": not a CUDA device index (-1 = the current device, else >= 0)");
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
  if (requested == -1) {
    int current = 0;
    NDTCU_CUDA_CHECK(cudaGetDevice(&current));
    return current;
  }
  if (requested >= count) {
    throw Error("device " + std::to_string(requested) + ": no such CUDA device (" + std::to_string(count) +
                (count == 1 ? " device is" : " devices are") + " present" +
                (count > 0 ? ", indices 0 to " + std::to_string(count - 1) : std::string()) + ")");
  }
  return requested;
}

DeviceScope::DeviceScope(int device) {
  if (device < 0) return;
  int current = 0;
  NDTCU_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    NDTCU_CUDA_CHECK(cudaSetDevice(device));
    previous_ = current;
  }
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // never throws; a failure would mask the first error
}

std::uint64_t device_allocation_count() noexcept { return g_allocations.load(); }
void count_device_allocation() noexcept { ++g_allocations; }

std::vector<Eigen::Vector3f> cuda_transform_points(const std::vector<Eigen::Vector3f>& points,
                                                   const Eigen::Matrix4f& transform) {
  std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw CudaError("no usable CUDA device: " + why);
  static_assert(sizeof(Eigen::Vector3f) == sizeof(float3), "Vector3f and float3 must share a layout");
  const int n = static_cast<int>(points.size());
  std::vector<Eigen::Vector3f> result(points.size());
  if (n == 0) return result;
  Rigid T{};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) T.r[3 * r + c] = transform(r, c);
    T.t[r] = transform(r, 3);
  }
  DeviceBuffer<float3> in, out(points.size());
  in.upload(reinterpret_cast<const float3*>(points.data()), points.size());
  constexpr int kBlock = 256;
  transform_points_kernel<<<grid_blocks(n, kBlock), kBlock>>>(in.data(), out.data(), n, T);
  NDTCU_CUDA_CHECK_LAUNCH();
  out.download(reinterpret_cast<float3*>(result.data()), points.size());
  NDTCU_CUDA_CHECK(cudaDeviceSynchronize());
  return result;
}

}  // namespace detail

bool cuda_compiled() noexcept { return true; }

std::string cuda_unavailable_reason() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("the CUDA runtime reports ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "no CUDA device is present";
  return "";
}

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return out;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    CudaDeviceInfo info;
    info.index = d;
    info.name = prop.name;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.multiprocessors = prop.multiProcessorCount;
    info.total_memory_bytes = prop.totalGlobalMem;
    int previous = 0;
    if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(d) == cudaSuccess) {
      std::size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) info.free_memory_bytes = free_b;
      cudaSetDevice(previous);
    }
    (void)cudaGetLastError();
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace ndtcu
