// Built instead of the CUDA sources when ndtcu is configured without CUDA: every CUDA
// entry point answers "not compiled in" instead of failing to link.
#include "transform_points.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>

namespace ndtcu {

bool cuda_compiled() noexcept { return false; }
std::vector<CudaDeviceInfo> cuda_devices() { return {}; }
std::string cuda_unavailable_reason() { return "this build of ndtcu has no CUDA support (NDTCU_WITH_CUDA=OFF)"; }

namespace detail {
std::vector<Eigen::Vector3f> cuda_transform_points(const std::vector<Eigen::Vector3f>&, const Eigen::Matrix4f&) {
  throw CudaError("CUDA requested, but " + cuda_unavailable_reason());
}
}  // namespace detail

}  // namespace ndtcu
