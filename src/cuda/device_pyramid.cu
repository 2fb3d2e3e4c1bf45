// The CUDA scorer of the global search's nodes (../ndt/pyramid_scorer.hpp): the pyramid
// uploaded once, the scan's rotated cells once per search, each batch's nodes up and their
// bounds down. One warp per node: its lanes share the points (lane k takes points k, k +
// 32, ...), so the warp's loads of one node's windows go out together, and a shuffle sums
// them (integers: the order does not matter, the CPU's sum is the same number).
#include "../ndt/pyramid_scorer.hpp"
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_scope.hpp"

#include <cub/device/device_radix_sort.cuh>
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

// What expand_kernel counts, and where DeviceSelect writes how many it kept: all survivors
// (expand()), or those that are not leaves and the leaves apart (step()).
struct ExpandCounts {
  unsigned long long scored, leaves, kept, kept_inner, kept_stored, kept_leaves, restocked, stayed;
};

// The compaction's flags of a child slot: a survivor; one that is not a leaf, at or above
// the floor (the stack) or below it (the store); a leaf.
struct ExpandFlags {
  std::uint8_t* any;
  std::uint8_t* inner;
  std::uint8_t* stored;
  std::uint8_t* leaf;
};

// One warp per child slot (parent slot / 8, child d = slot % 8): the child, whether it is
// searched (its parent's bound at least the threshold, and math::child_searched), its bound
// as bound_kernel sums it, and its flags for the compaction (searched and at least the
// threshold). A child not searched writes bound 0 and no flag.
__global__ void expand_kernel(math::PyramidView pyramid, math::PyramidView standing, math::SearchLimits limits,
                              const std::int32_t* __restrict__ offsets, int points,
                              const ScoredNode* __restrict__ parents, std::size_t slots, std::uint32_t threshold,
                              std::uint32_t floor, ScoredNode* __restrict__ out, ExpandFlags flags,
                              ExpandCounts* __restrict__ counts) {
  const std::size_t slot = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (slot >= slots) return;  // whole warps leave together
  const ScoredNode parent = parents[slot / 8];
  const math::SearchNode c = math::child_node(parent.node, static_cast<int>(slot % 8));
  // The same in every lane.
  const bool searched = parent.bound >= threshold && math::child_searched(pyramid, standing, limits, c);
  std::uint32_t sum = 0;
  if (searched) {
    const std::int32_t* o = offsets + static_cast<std::size_t>(c.yaw) * 3 * static_cast<std::size_t>(points);
    sum = math::node_bound(pyramid, o, lane, points, kWarp, c);
    for (int d = kWarp / 2; d > 0; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);
  }
  if (lane == 0) {
    out[slot] = ScoredNode{c, sum};
    const bool kept = searched && sum >= threshold;
    flags.any[slot] = kept ? 1 : 0;
    flags.inner[slot] = kept && c.level > 0 && sum >= floor ? 1 : 0;
    flags.stored[slot] = kept && c.level > 0 && sum < floor ? 1 : 0;
    flags.leaf[slot] = kept && c.level == 0 ? 1 : 0;
    if (searched) {
      atomicAdd(&counts->scored, 1ull);
      if (c.level == 0) atomicAdd(&counts->leaves, 1ull);
    }
  }
}

// The bounds of `count` nodes, the keys of step()'s sort.
__global__ void bound_keys_kernel(const ScoredNode* __restrict__ nodes, std::size_t count, std::uint32_t* __restrict__ keys) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < count) keys[k] = nodes[k].bound;
}

