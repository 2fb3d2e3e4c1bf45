// The CUDA scorer of the global search's nodes (../ndt/pyramid_scorer.hpp): the pyramid
// uploaded once, the scan's rotated cells once per search, each batch's nodes up and their
// bounds down. One warp per node: its lanes share the points (lane k takes points k, k +
// 32, ...), so the warp's loads of one node's windows go out together, and a shuffle sums
// them (integers: the order does not matter, the CPU's sum is the same number).
#include "../ndt/pyramid_scorer.hpp"
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_scope.hpp"

#include <cub/device/device_select.cuh>
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

// A scored child as expand() compacts it: the node and its bound, side by side.
struct ScoredNode {
  math::SearchNode node;
  std::uint32_t bound;
};

// What expand_kernel counts, and where DeviceSelect writes how many it kept.
struct ExpandCounts {
  unsigned long long scored, leaves, kept;
};

// One warp per child slot (parent slot / 8, child d = slot % 8): the child, whether it is
// searched, its bound as bound_kernel sums it, and its flag for the compaction (searched
// and at least the threshold). A child not searched writes bound 0 and no flag.
__global__ void expand_kernel(math::PyramidView pyramid, math::PyramidView standing, math::SearchLimits limits,
                              const std::int32_t* __restrict__ offsets, int points,
                              const math::SearchNode* __restrict__ parents, std::size_t slots, std::uint32_t threshold,
                              ScoredNode* __restrict__ out, std::uint8_t* __restrict__ flags,
                              ExpandCounts* __restrict__ counts) {
  const std::size_t slot = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (slot >= slots) return;  // whole warps leave together
  const math::SearchNode c = math::child_node(parents[slot / 8], static_cast<int>(slot % 8));
  const bool searched = math::child_searched(pyramid, standing, limits, c);  // the same in every lane
  std::uint32_t sum = 0;
  if (searched) {
    const std::int32_t* o = offsets + static_cast<std::size_t>(c.yaw) * 3 * static_cast<std::size_t>(points);
    sum = math::node_bound(pyramid, o, lane, points, kWarp, c);
    for (int d = kWarp / 2; d > 0; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);
  }
  if (lane == 0) {
    out[slot] = ScoredNode{c, sum};
    flags[slot] = searched && sum >= threshold ? 1 : 0;
    if (searched) {
      atomicAdd(&counts->scored, 1ull);
      if (c.level == 0) atomicAdd(&counts->leaves, 1ull);
    }
  }
}

class CudaPyramidScorer final : public PyramidScorer {
 public:
  CudaPyramidScorer(const ScorePyramid& pyramid, cudaStream_t stream, int device)
      : device_(resolve_device(device)), stream_(stream) {
    DeviceScope scope(device_);
    levels_.upload(pyramid.levels.data(), pyramid.levels.size(), stream_);
    view_ = pyramid.view();
    view_.levels = levels_.data();
    standing_levels_.upload(pyramid.standing.data(), pyramid.standing.size(), stream_);
    standing_ = pyramid.standing_view();
    standing_.levels = standing_levels_.data();
    counts_.resize_discard(1);
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void set_points(const std::vector<std::int32_t>& offsets, int points, int yaws) override {
    DeviceScope scope(device_);
    (void)yaws;
    offsets_.upload(offsets.data(), offsets.size(), stream_);
    points_ = points;
  }

  Expansion expand(const std::vector<math::SearchNode>& parents, const math::SearchLimits& limits,
                   std::uint32_t threshold, std::vector<math::SearchNode>& children,
                   std::vector<std::uint32_t>& bounds) override {
    children.clear();
    bounds.clear();
    if (parents.empty()) return {};
    DeviceScope scope(device_);
    const std::size_t slots = parents.size() * 8;
    nodes_.resize_with_headroom(parents.size());
    scored_.resize_with_headroom(slots);
    kept_.resize_with_headroom(slots);
    flags_.resize_with_headroom(slots);
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(nodes_.data(), parents.data(), parents.size() * sizeof(math::SearchNode),
                                     cudaMemcpyHostToDevice, stream_));
    NDTCU_CUDA_CHECK(cudaMemsetAsync(counts_.data(), 0, sizeof(ExpandCounts), stream_));
    const unsigned blocks = static_cast<unsigned>((slots * kWarp + kBlock - 1) / kBlock);
    expand_kernel<<<blocks, kBlock, 0, stream_>>>(view_, standing_, limits, offsets_.data(), points_, nodes_.data(),
                                                  slots, threshold, scored_.data(), flags_.data(), counts_.data());
    NDTCU_CUDA_CHECK_LAUNCH();
    // The survivors in slot order (DeviceSelect keeps the order): the CPU scorer's order.
    std::size_t temp_bytes = 0;
    unsigned long long* kept_count = &counts_.data()->kept;
    NDTCU_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, temp_bytes, scored_.data(), flags_.data(), kept_.data(),
                                                kept_count, slots, stream_));
    temp_.resize_with_headroom(temp_bytes);
    NDTCU_CUDA_CHECK(cub::DeviceSelect::Flagged(temp_.data(), temp_bytes, scored_.data(), flags_.data(), kept_.data(),
                                                kept_count, slots, stream_));
    ExpandCounts counts{};
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(&counts, counts_.data(), sizeof(ExpandCounts), cudaMemcpyDeviceToHost, stream_));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::size_t kept = static_cast<std::size_t>(counts.kept);
    host_kept_.resize(kept);
    if (kept) {
      NDTCU_CUDA_CHECK(cudaMemcpyAsync(host_kept_.data(), kept_.data(), kept * sizeof(ScoredNode),
                                       cudaMemcpyDeviceToHost, stream_));
      NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    children.reserve(kept);
    bounds.reserve(kept);
    for (const ScoredNode& k : host_kept_) {
      children.push_back(k.node);
      bounds.push_back(k.bound);
    }
    return Expansion{static_cast<std::size_t>(counts.scored), static_cast<std::size_t>(counts.leaves)};
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
  math::PyramidView view_, standing_;
  DeviceBuffer<std::uint8_t> levels_, standing_levels_;
  // expand()'s buffers: every child scored, the flags, the survivors, the counts, CUB's
  // scratch, and the survivors on the host.
  DeviceBuffer<ScoredNode> scored_, kept_;
  DeviceBuffer<std::uint8_t> flags_, temp_;
  DeviceBuffer<ExpandCounts> counts_;
  std::vector<ScoredNode> host_kept_;
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
