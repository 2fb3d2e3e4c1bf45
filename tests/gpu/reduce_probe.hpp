#pragma once
// Host entry to the reduction probe kernel (tests/gpu/reduce_probe.cu).
#include <vector>

namespace ndtcu::test {

/// For each repeat, the 29 sums over i of x_i * (1.7 x_i)^k (k = 0..28), reduced on the GPU.
std::vector<std::vector<double>> reduce_on_gpu(const std::vector<double>& x, int repeats);

}  // namespace ndtcu::test
