// The CUDA NDT loop's kernels and their thin launchers (ndt_loop_kernels.cuh): one
// derivative kernel per Newton evaluation for every running hypothesis of a batch, a
// fixed-order reduction per hypothesis, and the fixed-step update of kernels/ndt_step.hpp
// run on the device.
//
// Shape of the device loop, and why. A hypothesis's evaluation is spread over many
// blocks (LANES threads per point, 256 threads per block), and the loop is one
// conditional CUDA graph whose body is two kernels: the derivative kernel over a 2-D grid
// (blocks of a hypothesis x running hypotheses) and the step kernel (one block per running
// hypothesis: its blocks' partial sums in a fixed order, then its step on one thread; the
// last block compacts the list of running hypotheses and ends the loop when it is empty).
// A single alignment is a batch of one through the same kernels; where the device
// supports cooperative launch and the scan's blocks are all resident at once, its whole
// loop runs in one kernel instead (cooperative_loop_kernel: the same blocks and the same
// step between grid-wide barriers, so the same bits, without the graph's two launches and
// conditional node per iteration).
//
//
// The other shapes measured, and why this one stays: BENCHMARK.md, "Designs measured and
// rejected".

#include "ndt_loop_kernels.cuh"

#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>

#include <cstddef>

namespace ndtcu::detail {
namespace {

namespace cg = cooperative_groups;

constexpr int kBlock = kLoopBlock;
constexpr int kWarpsPerBlock = kBlock / 32;
static_assert(kBlock == 256, "reduce_partials sums with 256 threads");

// The type of the per-pair terms (the point's Jacobian and Hessian, q, the voxel's
// inverse covariance, the Gaussian) and of each thread's sums over its point; the block's
// and the scan's sums are double. Measured on an H200 (ndtcu_bench --batch, one run,
// BENCHMARK.md): with this kernel otherwise the same, double terms need about twice the
// registers, so at a batch bound of three blocks per SM they spill and batches of 200-1024
// take 2.7 times as long per hypothesis-iteration (KITTI 5k 5.7 against 2.1 us), and a
// single alignment 7% longer; against the earlier all-double kernel at its own best bound
// (two blocks), this one takes 30-32% less per hypothesis-iteration in batches (KITTI 5k
// 3.03 -> 2.08 us, BALM 2.43 -> 1.66, hdl32 6.30 -> 4.39). What it costs: the
// derivatives differ from the CPU backend's (all double) by at most 1.2e-6 of their
// scale, scores by 2e-7 (measured with the pair-by-pair sums; the factored sums of
// math::PointPairSums since then pass the same tolerances), and an alignment may stop one
// iteration apart from the CPU's (tests/gpu state the tolerances). The GPU's bits are its own and do not depend
// on the batch.
using Real = float;


// Blocks of the derivative kernel per SM. With float pair terms summed per point in the
// factored form (math::PointPairSums) and the block reduced through shared memory
// (block_partial), it takes 89 registers unbounded and 64 at four blocks (56 bytes
// spilled; 35 KB of shared memory per block, so four blocks are also the shared memory's
// bound). Measured on an H200 (ndtcu_bench --batch 1,200,1024, one run, two rounds):
// four blocks against three (80 registers, no spill) and five (48, 240 bytes spilled)
// take 7% and 10-20% less time per hypothesis-iteration at K = 1024 (KITTI 5k 1.19
// against 1.28 and 1.32 us, BALM 0.79 against 0.83 and 0.97, hdl32 2.66 against 2.84 and
// 2.97). A single alignment runs one partial wave and wants no spills, so batches run the
// four-block instance and a batch of one the unbounded one; both come from the same PTX,
// so their arithmetic, and bits, are the same (the batch tests compare them bit for bit).
// Before the factored form and the shared-memory reduction: 140 registers unbounded, 64
// at four blocks with 372 bytes spilled; before float terms: 212-220 registers.
constexpr int kSingleBlocksPerSm = 1;
constexpr int kBatchBlocksPerSm = 4;

/// The shared memory of block_partial's reduction: every thread's sums (float, as the
/// threads hold them), each component's 32 lanes of a warp in a row padded to 33 floats so
/// that neither the writes nor the column sums meet a bank twice, then each warp's sums in
/// double: 34.7 KB (35 KB a block with the rest; with four blocks per SM, 140 of an H200
/// SM's 228 KB).
struct BlockSums {
  Real lanes[kSums][kWarpsPerBlock][33];
  double warps[kWarpsPerBlock][kSums];
};

/// The map as a block's threads read it, in shared memory: the voxel grid's view (its
/// pointers and lattice, read for every cell and pair) and the search's cell table
/// (math::CellTable). Copied from the configuration in global memory at the start of each
/// block's evaluation, by warps other than the one that computes the pose terms.
struct BlockMap {
  math::VoxelGridView grid;
  math::CellTable cells;
};

/// Warps 1 and 2 of a block fill `map` from the configuration (the caller synchronizes).
__device__ void load_block_map(const DeviceConfig& c, BlockMap& map) {
  static_assert(sizeof(math::VoxelGridView) % sizeof(unsigned long long) == 0, "copied in 8-byte words");
  constexpr int kWords = static_cast<int>(sizeof(math::VoxelGridView) / sizeof(unsigned long long));
  static_assert(kWords <= 32 && math::kMaxNeighbours <= 32, "one warp each");
  const int t = static_cast<int>(threadIdx.x);
  if (t >= 32 && t < 32 + kWords) {
    reinterpret_cast<unsigned long long*>(&map.grid)[t - 32] =
        reinterpret_cast<const unsigned long long*>(&c.grid)[t - 32];
  } else if (t >= 64 && t < 64 + math::kMaxNeighbours) {
    math::cell_table_entry(c.grid, c.search, t - 64, map.cells);
  }
}

/// Block `b` of a source's evaluation at `terms`, its partial sum written to `out` by
/// threads 0 to kSums - 1: LANES threads per point sharing its cells, each thread's pairs
/// summed in Real, then the block's threads reduced in double through shared memory: every
/// thread stores its sums, thread (k, w) of the first kSums * 8 adds component k of warp w's
/// 32 threads (four interleaved sums in lane order, then those four in a fixed tree), then
/// thread k adds the 8 warps' in a fixed tree. Against a shuffle tree per component (31 x 5
/// double shuffles and additions in every thread, about six times the instructions), it
/// took 22% less GPU time per hypothesis-iteration in batches of 1024 (KITTI 5k 1.52 ->
/// 1.19 us) and 89 registers instead of 140 unbounded, measured on an H200 (BENCHMARK.md,
/// "The derivative kernel's arithmetic").
__device__ void block_partial(const DeviceConfig& c, const BlockMap& map, const DeviceSource& src,
                              const math::PoseTerms<Real>& terms, bool with_hessian, int b, BlockSums& shared,
                              double* out) {
  const int lanes = src.lanes;
  const int t = b * kBlock + threadIdx.x;
  const int i = t / lanes, lane = t % lanes;
  const bool valid = i < src.n;
  Real own[kSums];
#pragma unroll
  for (int k = 0; k < kSums; ++k) own[k] = 0;
  Real best = 0;
  int pairs = 0;
  if (valid) {
    const float x = c.x[src.offset + i], y = c.y[src.offset + i], z = c.z[src.offset + i];
    float tp[3];
    math::transform_point(terms.m, x, y, z, tp);
    pairs = math::accumulate_point_cells(map.grid, c.search, map.cells, terms, x, y, z, tp, with_hessian, lane, lanes,
                                         own, best);
  }
  // The point's lanes (consecutive, within one warp): best term (max) and pair count
  // (sum), then the point's NVTL term and counts once, on its first lane.
  for (int offset = lanes / 2; offset > 0; offset >>= 1) {
    best = fmax(best, __shfl_xor_sync(0xffffffffu, best, offset));
    pairs += __shfl_xor_sync(0xffffffffu, pairs, offset);
  }
  if (valid && lane == 0 && pairs > 0) {
    math::add_point_terms(best, pairs, own);
  }
  const int warp = threadIdx.x / 32, in_warp = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < kSums; ++k) shared.lanes[k][warp][in_warp] = own[k];
  __syncthreads();
  static_assert(kSums * kWarpsPerBlock <= kBlock, "one thread per component and warp");
  if (threadIdx.x < kSums * kWarpsPerBlock) {
    const int k = threadIdx.x / kWarpsPerBlock, w = threadIdx.x % kWarpsPerBlock;
    const Real* v = shared.lanes[k][w];
    double s[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
    for (int l = 0; l < 32; l += 4) {
#pragma unroll
      for (int j = 0; j < 4; ++j) s[j] += static_cast<double>(v[l + j]);
    }
    shared.warps[w][k] = (s[0] + s[1]) + (s[2] + s[3]);
  }
  __syncthreads();
  static_assert(kWarpsPerBlock == 8, "the warps' fixed tree below");
  if (threadIdx.x < kSums) {
    const int k = threadIdx.x;
    const double(*w)[kSums] = shared.warps;
    out[k] = ((w[0][k] + w[1][k]) + (w[2][k] + w[3][k])) + ((w[4][k] + w[5][k]) + (w[6][k] + w[7][k]));
  }
}

/// Block b of running slot `slot`'s evaluation at its hypothesis's pose frame (`single`:
/// the host's frame for hypothesis 0 instead), its partial sum stored. The derivative
/// kernel and the cooperative loop both run it, so their partials, and bits, are the same.
__device__ void evaluate_block(const BatchArgs& a, int slot, int b, const math::PoseFrame* single) {
  const int h = a.active[slot];
  const DeviceConfig& c = *a.cfg;
  const DeviceSource src = c.sources[a.hyps[h].source];
  if (b >= src.blocks) return;
  __shared__ math::PoseTerms<Real> terms;
  __shared__ unsigned flags;
  __shared__ BlockSums block_sums;
  __shared__ BlockMap map;
  if (threadIdx.x == 0) {
    const math::PoseFrame& f = single ? *single : a.hyps[h].frame;
    math::pose_terms(f, static_cast<Real>(c.d1), static_cast<Real>(c.d2), terms);
    flags = f.flags;
  }
  load_block_map(c, map);
  __syncthreads();
  block_partial(c, map, src, terms, (flags & math::kWithHessian) != 0, b, block_sums,
                a.partials[static_cast<std::size_t>(h) * a.max_blocks + b].v);
  __syncthreads();  // terms, map and block_sums are read before a next call of this block writes them
}

/// The derivative kernel: block (b, slot) evaluates block b of running hypothesis
/// active[slot] (evaluate_block).
template <int BLOCKS_PER_SM>
__global__ void __launch_bounds__(kBlock, BLOCKS_PER_SM) derivative_kernel(BatchArgs a, const math::PoseFrame* single) {
  if (static_cast<int>(blockIdx.y) >= *a.active_count) return;
  evaluate_block(a, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x), single);
}

/// The host-driven evaluations' reduction: block h sums hypothesis h's partials into
/// sums[h].
__global__ void __launch_bounds__(kBlock) reduce_kernel(BatchArgs a) {
  const int h = blockIdx.x;
  const DeviceSource src = a.cfg->sources[a.hyps[h].source];
  reduce_partials<kSums>(a.partials + static_cast<std::size_t>(h) * a.max_blocks, src.blocks, a.sums[h].v);
}

/// Hypothesis h's fixed step from its sums at the current pose (one thread), the pose prior
/// added to them first (so the sums read back include it, as the host loops' do): true when it
/// goes on, with the pose frame of its next evaluation written to hyps[h].frame.
__device__ bool hypothesis_step(const BatchArgs& a, int h, double* sums) {
  DeviceHyp& hyp = a.hyps[h];
  const math::StepRules& rules = *a.rules;
  math::add_prior(rules.prior, hyp.prior_center, hyp.state.pose, true, sums);
  math::StepTrace* trace = a.trace ? a.trace + static_cast<std::size_t>(h) * rules.max_iterations : nullptr;
  const bool more = math::fixed_step(sums, rules, hyp.state, trace,
                                     [](const double* v, double* dp) { return math::lu_direction(v, dp); });
  if (more) hyp.frame = math::pose_frame(hyp.state.pose, true);
  return more;
}

/// The step kernel: block b takes running slot b: the fixed-order sum of its
/// hypothesis's partials, then (thread 0) the shared fixed step and, when it goes on, the
/// pose frame of its next evaluation. The last block to finish compacts the running
/// slots, in slot order, and ends the loop when none is left (`in_graph`: by the graph's
/// conditional; launched on a stream, the host's fixed count of launches ends it and the
/// launches after the last hypothesis stopped find nothing running).
/// Running slot `slot`'s step: the fixed-order sum of its hypothesis's partials, then
/// (thread 0) hypothesis_step, whose answer goes to running[slot].
__device__ void step_slot(const BatchArgs& a, int slot) {
  const int h = a.active[slot];
  DeviceHyp& hyp = a.hyps[h];
  const DeviceSource src = a.cfg->sources[hyp.source];
  double* sums = a.sums[h].v;
  reduce_partials<kSums>(a.partials + static_cast<std::size_t>(h) * a.max_blocks, src.blocks, sums);
  if (threadIdx.x == 0) a.running[slot] = hypothesis_step(a, h, sums) ? 1 : 0;
}

__global__ void __launch_bounds__(kBlock) step_kernel(BatchArgs a, cudaGraphConditionalHandle loop, bool in_graph) {
  const int count = *a.active_count;
  const int slot = blockIdx.x;
  if (slot < count) step_slot(a, slot);
  // The last block to finish compacts the running slots and decides whether to go on.
  __shared__ bool is_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    is_last = atomicAdd(a.ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  // In place: a slot moves only down (to the number of running slots before it), and a
  // chunk is read whole before any of it is written.
  using BlockScan = cub::BlockScan<int, kBlock>;
  __shared__ typename BlockScan::TempStorage scan;
  __shared__ int base;
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  for (int start = 0; start < count; start += kBlock) {
    const int s = start + threadIdx.x;
    const int keep = s < count ? static_cast<volatile int*>(a.running)[s] : 0;
    const int h = s < count ? static_cast<volatile int*>(a.active)[s] : 0;
    int at = 0, total = 0;
    BlockScan(scan).ExclusiveSum(keep, at, total);
    __syncthreads();
    if (keep) a.active[base + at] = h;
    __syncthreads();
    if (threadIdx.x == 0) base += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *a.active_count = base;
    *a.ticket = 0u;
    if (in_graph) cudaGraphSetConditional(loop, base > 0 ? 1u : 0u);
  }
}

/// The whole loop of a batch of one in one launch (LoopLaunch::Auto): its blocks evaluate
/// the hypothesis (evaluate_block, block b as the derivative kernel's block b), a grid-wide
/// barrier, block 0 takes the step (step_slot) and says whether the loop goes on, a second
/// barrier, and again. The same partials, sums and steps as the graph's kernels, so the
/// same bits; what it saves is the graph's two kernel launches and its conditional node
/// per iteration. Its blocks must all be resident at once (cooperative launch): the host
/// launches it only when the source's blocks fit (Impl::cooperative_fits).
__global__ void __launch_bounds__(kBlock, kSingleBlocksPerSm) cooperative_loop_kernel(BatchArgs a) {
  cg::grid_group grid = cg::this_grid();
  for (;;) {
    if (*static_cast<volatile int*>(a.active_count) == 0) return;
    evaluate_block(a, 0, static_cast<int>(blockIdx.x), nullptr);
    grid.sync();
    if (blockIdx.x == 0) {
      step_slot(a, 0);
      __syncthreads();
      if (threadIdx.x == 0) *a.active_count = a.running[0];
    }
    grid.sync();
  }
}

}  // namespace

// Threads per source point (1 to 8). One evaluation is bounded by the latency of the
// lookups (up to 27 dependent load chains per point), not by arithmetic. When the source
// is small next to the GPU, several threads share a point's cells, which shortens each
// thread's chain and puts more warps in flight; when the source alone fills the GPU, one
// thread per point avoids recomputing the point's derivatives in every lane. lanes_for()
// picks it from the source's point count and the device, never from the batch size, so a
// hypothesis's summation order, and its bits, do not depend on K.
//
// Threads per point for n points: as many as keep n * lanes within a quarter of the
// threads the device holds at once (one 256-thread block per SM at this register use), a
// power of two up to kMaxLanes. More lanes shorten a point's chain of lookups, which a
// single alignment's latency wants, but repeat the point's derivatives in every lane,
// which a batch's throughput pays for. Measured on an H100 (ndtcu_bench --batch, KITTI
// 5k and hdl32 16k points): against half the resident threads, this bound (1 lane
// instead of 2 for both) takes 25-50% less time per hypothesis-iteration in batches of
// 200-1024 and 8-10% more for a single alignment; against all of them (4 lanes for 5k
// points) batches take 60% longer and a single alignment 8% longer. Small scans keep
// more lanes (BALM's 1.4k points: 4).
int lanes_for(int n, int multiprocessors) {
  const long long resident = static_cast<long long>(multiprocessors) * kBlock;
  int lanes = 1;
  while (lanes < kMaxLanes && static_cast<long long>(n) * lanes * 4 <= resident) lanes *= 2;
  return lanes;
}

void launch_derivatives(const BatchArgs& a, dim3 grid, const math::PoseFrame* single, cudaStream_t stream) {
  if (grid.y > 1) {
    derivative_kernel<kBatchBlocksPerSm><<<grid, kBlock, 0, stream>>>(a, single);
  } else {
    derivative_kernel<kSingleBlocksPerSm><<<grid, kBlock, 0, stream>>>(a, single);
  }
}

void launch_reduce(const BatchArgs& a, int hypotheses, cudaStream_t stream) {
  reduce_kernel<<<static_cast<unsigned>(hypotheses), kBlock, 0, stream>>>(a);
}

cudaError_t launch_loop_body(const BatchArgs& a, int blocks, int slots, cudaGraphConditionalHandle handle,
                             bool in_graph, cudaStream_t stream) {
  launch_derivatives(a, dim3(blocks, slots), nullptr, stream);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    step_kernel<<<slots, kBlock, 0, stream>>>(a, handle, in_graph);
    launched = cudaGetLastError();
  }
  return launched;
}

cudaError_t launch_cooperative_loop(BatchArgs a, int blocks, cudaStream_t stream) {
  void* params[] = {&a};
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(cooperative_loop_kernel), dim3(blocks),
                                     dim3(kBlock), params, 0, stream);
}

cudaError_t cooperative_loop_blocks_per_sm(int& blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, cooperative_loop_kernel, kBlock, 0);
}

}  // namespace ndtcu::detail
