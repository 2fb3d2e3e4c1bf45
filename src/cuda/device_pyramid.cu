// The CUDA scorer of the global search's nodes (../ndt/pyramid_scorer.hpp): the pyramid
// uploaded once, the scan's rotated cells once per search, each batch's nodes up and their
// bounds down. One warp per node: its lanes share the points (lane k takes points k, k +
// 32, ...), so the warp's loads of one node's windows go out together, and a shuffle sums
// them (integers: the order does not matter, the CPU's sum is the same number).
#include "../ndt/pyramid_scorer.hpp"
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_scope.hpp"

#include <cuda_runtime.h>

namespace ndtcu::detail {

namespace {

constexpr int kWarp = 32;
constexpr int kBlock = 256;  // 8 nodes per block

__global__ void bound_kernel(math::PyramidView pyramid, const std::int32_t* __restrict__ offsets, int points,
                             const math::SearchNode* __restrict__ nodes, std::size_t count,
                             std::uint32_t* __restrict__ bounds) {
  const std::size_t node = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (node >= count) return;  // whole warps leave together: count is per warp
  const math::SearchNode n = nodes[node];
  const std::int32_t* o = offsets + static_cast<std::size_t>(n.yaw) * 3 * static_cast<std::size_t>(points);
  std::uint32_t sum = math::node_bound(pyramid, o, lane, points, kWarp, n);
  for (int d = kWarp / 2; d > 0; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);
  if (lane == 0) bounds[node] = sum;
}

class CudaPyramidScorer final : public PyramidScorer {
 public:
  CudaPyramidScorer(const ScorePyramid& pyramid, cudaStream_t stream, int device)
      : device_(resolve_device(device)), stream_(stream) {
    DeviceScope scope(device_);
    levels_.upload(pyramid.levels.data(), pyramid.levels.size(), stream_);
    view_ = pyramid.view();
    view_.levels = levels_.data();
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void set_points(const std::vector<std::int32_t>& offsets, int points, int yaws) override {
    DeviceScope scope(device_);
    (void)yaws;
    offsets_.upload(offsets.data(), offsets.size(), stream_);
    points_ = points;
  }

  void score(const std::vector<math::SearchNode>& nodes, std::vector<std::uint32_t>& bounds) override {
    bounds.resize(nodes.size());
    if (nodes.empty()) return;
    DeviceScope scope(device_);
    nodes_.resize_with_headroom(nodes.size());
    bounds_.resize_with_headroom(nodes.size());
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(nodes_.data(), nodes.data(), nodes.size() * sizeof(math::SearchNode),
                                     cudaMemcpyHostToDevice, stream_));
    const std::size_t threads = nodes.size() * kWarp;
    const unsigned blocks = static_cast<unsigned>((threads + kBlock - 1) / kBlock);
    bound_kernel<<<blocks, kBlock, 0, stream_>>>(view_, offsets_.data(), points_, nodes_.data(), nodes.size(),
                                                 bounds_.data());
    NDTCU_CUDA_CHECK_LAUNCH();
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(bounds.data(), bounds_.data(), nodes.size() * sizeof(std::uint32_t),
                                     cudaMemcpyDeviceToHost, stream_));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  int device_;
  cudaStream_t stream_;
  math::PyramidView view_;
  DeviceBuffer<std::uint8_t> levels_;
  DeviceBuffer<std::int32_t> offsets_;
  DeviceBuffer<math::SearchNode> nodes_;
  DeviceBuffer<std::uint32_t> bounds_;
  int points_ = 0;
};

}  // namespace

std::unique_ptr<PyramidScorer> make_cuda_pyramid_scorer(const ScorePyramid& pyramid, CUstream_st* stream, int device) {
  return std::make_unique<CudaPyramidScorer>(pyramid, stream, device);
}

}  // namespace ndtcu::detail