// The store's flags: to the stack (at or above the floor), or staying (below it, at or
// above the threshold).
__global__ void restock_flags_kernel(const ScoredNode* __restrict__ nodes, std::size_t count, std::uint32_t floor,
                                     std::uint32_t threshold, std::uint8_t* __restrict__ up,
                                     std::uint8_t* __restrict__ stay) {
  const std::size_t k = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= count) return;
  const std::uint32_t b = nodes[k].bound;
  up[k] = b >= floor ? 1 : 0;
  stay[k] = b < floor && b >= threshold ? 1 : 0;
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
    host_parents_.clear();
    for (const math::SearchNode& n : parents) host_parents_.push_back(ScoredNode{n, 0xffffffffu});  // none dropped
    nodes_.upload(host_parents_.data(), host_parents_.size(), stream_);
    const std::size_t slots = launch_expand(nodes_.data(), parents.size(), limits, threshold, threshold);
    // The survivors in slot order (DeviceSelect keeps the order): the CPU scorer's order.
    kept_.resize_with_headroom(slots);
    select(scored_.data(), flags_any_.data(), kept_.data(), &counts_.data()->kept, slots);
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

  void push(const std::vector<ScoredNode>& nodes) override {
    if (nodes.empty()) return;
    DeviceScope scope(device_);
    reserve(stack_, stack_size_, stack_size_ + nodes.size());
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(stack_.data() + stack_size_, nodes.data(), nodes.size() * sizeof(ScoredNode),
                                     cudaMemcpyHostToDevice, stream_));
    stack_size_ += nodes.size();
  }
  void defer(const std::vector<ScoredNode>& nodes) override {
    if (nodes.empty()) return;
    DeviceScope scope(device_);
    reserve(store_, store_size_, store_size_ + nodes.size());
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(store_.data() + store_size_, nodes.data(), nodes.size() * sizeof(ScoredNode),
                                     cudaMemcpyHostToDevice, stream_));
    store_size_ += nodes.size();
  }
  std::size_t stacked() const override { return stack_size_; }
  std::size_t deferred() const override { return store_size_; }
  void clear_stack() override { stack_size_ = store_size_ = 0; }

  Expansion step(std::size_t max_parents, const math::SearchLimits& limits, std::uint32_t threshold, std::uint32_t floor,
                 std::vector<ScoredNode>& leaves) override {
    leaves.clear();
    const std::size_t count = std::min(max_parents, stack_size_);
    if (count == 0) return {};
    DeviceScope scope(device_);
    // The children that are not leaves go where their parents were, or into the store: at
    // most 8 per parent.
    reserve(stack_, stack_size_, stack_size_ + 7 * count);
    reserve(store_, store_size_, store_size_ + 8 * count);
    const std::size_t first = stack_size_ - count;
    const std::size_t slots = launch_expand(stack_.data() + first, count, limits, threshold, floor);
    leaves_.resize_with_headroom(slots);
    select(scored_.data(), flags_inner_.data(), stack_.data() + first, &counts_.data()->kept_inner, slots);
    select(scored_.data(), flags_stored_.data(), store_.data() + store_size_, &counts_.data()->kept_stored, slots);
    select(scored_.data(), flags_leaf_.data(), leaves_.data(), &counts_.data()->kept_leaves, slots);
    ExpandCounts counts{};
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(&counts, counts_.data(), sizeof(ExpandCounts), cudaMemcpyDeviceToHost, stream_));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::size_t inner = static_cast<std::size_t>(counts.kept_inner);
    stack_size_ = first + inner;
    store_size_ += static_cast<std::size_t>(counts.kept_stored);
    sort_stack(first, inner);
    leaves.resize(static_cast<std::size_t>(counts.kept_leaves));
    if (!leaves.empty()) {
      NDTCU_CUDA_CHECK(cudaMemcpyAsync(leaves.data(), leaves_.data(), leaves.size() * sizeof(ScoredNode),
                                       cudaMemcpyDeviceToHost, stream_));
      NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    return Expansion{static_cast<std::size_t>(counts.scored), static_cast<std::size_t>(counts.leaves)};
  }

  void restock(std::uint32_t floor, std::uint32_t threshold) override {
    if (store_size_ == 0) return;
    DeviceScope scope(device_);
    reserve(stack_, stack_size_, stack_size_ + store_size_);
    flags_inner_.resize_with_headroom(store_size_);
    flags_stored_.resize_with_headroom(store_size_);
    staying_.resize_with_headroom(store_size_);
    restock_flags_kernel<<<static_cast<unsigned>((store_size_ + kBlock - 1) / kBlock), kBlock, 0, stream_>>>(
        store_.data(), store_size_, floor, threshold, flags_inner_.data(), flags_stored_.data());
    NDTCU_CUDA_CHECK_LAUNCH();
    select(store_.data(), flags_inner_.data(), stack_.data() + stack_size_, &counts_.data()->restocked, store_size_);
    select(store_.data(), flags_stored_.data(), staying_.data(), &counts_.data()->stayed, store_size_);
    ExpandCounts counts{};
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(&counts, counts_.data(), sizeof(ExpandCounts), cudaMemcpyDeviceToHost, stream_));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::size_t up = static_cast<std::size_t>(counts.restocked);
    store_size_ = static_cast<std::size_t>(counts.stayed);
    std::swap(store_, staying_);
    sort_stack(stack_size_, up);
    stack_size_ += up;
  }

  void score(const std::vector<math::SearchNode>& nodes, std::vector<std::uint32_t>& bounds) override {
    bounds.resize(nodes.size());
    if (nodes.empty()) return;
    DeviceScope scope(device_);
    search_nodes_.resize_with_headroom(nodes.size());
    bounds_.resize_with_headroom(nodes.size());
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(search_nodes_.data(), nodes.data(), nodes.size() * sizeof(math::SearchNode),
                                     cudaMemcpyHostToDevice, stream_));
    const std::size_t threads = nodes.size() * kWarp;
    const unsigned blocks = static_cast<unsigned>((threads + kBlock - 1) / kBlock);
    bound_kernel<<<blocks, kBlock, 0, stream_>>>(view_, offsets_.data(), points_, search_nodes_.data(), nodes.size(),
                                                 bounds_.data());
    NDTCU_CUDA_CHECK_LAUNCH();
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(bounds.data(), bounds_.data(), nodes.size() * sizeof(std::uint32_t),
                                     cudaMemcpyDeviceToHost, stream_));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  // expand_kernel over `count` parents on the device: every child scored into scored_, the
  // flags set, the counts zeroed first. Returns the slots (8 per parent).
  std::size_t launch_expand(const ScoredNode* parents, std::size_t count, const math::SearchLimits& limits,
                            std::uint32_t threshold, std::uint32_t floor) {
    const std::size_t slots = count * 8;
    scored_.resize_with_headroom(slots);
    flags_any_.resize_with_headroom(slots);
    flags_inner_.resize_with_headroom(slots);
    flags_stored_.resize_with_headroom(slots);
    flags_leaf_.resize_with_headroom(slots);
    NDTCU_CUDA_CHECK(cudaMemsetAsync(counts_.data(), 0, sizeof(ExpandCounts), stream_));
    const unsigned blocks = static_cast<unsigned>((slots * kWarp + kBlock - 1) / kBlock);
    expand_kernel<<<blocks, kBlock, 0, stream_>>>(
        view_, standing_, limits, offsets_.data(), points_, parents, slots, threshold, floor, scored_.data(),
        ExpandFlags{flags_any_.data(), flags_inner_.data(), flags_stored_.data(), flags_leaf_.data()}, counts_.data());
    NDTCU_CUDA_CHECK_LAUNCH();
    return slots;
  }

  // The nodes of `in` whose flag is set, in order, to `out`; how many at `count`.
  void select(const ScoredNode* in, const std::uint8_t* flags, ScoredNode* out, unsigned long long* count, std::size_t n) {
    std::size_t temp_bytes = 0;
    NDTCU_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, temp_bytes, in, flags, out, count, n, stream_));
    temp_.resize_with_headroom(temp_bytes);
    NDTCU_CUDA_CHECK(cub::DeviceSelect::Flagged(temp_.data(), temp_bytes, in, flags, out, count, n, stream_));
  }

  // The stack's nodes first .. first + n - 1 in ascending order of their bounds; the radix
  // sort is stable, as the CPU's sort.
  void sort_stack(std::size_t first, std::size_t n) {
    if (n < 2) return;
    keys_.resize_with_headroom(2 * n);
    sorted_.resize_with_headroom(n);
    bound_keys_kernel<<<static_cast<unsigned>((n + kBlock - 1) / kBlock), kBlock, 0, stream_>>>(stack_.data() + first, n,
                                                                                                keys_.data());
    NDTCU_CUDA_CHECK_LAUNCH();
    std::size_t temp_bytes = 0;
    NDTCU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_.data(), keys_.data() + n,
                                                     stack_.data() + first, sorted_.data(), n, 0, 32, stream_));
    temp_.resize_with_headroom(temp_bytes);
    NDTCU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp_.data(), temp_bytes, keys_.data(), keys_.data() + n,
                                                     stack_.data() + first, sorted_.data(), n, 0, 32, stream_));
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(stack_.data() + first, sorted_.data(), n * sizeof(ScoredNode),
                                     cudaMemcpyDeviceToDevice, stream_));
  }

  // Room for `n` nodes in `buffer`, its first `size` kept.
  void reserve(DeviceBuffer<ScoredNode>& buffer, std::size_t size, std::size_t n) {
    if (n <= buffer.capacity()) return;
    DeviceBuffer<ScoredNode> grown(std::max(n, 2 * buffer.capacity()));
    if (size) {
      NDTCU_CUDA_CHECK(cudaMemcpyAsync(grown.data(), buffer.data(), size * sizeof(ScoredNode), cudaMemcpyDeviceToDevice,
                                       stream_));
    }
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old buffer is freed below
    buffer = std::move(grown);
  }

  int device_;
  cudaStream_t stream_;
  math::PyramidView view_, standing_;
  DeviceBuffer<std::uint8_t> levels_, standing_levels_;
  // expand()'s buffers: every child scored, the flags, the survivors, the counts, CUB's
  // scratch, and the survivors on the host.
  DeviceBuffer<ScoredNode> nodes_, scored_, kept_;
  DeviceBuffer<std::uint8_t> flags_any_, flags_inner_, flags_stored_, flags_leaf_, temp_;
  DeviceBuffer<ExpandCounts> counts_;
  std::vector<ScoredNode> host_parents_, host_kept_;
  // step()'s stack and store (their first stack_size_ and store_size_ nodes), restock()'s
  // staying nodes, each step's surviving leaves, the sort's output.
  DeviceBuffer<ScoredNode> stack_, store_, staying_, leaves_, sorted_;
  std::size_t store_size_ = 0;
  DeviceBuffer<std::uint32_t> keys_;  // the sort's keys, in and out
  std::size_t stack_size_ = 0;
  DeviceBuffer<std::int32_t> offsets_;
  DeviceBuffer<math::SearchNode> search_nodes_;
  DeviceBuffer<std::uint32_t> bounds_;
  int points_ = 0;
};

}  // namespace

std::unique_ptr<PyramidScorer> make_cuda_pyramid_scorer(const ScorePyramid& pyramid, CUstream_st* stream, int device) {
  return std::make_unique<CudaPyramidScorer>(pyramid, stream, device);
}

}  // namespace ndtcu::detail
