// Launches the production fixed-order reduction (reduce_partials) on synthetic partials,
// for the GPU tests.
#include "reduce_probe.hpp"

#include "../../src/cuda/device_buffer.cuh"
#include "../../kernels/fixed_order_reduce.cuh"

namespace ndtcu::test {
namespace {
constexpr int kK = 29;
constexpr int kBlock = 256;

// Partial i from x_i: terms of different magnitudes so that the summation order shows in
// the bits.
__global__ void partials_kernel(const double* x, int n, detail::Vec<kK>* partials) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double p = x[i];
  for (int k = 0; k < kK; ++k) {
    partials[i].v[k] = p;
    p *= x[i] * 1.7;
  }
}

__global__ void reduce_kernel(const detail::Vec<kK>* partials, int n, double* out) {
  detail::reduce_partials<kK>(partials, n, out);
}
}  // namespace

std::vector<std::vector<double>> reduce_on_gpu(const std::vector<double>& x, int repeats) {
  const int n = static_cast<int>(x.size());
  const int blocks = (n + kBlock - 1) / kBlock;
  detail::DeviceBuffer<double> dx;
  dx.upload(x.data(), x.size());
  detail::DeviceBuffer<detail::Vec<kK>> partials(n), result(1);
  partials_kernel<<<blocks, kBlock>>>(dx.data(), n, partials.data());
  NDTCU_CUDA_CHECK_LAUNCH();
  std::vector<std::vector<double>> out;
  for (int r = 0; r < repeats; ++r) {
    reduce_kernel<<<1, kBlock>>>(partials.data(), n, reinterpret_cast<double*>(result.data()));
    NDTCU_CUDA_CHECK_LAUNCH();
    std::vector<double> host(kK);
    result.download(reinterpret_cast<detail::Vec<kK>*>(host.data()), 1);
    NDTCU_CUDA_CHECK(cudaDeviceSynchronize());
    out.push_back(host);
  }
  return out;
}

void allocate_and_free(std::size_t bytes) { detail::DeviceBuffer<char> buffer(bytes); }

std::size_t device_free_bytes() {
  std::size_t free_b = 0, total_b = 0;
  NDTCU_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b;
}

void* hog_device_memory(std::size_t leave) {
  // Chunks of 1 GiB, then 16 MiB, then 1 MiB until each size fails (three failed calls in
  // all, which a memory checker reports as expected errors), then 1 MiB chunks back until
  // `leave` is free.
  auto* chunks = new std::vector<void*>;
  for (std::size_t size : {std::size_t(1) << 30, std::size_t(16) << 20, std::size_t(1) << 20}) {
    for (;;) {
      void* p = nullptr;
      if (cudaMalloc(&p, size) != cudaSuccess) {
        cudaGetLastError();
        break;
      }
      chunks->push_back(p);
    }
  }
  while (!chunks->empty() && device_free_bytes() < leave) {
    NDTCU_CUDA_CHECK(cudaFree(chunks->back()));
    chunks->pop_back();
  }
  return chunks;
}

void release_device_memory(void* memory) {
  auto* chunks = static_cast<std::vector<void*>*>(memory);
  for (void* p : *chunks) NDTCU_CUDA_CHECK(cudaFree(p));
  delete chunks;
}

CUstream_st* create_stream() {
  cudaStream_t s = nullptr;
  NDTCU_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void destroy_stream(CUstream_st* stream) { NDTCU_CUDA_CHECK(cudaStreamDestroy(stream)); }

}  // namespace ndtcu::test
