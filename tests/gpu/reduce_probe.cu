// Launches the fixed-order grid reduction on synthetic contributions, for the GPU tests.
#include "reduce_probe.hpp"

#include "../../kernels/device_buffer.cuh"
#include "../../kernels/fixed_order_reduce.cuh"

namespace ndtcu::test {
namespace {
constexpr int kK = 29;
constexpr int kBlock = 256;

__global__ void probe_kernel(const double* x, int n, detail::ReduceScratch<kK> scratch) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  detail::Vec<kK> mine = detail::Vec<kK>::zero();
  if (i < n) {
    // Contributions of different magnitudes so that the summation order shows in the bits.
    double p = x[i];
    for (int k = 0; k < kK; ++k) {
      mine.v[k] = p;
      p *= x[i] * 1.7;
    }
  }
  detail::reduce_grid_fixed_order<kK, kBlock>(mine, scratch);
}
}  // namespace

std::vector<std::vector<double>> reduce_on_gpu(const std::vector<double>& x, int repeats) {
  const int n = static_cast<int>(x.size());
  const int blocks = (n + kBlock - 1) / kBlock;
  detail::DeviceBuffer<double> dx;
  dx.upload(x.data(), x.size());
  detail::DeviceBuffer<detail::Vec<kK>> partials(blocks), result(1);
  detail::DeviceBuffer<unsigned> ticket(1);
  NDTCU_CUDA_CHECK(cudaMemset(ticket.data(), 0, sizeof(unsigned)));
  std::vector<std::vector<double>> out;
  for (int r = 0; r < repeats; ++r) {
    probe_kernel<<<blocks, kBlock>>>(dx.data(), n, {partials.data(), ticket.data(), result.data()});
    NDTCU_CUDA_CHECK_LAUNCH();
    std::vector<double> host(kK);
    result.download(reinterpret_cast<detail::Vec<kK>*>(host.data()), 1);
    NDTCU_CUDA_CHECK(cudaDeviceSynchronize());
    out.push_back(host);
  }
  return out;
}

void allocate_and_free(std::size_t bytes) { detail::DeviceBuffer<char> buffer(bytes); }

}  // namespace ndtcu::test
