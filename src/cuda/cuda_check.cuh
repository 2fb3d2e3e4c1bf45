#pragma once
// Every CUDA runtime call goes through NDTCU_CUDA_CHECK: a failure becomes ndtcu::CudaError
// naming the call, the error and where it happened.
#include <ndtcu/error.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace ndtcu::detail {

/// Blocks of `block` threads that cover `n` items, one thread each.
inline int grid_blocks(std::size_t n, int block) {
  return static_cast<int>((n + static_cast<std::size_t>(block) - 1) / static_cast<std::size_t>(block));
}

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") at " +
                  file + ":" + std::to_string(line));
}

}  // namespace ndtcu::detail

#define NDTCU_CUDA_CHECK(call)                                                  \
  do {                                                                          \
    cudaError_t ndtcu_err_ = (call);                                            \
    if (ndtcu_err_ != cudaSuccess) {                                            \
      ::ndtcu::detail::throw_cuda_error(ndtcu_err_, #call, __FILE__, __LINE__); \
    }                                                                           \
  } while (0)

/// Checks the launch just made (configuration errors surface here, not at the next call).
#define NDTCU_CUDA_CHECK_LAUNCH() NDTCU_CUDA_CHECK(cudaGetLastError())
