#pragma once
// Host entries to device code used only by tests (tests/gpu/reduce_probe.cu).
#include <cstddef>
#include <vector>

struct CUstream_st;

namespace ndtcu::test {

/// For each repeat, the 29 sums over i of x_i * (1.7 x_i)^k (k = 0..28), reduced on the GPU.
std::vector<std::vector<double>> reduce_on_gpu(const std::vector<double>& x, int repeats);

/// Allocates `bytes` of device memory through DeviceBuffer and frees it (CudaError when
/// the device cannot hold it).
void allocate_and_free(std::size_t bytes);

/// The device's free memory (cudaMemGetInfo), in bytes.
std::size_t device_free_bytes();

/// Takes all but about `leave` bytes of the device's free memory (as another process would;
/// a handle to the allocations); release_device_memory() gives it back.
void* hog_device_memory(std::size_t leave);
void release_device_memory(void* memory);

/// A CUDA stream of its own (non-blocking), and its end.
CUstream_st* create_stream();
void destroy_stream(CUstream_st* stream);

}  // namespace ndtcu::test
