#pragma once
/// \file
/// What the CUDA runtime sees. Safe to call in any build: without CUDA support compiled
/// in, `cuda_compiled()` is false and no device is reported.

#include <cstddef>
#include <string>
#include <vector>

namespace ndtcu {

/// One CUDA device as the runtime reports it.
struct CudaDeviceInfo {
  int index = 0;                       ///< device ordinal
  std::string name;                    ///< marketing name, e.g. "NVIDIA H100 80GB HBM3"
  int compute_major = 0;               ///< compute capability, major
  int compute_minor = 0;               ///< compute capability, minor
  int multiprocessors = 0;             ///< SM count
  std::size_t total_memory_bytes = 0;  ///< global memory
  std::size_t free_memory_bytes = 0;   ///< free global memory when queried
};

/// True when this build of ndtcu includes the CUDA backend.
bool cuda_compiled() noexcept;

/// The CUDA devices present; empty without a CUDA build, driver or device (never throws
/// for their absence).
std::vector<CudaDeviceInfo> cuda_devices();

/// Why no device is usable ("built without CUDA", the runtime's error), or empty when one is.
std::string cuda_unavailable_reason();

}  // namespace ndtcu
