// resolve_backend: the one place Backend::Auto becomes a backend (see execution.hpp).
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/settings.hpp>

#include "log.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <mutex>
#include <string>

namespace ndtcu {

Backend resolve_backend(Backend requested, int device) {
  if (requested == Backend::Cpu) return Backend::Cpu;
  // Empty when a device answers: cudaGetDeviceCount succeeds with at least one device.
  const std::string why = cuda_unavailable_reason();
  if (requested == Backend::Cuda) {
    if (!why.empty()) throw CudaError("backend cuda requested, but " + why);
    return Backend::Cuda;
  }
  static std::once_flag once;
  std::call_once(once, [&why, device] {
    if (why.empty()) {
      const auto devices = cuda_devices();
      const std::size_t k = device < 0 ? 0 : static_cast<std::size_t>(device);
      detail::log().info("backend auto: using CUDA on {}",
                 k < devices.size() ? fmt::format("device {} ({})", k, devices[k].name) : fmt::format("device {}", k));
    } else {
      detail::log().info("backend auto: using the CPU backend ({})", why);
    }
  });
  return why.empty() ? Backend::Cuda : Backend::Cpu;
}

}  // namespace ndtcu
