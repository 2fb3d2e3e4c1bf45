#pragma once
// Host entries to device code used only by tests (tests/gpu/reduce_probe.cu).
#include <cstddef>
#include <vector>

namespace ndtcu::test {

/// For each repeat, the 29 sums over i of x_i * (1.7 x_i)^k (k = 0..28), reduced on the GPU.
std::vector<std::vector<double>> reduce_on_gpu(const std::vector<double>& x, int repeats);

/// Allocates `bytes` of device memory through DeviceBuffer and frees it (CudaError when
/// the device cannot hold it).
void allocate_and_free(std::size_t bytes);

}  // namespace ndtcu::test
