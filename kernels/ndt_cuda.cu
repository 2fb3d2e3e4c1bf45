// The CUDA NDT pipeline: a device-resident voxel map and sources, one derivative kernel
// per Newton evaluation for every running hypothesis of a batch, a fixed-order reduction
// per hypothesis, and the fixed-step update of kernels/ndt_step.hpp run on the device.
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
// The other shape measured (H100, ndtcu_bench --batch, Autoware preset): one thread block
// per hypothesis running its whole loop with __syncthreads only, no graph.
//  - Summing each thread's pairs over the whole scan before one block reduction, it took
//    8.4 ms for one KITTI 5k alignment (10 times this shape's 0.79 ms: one SM does all the
//    lookups), about the same at K = 200, and 30-55% less time per hypothesis-iteration at
//    K = 1024-4096 (KITTI 2.9 against 4.1 us, BALM 1.3 against 2.1, hdl32 6.9 against 8.3).
//    But its sums come in another order than a batch of one's, so a hypothesis's bits
//    would depend on the batch size.
//  - Made to give this shape's bits (the same 256-thread partial sums, block by block, then
//    the same reduction and step), it was slower than this shape at every K from 64 to 4096
//    (KITTI: 17.0 against 4.9 us per hypothesis-iteration at K = 64, 4.7 against 4.1 at
//    4096; 5-20% slower at K = 4096 on every workload, with one or two blocks per SM).
// So the per-block partial sums the bits require cost most of what the other shape saves.
//
// Hopper thread-block clusters were measured too (same benchmark, 2026-11-24): one
// cluster per hypothesis running its whole loop in one launch, block r of the cluster
// evaluating blocks r, r + 16, ... of the scan (block_partial below, so the same partials)
// into block 0's shared memory through distributed shared memory, a cluster barrier,
// block 0 summing them in reduce_partials' order and taking hypothesis_step on one thread,
// a second barrier, every block reading the next pose frame from block 0. Bit-identical to
// this shape, and slower at every K: a single alignment at 30 iterations took 1.59 ms
// against 1.07 (KITTI 5k), 1.06 against 0.86 (BALM 1.4k), 2.65 against 1.31 (hdl32 16k);
// batches of 200 took 18.8 against 10.6 ms, 15.6 against 8.6 and 22.0 against 13.6, and of
// 1024 91 against 49 ms (KITTI). A cluster holds at most 16 blocks, and the scans above
// have 20-63 (lanes_for keeps a quarter of the device busy), so its blocks run two to four
// evaluation passes in sequence where this shape runs one wave; and every cluster's SMs
// wait through its own step, where here one step kernel serves all hypotheses at once. The
// launches it saves (about 5 us per iteration) do not pay for either. So this shape stays,
// and it needs no cluster support: every GPU with the 12.4 driver's conditional graph
// nodes runs it.
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "fixed_order_reduce.cuh"
#include "ndt_point.hpp"
#include "ndt_step.hpp"
#include "voxel_lookup_build.cuh"

#include "../src/cuda/cuda_backend.hpp"
#include "../src/cuda/cuda_voxel_build.hpp"
#include "../src/cuda/device_tiled_map.hpp"
#include "../src/map/dense_voxel_index.hpp"
#include "../src/ndt/optimizer.hpp"
#include "../src/log.hpp"
#include "../src/nvtx.hpp"

#include <ndtcu/cuda_device.hpp>

#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>

namespace ndtcu::detail {
namespace {

namespace cg = cooperative_groups;

constexpr int kSums = math::kSumSize;
// The type of the per-pair terms (the point's Jacobian and Hessian, q, the voxel's
// inverse covariance, the Gaussian) and of each thread's sums over its pairs; the block's
// and the scan's sums are double. Measured on an H200 (ndtcu_bench --batch, one run,
// BENCHMARK.md): with this kernel otherwise the same, double terms need about twice the
// registers, so at a batch bound of three blocks per SM they spill and batches of 200-1024
// take 2.7 times as long per hypothesis-iteration (KITTI 5k 5.7 against 2.1 us), and a
// single alignment 7% longer; against the earlier all-double kernel at its own best bound
// (two blocks), this one takes 30-32% less per hypothesis-iteration in batches (KITTI 5k
// 3.03 -> 2.08 us, BALM 2.43 -> 1.66, hdl32 6.30 -> 4.39). What it costs: the
// derivatives differ from the CPU backend's (all double) by at most 1.2e-6 of their
// scale, scores by 2e-7 (measured), and an alignment may stop one iteration apart from
// the CPU's (tests/gpu state the tolerances). The GPU's bits are its own and do not depend
// on the batch.
using Real = float;

// Threads per source point (1 to 8). One evaluation is bounded by the latency of the
// lookups (up to 27 dependent load chains per point), not by arithmetic. When the source
// is small next to the GPU, several threads share a point's cells, which shortens each
// thread's chain and puts more warps in flight; when the source alone fills the GPU, one
// thread per point avoids recomputing the point's derivatives in every lane. lanes_for()
// picks it from the source's point count and the device, never from the batch size, so a
// hypothesis's summation order, and its bits, do not depend on K.
constexpr int kMaxLanes = 8;
// 256 threads per block: the 31-double per-thread sums stay in registers within the
// 255-register limit.
constexpr int kBlock = 256;
constexpr int kWarpsPerBlock = kBlock / 32;

/// A source of the batch: where its points start in the concatenated buffers, how many,
/// and its launch shape (threads per point, blocks).
struct DeviceSource {
  int offset;
  int n;
  int lanes;
  int blocks;
};

/// One hypothesis on the device: its loop state and the pose frame of its next evaluation
/// (written by the host for the first, by the step kernel after).
struct DeviceHyp {
  math::StepState state;
  math::PoseFrame frame;
  int source;
  double prior_center[6];  ///< the pose prior's centre (read when the rules have a prior)
};

/// Per-map and per-source constants, in device memory (uploaded when they change).
struct DeviceConfig {
  math::VoxelGridView grid;
  const float* x;
  const float* y;
  const float* z;
  const DeviceSource* sources;
  math::Search search;
  double d1, d2;
};

/// What the kernels of one batch share: pointers into the backend's buffers, fixed while a
/// graph built on them lives.
struct BatchArgs {
  const DeviceConfig* cfg;
  DeviceHyp* hyps;              ///< [K]
  int* active;                  ///< running hypotheses, compacted in hypothesis order
  int* active_count;            ///< how many
  int* running;                 ///< [K] per slot: still running after the step
  Vec<kSums>* partials;         ///< [K][max_blocks] one partial sum per block
  Vec<kSums>* sums;             ///< [K] each hypothesis's sums at its current pose
  math::StepTrace* trace;       ///< [K][max_iterations], or null
  unsigned* ticket;             ///< the step kernel's last-block counter (zero between launches)
  int max_blocks;               ///< partials per hypothesis
  const math::StepRules* rules; ///< the batch's rules (uploaded per batch: graphs do not depend on them)
};

/// Threads per point for n points: as many as keep n * lanes within a quarter of the
/// threads the device holds at once (one 256-thread block per SM at this register use), a
/// power of two up to kMaxLanes. More lanes shorten a point's chain of lookups, which a
/// single alignment's latency wants, but repeat the point's derivatives in every lane,
/// which a batch's throughput pays for. Measured on an H100 (ndtcu_bench --batch, KITTI
/// 5k and hdl32 16k points): against half the resident threads, this bound (1 lane
/// instead of 2 for both) takes 25-50% less time per hypothesis-iteration in batches of
/// 200-1024 and 8-10% more for a single alignment; against all of them (4 lanes for 5k
/// points) batches take 60% longer and a single alignment 8% longer. Small scans keep
/// more lanes (BALM's 1.4k points: 4).
int lanes_for(int n, int multiprocessors) {
  const long long resident = static_cast<long long>(multiprocessors) * kBlock;
  int lanes = 1;
  while (lanes < kMaxLanes && static_cast<long long>(n) * lanes * 4 <= resident) lanes *= 2;
  return lanes;
}

// Blocks of the derivative kernel per SM. With float pair terms, float per-thread sums
// and the block reduced one component at a time (block_partial), it takes 140 registers
// unbounded (one 256-thread block per SM, 12.5% occupancy) and 64 at four blocks, 372
// bytes spilled. Measured on an H200 (ndtcu_bench --batch, same run): four blocks against
// three (80 registers) take 3-8% less time per hypothesis-iteration in batches of 200 and
// 1024 on KITTI 5k, BALM 1.4k and hdl32 16k; a single alignment runs one partial wave and
// wants no spills, so batches run the four-block instance and a batch of one the unbounded
// one; both come from the same PTX, so their arithmetic, and bits, are the same (the batch
// tests compare them bit for bit). Before (double terms and sums, cub's whole-vector
// block reduction): 212-220 registers unbounded, 128 at two blocks with 440 bytes spilled;
// three or four blocks spilled so much that batches took 3 and 7 times longer.
//
// Also measured and not kept. H200: twice the threads per point (lanes_for's bound at half
// the resident threads) cut a single alignment's 30 iterations by 18-22% (KITTI 5k 0.89 ->
// 0.74 ms, hdl32 1.20 -> 0.94) but cost batches 25-30% of their throughput (KITTI 27,000
// -> 20,100 aligns/s at K = 1024); the lanes are the source's, not the batch's (a
// hypothesis's bits must not depend on K), so one of the two pays. H100, batches of 200
// and 1024: a block-wide pair list (the voxels each thread finds compacted into shared
// memory, then the pairs dealt evenly over the block with the point derivatives
// recomputed per pair, so that no thread idles on a point with fewer voxels) took 16%
// (KITTI 5k), 31% (hdl32) and 16% (BALM) more time per hypothesis-iteration: the block
// scan, the extra barrier and the recomputed derivatives cost more than the idle lanes
// they save. A warp reduction by transposition (31 shuffles of halving vectors instead of
// 31 x 5) saved 2-7% of a single alignment but, by the registers its vector takes, made
// the batch instance spill enough to take 40-55% longer per hypothesis-iteration.
constexpr int kSingleBlocksPerSm = 1;
constexpr int kBatchBlocksPerSm = 4;

/// The shared memory of block_partial's reduction: each warp's sums.
using WarpSums = double[kWarpsPerBlock][kSums];

/// Block `b` of a source's evaluation at `terms`, its partial sum written to `out` by
/// threads 0 to kSums - 1: LANES threads per point sharing its cells, each thread's pairs
/// summed in Real, then the block's threads reduced in double one component at a time (a
/// fixed shuffle tree over each warp, its lane 0 into `warp_sums`, then thread k adds
/// component k of the warps in a fixed tree). One component at a time keeps one double
/// in flight through the reduction, where reducing the 31-double vector whole (as
/// cub::BlockReduce does) holds two of them: 124 registers, the kernel's peak.
__device__ void block_partial(const DeviceConfig& c, const DeviceSource& src, const math::PoseTerms<Real>& terms,
                              bool with_hessian, int b, WarpSums& warp_sums, double* out) {
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
    pairs = math::accumulate_point_cells(c.grid, c.search, terms, x, y, z, tp, with_hessian, lane, lanes, own, best);
  }
  // The point's lanes (consecutive, within one warp): best term (max) and pair count
  // (sum), then the point's NVTL term and counts once, on its first lane.
  for (int offset = lanes / 2; offset > 0; offset >>= 1) {
    best = fmax(best, __shfl_xor_sync(0xffffffffu, best, offset));
    pairs += __shfl_xor_sync(0xffffffffu, pairs, offset);
  }
  if (valid && lane == 0 && pairs > 0) {
    own[math::kNvtlSum] += best;
    own[math::kCorrespondences] += static_cast<Real>(pairs);
    own[math::kPointsMatched] += Real(1);
  }
  const int warp = threadIdx.x / 32, in_warp = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < kSums; ++k) {
    double v = static_cast<double>(own[k]);
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (in_warp == 0) warp_sums[warp][k] = v;
  }
  __syncthreads();
  static_assert(kWarpsPerBlock == 8, "the warps' fixed tree below");
  if (threadIdx.x < kSums) {
    const int k = threadIdx.x;
    out[k] = ((warp_sums[0][k] + warp_sums[1][k]) + (warp_sums[2][k] + warp_sums[3][k])) +
             ((warp_sums[4][k] + warp_sums[5][k]) + (warp_sums[6][k] + warp_sums[7][k]));
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
  __shared__ WarpSums warp_sums;
  if (threadIdx.x == 0) {
    const math::PoseFrame& f = single ? *single : a.hyps[h].frame;
    math::pose_terms(f, static_cast<Real>(c.d1), static_cast<Real>(c.d2), terms);
    flags = f.flags;
  }
  __syncthreads();
  block_partial(c, src, terms, (flags & math::kWithHessian) != 0, b, warp_sums,
                a.partials[static_cast<std::size_t>(h) * a.max_blocks + b].v);
  __syncthreads();  // terms and warp_sums are read before a next call of this block writes them
}

/// The derivative kernel: block (b, slot) evaluates block b of running hypothesis
/// active[slot] (evaluate_block).
template <int BLOCKS_PER_SM>
__global__ void __launch_bounds__(kBlock, BLOCKS_PER_SM) derivative_kernel(BatchArgs a, const math::PoseFrame* single) {
  if (static_cast<int>(blockIdx.y) >= *a.active_count) return;
  evaluate_block(a, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x), single);
}

/// Hypothesis h's sums from its `blocks` partials, by a whole block in a fixed order:
/// thread t adds component t % 32 of blocks t / 32, t / 32 + 8, ... in order (a warp reads
/// whole partials, and every load is independent of the others), then thread c adds the 8
/// groups of component c in a fixed tree. The order depends on the block count alone.
__device__ void reduce_partials(const Vec<kSums>* partials, int blocks, double* out) {
  static_assert(kSums <= 32 && kBlock == 256, "one component per lane, 8 groups");
  __shared__ double group[kWarpsPerBlock][32];
  const int c = threadIdx.x % 32, g = threadIdx.x / 32;
  double s = 0.0;
  if (c < kSums) {
    for (int b = g; b < blocks; b += kWarpsPerBlock) s += partials[b].v[c];
  }
  group[g][c] = s;
  __syncthreads();
  if (threadIdx.x < kSums) {
    const double* v = &group[0][threadIdx.x];
    out[threadIdx.x] = ((v[0] + v[32]) + (v[64] + v[96])) + ((v[128] + v[160]) + (v[192] + v[224]));
  }
  __syncthreads();
}

/// The host-driven evaluations' reduction: block h sums hypothesis h's partials into
/// sums[h].
__global__ void __launch_bounds__(kBlock) reduce_kernel(BatchArgs a) {
  const int h = blockIdx.x;
  const DeviceSource src = a.cfg->sources[a.hyps[h].source];
  reduce_partials(a.partials + static_cast<std::size_t>(h) * a.max_blocks, src.blocks, a.sums[h].v);
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
  reduce_partials(a.partials + static_cast<std::size_t>(h) * a.max_blocks, src.blocks, sums);
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

/// Grows `buffer` to hold `n` (with headroom); true when it was reallocated (graphs built
/// on its old address are then stale).
template <typename T>
bool grow(DeviceBuffer<T>& buffer, std::size_t n) {
  const T* before = buffer.data();
  buffer.resize_with_headroom(n);
  return buffer.data() != before;
}

/// A captured loop graph for a grid of `blocks` x `slots` and the buffers of `generation`.
struct LoopGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int blocks = 0, slots = 0;
  bool trace = false;
  std::uint64_t generation = 0;
  std::uint64_t last_used = 0;
};

void destroy(LoopGraph& g) noexcept {
  if (g.exec) cudaGraphExecDestroy(g.exec);
  if (g.graph) cudaGraphDestroy(g.graph);
  g.exec = nullptr;
  g.graph = nullptr;
}

}  // namespace

std::uint64_t device_allocations() noexcept { return device_allocation_count(); }

namespace {

// One uploaded map: its buffers and the view of them the kernels read.
struct DeviceMap {
  DeviceBuffer<double> mean[3], icov[6];
  DeviceBuffer<float> centroid[3];
  DeviceBuffer<std::uint64_t> table_keys;
  DeviceBuffer<std::int32_t> table_values, dense;
  math::VoxelGridView grid{};
  VoxelLookup lookup = VoxelLookup::Hash;
  double resolution = 0.0;
  bool has_map = false;
};

// Where a device map's voxel arrays are written: VoxelGridView's pointers, writable.
struct VoxelArrays {
  double* mean[3];
  double* icov[6];
  float* centroid[3];
};

// The statistics of voxels built on the device (AoS, as the build computes them) into the
// map's structure of arrays.
__global__ void unpack_voxels_kernel(const VoxelResult* results, std::size_t n, VoxelArrays out) {
  const std::size_t v = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= n) return;
  const VoxelResult& r = results[v];
  for (int a = 0; a < 3; ++a) {
    out.mean[a][v] = r.mean[a];
    out.centroid[a][v] = r.centroid[a];
  }
  for (int e = 0; e < 6; ++e) out.icov[e][v] = r.icov[e];
}

// Fills `d` with `map` on `stream` (see CudaBackend::set_map for the lookup) and returns
// the bytes sent up. Its voxels, hash table and dense index come from one of two places:
//  - the host map (`cells` null): uploaded. With `pinned` (staging): buffers that must
//    grow take half as much again, so the next maps of a moving vehicle (a little larger
//    or smaller) reuse them (a reallocation frees the old buffer, which synchronizes the
//    device), and the arrays are packed into the pinned buffer first and copied from
//    there: a pageable copy goes through the driver's own staging and held up the other
//    stream's alignments by up to 8 ms for a 400k-voxel map on an H100; from pinned
//    memory the copy engine runs beside them. The caller synchronizes `stream` before
//    reusing `pinned`.
//  - `cells`, the same voxels where the GPU build left them (map was assembled from
//    them): copied on the device, the hash table and the dense index built there. Nothing
//    but the lookup's metadata crosses the bus.
std::uint64_t upload_map(DeviceMap& d, const VoxelMap& map, VoxelLookup lookup, std::size_t dense_budget_bytes,
                         cudaStream_t stream, PinnedBuffer<unsigned char>* pinned,
                         const DeviceVoxelCells* cells = nullptr) {
  d.has_map = false;  // a failed upload leaves no half-set map behind
  const std::size_t nv = map.size();
  if (cells && cells->voxels != nv) {
    throw Error("CUDA backend: the device build has " + std::to_string(cells->voxels) + " voxels, its map " +
                std::to_string(nv));
  }
  // Dense index over the occupied lattice box, when asked for or when it fits the budget.
  const LatticeBox box = occupied_box(map);
  const double box_cells = box.cells();
  const double dense_bytes = box.bytes();
  bool use_dense = lookup == VoxelLookup::Dense || (lookup == VoxelLookup::Auto && dense_bytes <= dense_budget_bytes);
  if (nv == 0) use_dense = false;
  DenseVoxelIndex index;
  if (use_dense) {
    // Check the device before building the host copy: a forced dense index over a sparse,
    // wide map can ask for more than any device has.
    std::size_t free_b = 0, total_b = 0;
    NDTCU_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (dense_bytes > double(free_b)) {
      throw CudaError("dense voxel index of " + std::to_string(static_cast<unsigned long long>(box_cells)) +
                      " cells needs " + std::to_string(static_cast<unsigned long long>(dense_bytes)) +
                      " bytes, the device has " + std::to_string(free_b) + " of " + std::to_string(total_b) +
                      " bytes free (use the hash lookup)");
    }
    if (!cells) index = DenseVoxelIndex::build(map, box);
  }
  constexpr std::size_t kAlign = 256;
  const auto padded = [](std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  if (pinned) {
    const std::size_t total = 9 * padded(nv * sizeof(double)) + 3 * padded(nv * sizeof(float)) +
                              padded(map.table_keys().size() * sizeof(std::uint64_t)) +
                              padded(map.table_values().size() * sizeof(std::int32_t)) +
                              padded(index.cells.size() * sizeof(std::int32_t));
    pinned->reserve_with_headroom(total);
  }
  std::size_t offset = 0;
  std::uint64_t bytes = 0;
  const auto put = [&](auto& buffer, const auto* host, std::size_t n) {
    const std::size_t size = n * sizeof(*host);
    bytes += size;
    if (!pinned) {
      buffer.upload(host, n, stream);
      return;
    }
    buffer.resize_with_headroom(n);
    if (n == 0) return;
    unsigned char* slot = pinned->data() + offset;
    std::memcpy(slot, host, size);
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(buffer.data(), slot, size, cudaMemcpyHostToDevice, stream));
    offset += padded(size);
  };
  const std::size_t capacity = map.table_keys().size();
  if (cells) {
    VoxelArrays out{};
    for (int a = 0; a < 3; ++a) {
      d.mean[a].resize_discard(nv);
      d.centroid[a].resize_discard(nv);
      out.mean[a] = d.mean[a].data();
      out.centroid[a] = d.centroid[a].data();
    }
    for (int e = 0; e < 6; ++e) {
      d.icov[e].resize_discard(nv);
      out.icov[e] = d.icov[e].data();
    }
    d.table_keys.resize_discard(capacity);
    d.table_values.resize_discard(capacity);
    if (capacity) {
      // All bits set: kEmptyKey in every key, -1 in every value.
      NDTCU_CUDA_CHECK(cudaMemsetAsync(d.table_keys.data(), 0xff, capacity * sizeof(std::uint64_t), stream));
      NDTCU_CUDA_CHECK(cudaMemsetAsync(d.table_values.data(), 0xff, capacity * sizeof(std::int32_t), stream));
    }
    if (nv) {
      unpack_voxels_kernel<<<grid_blocks(nv, kBlock), kBlock, 0, stream>>>(cells->results, nv, out);
      NDTCU_CUDA_CHECK_LAUNCH();
      insert_keys_kernel<<<grid_blocks(nv, kBlock), kBlock, 0, stream>>>(cells->keys, nv, d.table_keys.data(),
                                                               d.table_values.data(), capacity - 1);
      NDTCU_CUDA_CHECK_LAUNCH();
    }
  } else {
    for (int a = 0; a < 3; ++a) {
      put(d.mean[a], map.mean(a).data(), nv);
      put(d.centroid[a], map.centroid(a).data(), nv);
    }
    for (int e = 0; e < 6; ++e) put(d.icov[e], map.inverse_covariance(e).data(), nv);
    put(d.table_keys, map.table_keys().data(), capacity);
    put(d.table_values, map.table_values().data(), map.table_values().size());
  }

  math::VoxelGridView g{};
  g.size = static_cast<std::int32_t>(nv);
  for (int a = 0; a < 3; ++a) {
    g.mean[a] = d.mean[a].data();
    g.centroid[a] = d.centroid[a].data();
  }
  for (int e = 0; e < 6; ++e) g.icov[e] = d.icov[e].data();
  g.table_keys = d.table_keys.data();
  g.table_values = d.table_values.data();
  g.table_mask = capacity == 0 ? 0 : capacity - 1;
  g.inv_resolution = map.inverse_resolution();
  g.radius_sq = map.radius_squared();
  if (use_dense) {
    if (cells) {
      const auto n_cells = static_cast<std::size_t>(box_cells);
      d.dense.resize_discard(n_cells);
      NDTCU_CUDA_CHECK(cudaMemsetAsync(d.dense.data(), 0xff, n_cells * sizeof(std::int32_t), stream));  // -1
      DenseVoxelIndex::attach(g, d.dense.data(), box);
      scatter_dense_kernel<<<grid_blocks(nv, kBlock), kBlock, 0, stream>>>(cells->keys, nv, d.dense.data(), g);
      NDTCU_CUDA_CHECK_LAUNCH();
    } else {
      put(d.dense, index.cells.data(), index.cells.size());
      DenseVoxelIndex::attach(g, d.dense.data(), box);
    }
    d.lookup = VoxelLookup::Dense;
  } else {
    d.lookup = VoxelLookup::Hash;
  }
  d.grid = g;
  d.resolution = map.resolution();
  d.has_map = true;
  log().debug("cuda: map of {} voxels {}, {} lookup ({} cells in the occupied box)", nv,
              cells ? "taken from the device build" : "uploaded", d.lookup == VoxelLookup::Dense ? "dense" : "hash",
              box_cells);
  return bytes;
}

}  // namespace

namespace {

// NDTCU_CUDA_LOOP: how a new backend launches the device loop (LoopLaunch).
LoopLaunch loop_launch_from_environment() {
  const char* env = std::getenv("NDTCU_CUDA_LOOP");
  if (!env || !*env || std::strcmp(env, "auto") == 0) return LoopLaunch::Auto;
  if (std::strcmp(env, "graph") == 0) return LoopLaunch::Graph;
  if (std::strcmp(env, "stream") == 0) return LoopLaunch::Stream;
  throw Error(std::string("NDTCU_CUDA_LOOP is '") + env + "'; it must be 'auto', 'graph' or 'stream'");
}

}  // namespace

struct CudaBackend::Impl {
  cudaStream_t stream = nullptr;
  std::uint64_t allocations_at_start = 0;
  // The map in use, and the next one staged on the upload stream (stage_map).
  DeviceMap map;
  DeviceMap staged;
  std::mutex staging_mutex;                    // guards the staged map and the upload stream
  cudaStream_t upload_stream = nullptr;        // created by the first stage_map
  PinnedBuffer<unsigned char> staging_host;    // the staged map's arrays, packed for the copy
  cudaEvent_t staged_done = nullptr;           // the staged map's upload finished
  cudaEvent_t map_released = nullptr;          // the last map swapped out is no longer read
  std::shared_ptr<const VoxelMap> staged_map;  // what `staged` holds, once its upload is queued (else null)
  VoxelLookup staged_lookup = VoxelLookup::Auto;
  std::size_t staged_budget = 0;
  std::uint64_t staged_bytes = 0;
  // A tiled map's device twin, when the map comes from one (use_tiled_map), and the
  // version of it in use.
  DeviceTiledMap* tiled = nullptr;
  DeviceMapVersion tiled_version;
  // Sources, concatenated.
  DeviceBuffer<float> x, y, z;
  DeviceBuffer<DeviceSource> source_table;
  std::vector<DeviceSource> sources;
  std::vector<float> staging;
  int multiprocessors = 1;  // of the current device
  int driver_version = 0;   // cudaDriverGetVersion: conditional graph nodes need 12040
  int cooperative_blocks = 0;  // cooperative_loop_kernel's blocks resident at once (0: no cooperative launch)
  LoopLaunch loop_launch = LoopLaunch::Auto;
  // Configuration.
  DeviceBuffer<DeviceConfig> config;
  SearchMethod search = SearchMethod::Radius;
  double outlier_ratio = 0.55;
  bool config_dirty = true;
  // Hypotheses: state, running list, partials, sums, trace.
  DeviceBuffer<DeviceHyp> hyps;
  DeviceBuffer<int> active, running, active_count;
  DeviceBuffer<Vec<kSums>> partials, sums;
  DeviceBuffer<math::StepTrace> trace;
  DeviceBuffer<unsigned> ticket;
  DeviceBuffer<math::StepRules> rules;
  DeviceBuffer<math::PoseFrame> eval_frame;
  PinnedBuffer<DeviceHyp> pinned_hyps;
  PinnedBuffer<Vec<kSums>> pinned_sums;
  PinnedBuffer<math::StepTrace> pinned_trace;
  PinnedBuffer<math::PoseFrame> pinned_frame;
  PinnedBuffer<int> pinned_active;
  PinnedBuffer<math::StepRules> pinned_rules;
  int partial_blocks = 0;            // partials per hypothesis the buffers hold
  int eval_source = -1;              // the source hyps[0] names for evaluate()
  std::uint64_t generation = 1;      // bumped whenever a buffer a graph points into moves
  cudaEvent_t start = nullptr, stop = nullptr;
  CudaTelemetry telemetry;
  // Loop graphs, by grid shape: a few are kept, so a localizer's single alignments and
  // its six-hypothesis covariance batches do not rebuild each other's graph.
  static constexpr std::size_t kGraphCache = 4;
  std::vector<LoopGraph> graphs;
  std::uint64_t graph_clock = 0;
  cudaStream_t capture_stream = nullptr;  // a private stream: the caller's may be the legacy default

  ~Impl() {
    unbind_tiled();
    if (upload_stream) {
      cudaStreamSynchronize(upload_stream);
      cudaStreamDestroy(upload_stream);
    }
    if (staged_done) cudaEventDestroy(staged_done);
    if (map_released) cudaEventDestroy(map_released);
    for (LoopGraph& g : graphs) destroy(g);
    if (capture_stream) cudaStreamDestroy(capture_stream);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }

  void unbind_tiled() noexcept {
    if (!tiled) return;
    tiled->release(this, stream);
    tiled = nullptr;
    tiled_version = DeviceMapVersion{};
  }

  void upload_config() {
    if (!map.has_map && !tiled) throw Error("CudaBackend: no map set");
    const math::GaussConstants g = math::gauss_constants(tiled ? tiled->resolution() : map.resolution, outlier_ratio);
    DeviceConfig c{};
    c.grid = tiled ? tiled_version.grid : map.grid;
    c.x = x.data();
    c.y = y.data();
    c.z = z.data();
    c.sources = source_table.data();
    c.search = to_math(search);
    c.d1 = g.d1;
    c.d2 = g.d2;
    config.upload(&c, 1, stream);
    telemetry.setup_bytes_up += sizeof(c);
    config_dirty = false;
  }

  int max_source_blocks() const {
    int b = 1;
    for (const DeviceSource& s : sources) b = std::max(b, s.blocks);
    return b;
  }

  /// Sizes the per-hypothesis buffers for `k` hypotheses (grow-only, with headroom).
  void size_for(std::size_t k, bool with_trace, int max_iterations) {
    const int blocks = max_source_blocks();
    bool moved = false;
    try {
    if (blocks > partial_blocks) {
      partial_blocks = blocks + blocks / 4 + 1;  // headroom for scans a little larger
      partials.resize_discard(0);
      moved = true;
    }
    moved |= grow(partials, k * static_cast<std::size_t>(partial_blocks));
    moved |= grow(hyps, k);
    moved |= grow(active, k);
    moved |= grow(running, k);
    moved |= grow(sums, k);
    moved |= grow(active_count, 1);
    moved |= grow(ticket, 1);
    moved |= grow(rules, 1);
    if (with_trace && grow(trace, k * static_cast<std::size_t>(max_iterations))) {
      moved = true;
      // A hypothesis writes only the iterations it runs, and the read-back copies every
      // slot: zero them once, so no read-back ever copies uninitialized memory.
      NDTCU_CUDA_CHECK(cudaMemsetAsync(trace.data(), 0, trace.capacity() * sizeof(math::StepTrace), stream));
    }
    } catch (...) {
      ++generation;  // a buffer may have been freed: no cached graph may point into it
      throw;
    }
    if (moved) ++generation;
  }

  BatchArgs args(bool with_trace) {
    BatchArgs a{};
    a.cfg = config.data();
    a.hyps = hyps.data();
    a.active = active.data();
    a.active_count = active_count.data();
    a.running = running.data();
    a.partials = partials.data();
    a.sums = sums.data();
    a.trace = with_trace ? trace.data() : nullptr;
    a.ticket = ticket.data();
    a.max_blocks = partial_blocks;
    a.rules = rules.data();
    return a;
  }

  /// Uploads the first `k` hypotheses staged in pinned_hyps and the running list of all of
  /// them (0 .. k - 1) on the stream.
  void upload_hypotheses(std::size_t k) {
    for (std::size_t i = 0; i < k; ++i) pinned_active.data()[i] = static_cast<int>(i);
    pinned_active.data()[k] = static_cast<int>(k);
    NDTCU_CUDA_CHECK(
        cudaMemcpyAsync(hyps.data(), pinned_hyps.data(), k * sizeof(DeviceHyp), cudaMemcpyHostToDevice, stream));
    NDTCU_CUDA_CHECK(
        cudaMemcpyAsync(active.data(), pinned_active.data(), k * sizeof(int), cudaMemcpyHostToDevice, stream));
    NDTCU_CUDA_CHECK(
        cudaMemcpyAsync(active_count.data(), pinned_active.data() + k, sizeof(int), cudaMemcpyHostToDevice, stream));
  }

  /// The loop graph for `k` hypotheses of the current sources, over loop_slots(k) x
  /// loop_blocks().
  LoopGraph& loop_graph(int k, bool with_trace) {
    const int slots = loop_slots(k);
    const int needed = max_source_blocks();
    ++graph_clock;
    for (LoopGraph& g : graphs) {
      if (g.exec && g.slots == slots && needed <= g.blocks && needed * 2 >= g.blocks && g.trace == with_trace &&
          g.generation == generation) {
        g.last_used = graph_clock;
        return g;
      }
    }
    LoopGraph* target = nullptr;
    if (graphs.size() < kGraphCache) {
      graphs.emplace_back();
      target = &graphs.back();
    } else {
      target = &*std::min_element(graphs.begin(), graphs.end(),
                                  [](const LoopGraph& l, const LoopGraph& r) { return l.last_used < r.last_used; });
      destroy(*target);
    }
    build_graph(*target, slots, loop_blocks(), with_trace);
    target->last_used = graph_clock;
    return *target;
  }

  /// The loop's grid for `k` hypotheses: `slots` is k rounded up to a power of two (so
  /// batch sizes nearby share a graph; slots past the running count exit at once), and
  /// the blocks are the largest source's with headroom (so scans a little larger or
  /// smaller share it too; blocks past a source's exit at once).
  static int loop_slots(int k) {
    int slots = 1;
    while (slots < k) slots *= 2;
    return slots;
  }
  int loop_blocks() const {
    const int needed = max_source_blocks();
    return std::min(needed + needed / 4 + 1, partial_blocks);
  }

  /// One pass of the loop's body on `s`: the derivative kernel, then the step kernel.
  /// Returns the launch's error (captured launches report theirs at the capture's end).
  static cudaError_t launch_loop_body(cudaStream_t s, const BatchArgs& a, int blocks, int slots,
                                      cudaGraphConditionalHandle handle, bool in_graph) {
    if (slots > 1) {
      derivative_kernel<kBatchBlocksPerSm><<<dim3(blocks, slots), kBlock, 0, s>>>(a, nullptr);
    } else {
      derivative_kernel<kSingleBlocksPerSm><<<dim3(blocks, slots), kBlock, 0, s>>>(a, nullptr);
    }
    cudaError_t launched = cudaGetLastError();
    if (launched == cudaSuccess) {
      step_kernel<<<slots, kBlock, 0, s>>>(a, handle, in_graph);
      launched = cudaGetLastError();
    }
    return launched;
  }

  void build_graph(LoopGraph& g, int slots, int blocks, bool with_trace) {
    if (!capture_stream) NDTCU_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking));
    NDTCU_CUDA_CHECK(cudaGraphCreate(&g.graph, 0));
    try {
      cudaGraphConditionalHandle handle = 0;
      NDTCU_CUDA_CHECK(cudaGraphConditionalHandleCreate(&handle, g.graph, 1, cudaGraphCondAssignDefault));
      cudaGraphNodeParams params{};
      params.type = cudaGraphNodeTypeConditional;
      params.conditional.handle = handle;
      params.conditional.type = cudaGraphCondTypeWhile;
      params.conditional.size = 1;
      cudaGraphNode_t node = nullptr;
      NDTCU_CUDA_CHECK(cudaGraphAddNode(&node, g.graph, nullptr, nullptr, 0, &params));
      cudaGraph_t body = params.conditional.phGraph_out[0];
      NDTCU_CUDA_CHECK(
          cudaStreamBeginCaptureToGraph(capture_stream, body, nullptr, nullptr, 0, cudaStreamCaptureModeThreadLocal));
      const cudaError_t launched = launch_loop_body(capture_stream, args(with_trace), blocks, slots, handle, true);
      cudaGraph_t captured = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(capture_stream, &captured);
      NDTCU_CUDA_CHECK(launched);
      NDTCU_CUDA_CHECK(ended);
      NDTCU_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
    } catch (...) {
      destroy(g);
      throw;
    }
    g.slots = slots;
    g.blocks = blocks;
    g.trace = with_trace;
    g.generation = generation;
    telemetry.graph_builds += 1;
  }
};

CudaBackend::CudaBackend(CUstream_st* stream) : impl_(std::make_unique<Impl>()) {
  std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw CudaError("CUDA backend unavailable: " + why);
  impl_->loop_launch = loop_launch_from_environment();
  impl_->stream = stream;
  impl_->allocations_at_start = device_allocation_count();
  int device = 0;
  NDTCU_CUDA_CHECK(cudaGetDevice(&device));
  NDTCU_CUDA_CHECK(cudaDeviceGetAttribute(&impl_->multiprocessors, cudaDevAttrMultiProcessorCount, device));
  NDTCU_CUDA_CHECK(cudaDriverGetVersion(&impl_->driver_version));
  int cooperative = 0, per_sm = 0;
  NDTCU_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  if (cooperative) {
    NDTCU_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cooperative_loop_kernel, kBlock, 0));
    impl_->cooperative_blocks = per_sm * impl_->multiprocessors;
  }
  NDTCU_CUDA_CHECK(cudaEventCreate(&impl_->start));
  NDTCU_CUDA_CHECK(cudaEventCreate(&impl_->stop));
  impl_->config.resize_discard(1);
  impl_->eval_frame.resize_discard(1);
  impl_->pinned_frame.reserve(1);
  impl_->pinned_sums.reserve(1);
  impl_->pinned_active.reserve(2);
  impl_->pinned_hyps.reserve(1);
  impl_->pinned_rules.reserve(1);
  impl_->size_for(1, false, 1);
  NDTCU_CUDA_CHECK(cudaMemsetAsync(impl_->ticket.data(), 0, sizeof(unsigned), impl_->stream));
}

CudaBackend::~CudaBackend() = default;

void CudaBackend::set_loop_launch(LoopLaunch launch) noexcept { impl_->loop_launch = launch; }
LoopLaunch CudaBackend::loop_launch() const noexcept { return impl_->loop_launch; }

void CudaBackend::set_map(const VoxelMap& map, VoxelLookup lookup, std::size_t dense_budget_bytes) {
  Impl& m = *impl_;
  m.unbind_tiled();
  {
    std::lock_guard<std::mutex> lock(m.staging_mutex);
    if (m.staged_map.get() == &map && m.staged_lookup == lookup && m.staged_budget == dense_budget_bytes) {
      // Staged already: the stream waits (on the device, not here) for its upload, the
      // buffers swap, and the old map's are free for the next staging once what is queued
      // now has run.
      NDTCU_CUDA_CHECK(cudaStreamWaitEvent(m.stream, m.staged_done, 0));
      std::swap(m.map, m.staged);
      NDTCU_CUDA_CHECK(cudaEventRecord(m.map_released, m.stream));
      m.telemetry.setup_bytes_up += m.staged_bytes;
      ++m.telemetry.map_swaps;
      m.staged_map.reset();
      m.config_dirty = true;
      return;
    }
  }
  m.telemetry.setup_bytes_up += upload_map(m.map, map, lookup, dense_budget_bytes, m.stream, nullptr);
  m.config_dirty = true;
}

void CudaBackend::set_map_from_device(const VoxelMap& map, const DeviceVoxelCells& cells, VoxelLookup lookup,
                                      std::size_t dense_budget_bytes) {
  Impl& m = *impl_;
  m.unbind_tiled();
  m.telemetry.setup_bytes_up += upload_map(m.map, map, lookup, dense_budget_bytes, m.stream, nullptr, &cells);
  m.config_dirty = true;
  // The cells stay the voxelizer's: done with them before it may run again.
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

void CudaBackend::stage_map(std::shared_ptr<const VoxelMap> map, VoxelLookup lookup, std::size_t dense_budget_bytes) {
  if (!map) throw Error("CudaBackend::stage_map: null map");
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.staging_mutex);
  m.staged_map.reset();
  if (!m.upload_stream) {
    NDTCU_CUDA_CHECK(cudaStreamCreateWithFlags(&m.upload_stream, cudaStreamNonBlocking));
    NDTCU_CUDA_CHECK(cudaEventCreateWithFlags(&m.staged_done, cudaEventDisableTiming));
    NDTCU_CUDA_CHECK(cudaEventCreateWithFlags(&m.map_released, cudaEventDisableTiming));
    NDTCU_CUDA_CHECK(cudaEventRecord(m.map_released, m.upload_stream));
  }
  // The staged buffers held the map swapped out last: overwrite them only once the
  // alignments queued before that swap have read it.
  NDTCU_CUDA_CHECK(cudaStreamWaitEvent(m.upload_stream, m.map_released, 0));
  m.staged_bytes = upload_map(m.staged, *map, lookup, dense_budget_bytes, m.upload_stream, &m.staging_host);
  NDTCU_CUDA_CHECK(cudaEventRecord(m.staged_done, m.upload_stream));
  // Here, not at the swap: the pinned buffer is free for the next staging, and the swap
  // finds the copy done.
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.upload_stream));
  m.staged_lookup = lookup;
  m.staged_budget = dense_budget_bytes;
  m.staged_map = std::move(map);
}

std::size_t CudaBackend::use_tiled_map(DeviceTiledMap& map, bool take_newer) {
  Impl& m = *impl_;
  if (m.tiled != &map) {
    m.unbind_tiled();
    DeviceMapVersion v;
    map.acquire(&m, m.stream, 0, v);  // throws while another backend is bound: nothing changed
    m.tiled = &map;
    m.tiled_version = v;
    m.config_dirty = true;
    ++m.telemetry.map_swaps;
    return v.voxels;
  }
  if (!take_newer) return m.tiled_version.voxels;
  DeviceMapVersion v;
  if (map.acquire(&m, m.stream, m.tiled_version.version, v)) {
    m.tiled_version = v;
    m.config_dirty = true;
    ++m.telemetry.map_swaps;
  }
  return m.tiled_version.voxels;
}

void CudaBackend::set_sources(const std::vector<PointCloudView>& sources) {
  Impl& m = *impl_;
  std::size_t total = 0;
  for (const PointCloudView& s : sources) total += s.size();
  if (total > static_cast<std::size_t>(std::numeric_limits<int>::max() / (2 * kMaxLanes))) {
    throw Error("CUDA backend: " + std::to_string(total) + " source points are more than it indexes");
  }
  // Whatever happens below, the configuration the kernels read (the point buffers'
  // addresses) is stale until uploaded again, and the cached sources are gone: a growth
  // that fails has already freed the old buffer.
  m.config_dirty = true;
  m.eval_source = -1;
  m.sources.clear();
  // A scan larger than any before grows the buffers to 1.5 times its size: localizing a
  // sequence whose filtered scans grow a little at a time would otherwise reallocate (a
  // device-wide synchronization) on every new maximum.
  try {
    for (auto* buffer : {&m.x, &m.y, &m.z}) buffer->resize_with_headroom(std::max<std::size_t>(total, 1));
  } catch (...) {
    ++m.generation;  // no cached graph may run on what was freed
    throw;
  }
  // Structure of arrays: x, y, z each contiguous, so a warp's loads coalesce.
  m.staging.resize(3 * total);
  std::size_t at = 0;
  for (const PointCloudView& s : sources) {
    DeviceSource d{};
    d.offset = static_cast<int>(at);
    d.n = static_cast<int>(s.size());
    d.lanes = lanes_for(d.n, m.multiprocessors);
    d.blocks = static_cast<int>(std::max<std::int64_t>(1, (static_cast<std::int64_t>(d.n) * d.lanes + kBlock - 1) / kBlock));
    m.sources.push_back(d);
    for (std::size_t i = 0; i < s.size(); ++i) {
      m.staging[at + i] = s[i].x();
      m.staging[total + at + i] = s[i].y();
      m.staging[2 * total + at + i] = s[i].z();
    }
    at += s.size();
  }
  m.x.upload(m.staging.data(), total, m.stream);
  m.y.upload(m.staging.data() + total, total, m.stream);
  m.z.upload(m.staging.data() + 2 * total, total, m.stream);
  m.source_table.upload(m.sources.data(), m.sources.size(), m.stream);
  m.telemetry.setup_bytes_up += 3 * total * sizeof(float) + m.sources.size() * sizeof(DeviceSource);
  m.eval_source = -1;
  m.config_dirty = true;
}

void CudaBackend::configure(SearchMethod search, double outlier_ratio) {
  Impl& m = *impl_;
  m.search = search;
  m.outlier_ratio = outlier_ratio;
  m.config_dirty = true;
}

math::DerivativeSums CudaBackend::evaluate(const Pose6& pose, bool with_hessian, int source) {
  Impl& m = *impl_;
  if (source < 0 || static_cast<std::size_t>(source) >= m.sources.size()) {
    throw Error("CUDA backend: evaluate of source " + std::to_string(source) + " of " + std::to_string(m.sources.size()));
  }
  if (m.config_dirty) m.upload_config();
  math::DerivativeSums out;
  out.clear();
  if (m.sources[static_cast<std::size_t>(source)].n == 0) return out;
  m.size_for(1, false, 1);
  if (m.eval_source != source) {
    // Hypothesis 0 names the source; the running list is that one hypothesis.
    DeviceHyp& h = m.pinned_hyps.data()[0];
    h = DeviceHyp{};
    h.source = source;
    m.upload_hypotheses(1);
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the pinned staging is reused below
    m.eval_source = source;
  }
  const double p[6] = {pose(0), pose(1), pose(2), pose(3), pose(4), pose(5)};
  *m.pinned_frame.data() = math::pose_frame(p, with_hessian);
  const BatchArgs a = m.args(false);
  const int blocks = m.sources[static_cast<std::size_t>(source)].blocks;
  NDTCU_NVTX_RANGE("derivatives");
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.eval_frame.data(), m.pinned_frame.data(), sizeof(math::PoseFrame),
                                   cudaMemcpyHostToDevice, m.stream));
  NDTCU_CUDA_CHECK(cudaEventRecord(m.start, m.stream));
  derivative_kernel<kSingleBlocksPerSm><<<dim3(blocks, 1), kBlock, 0, m.stream>>>(a, m.eval_frame.data());
  NDTCU_CUDA_CHECK_LAUNCH();
  reduce_kernel<<<1, kBlock, 0, m.stream>>>(a);
  NDTCU_CUDA_CHECK_LAUNCH();
  NDTCU_CUDA_CHECK(cudaEventRecord(m.stop, m.stream));
  NDTCU_NVTX_RANGE("reduce");  // the read-back and the one synchronization
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.pinned_sums.data(), m.sums.data(), sizeof(Vec<kSums>), cudaMemcpyDeviceToHost,
                                   m.stream));
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the one synchronization per evaluation
  float ms = 0.f;
  NDTCU_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
  for (int k = 0; k < kSums; ++k) out.v[k] = m.pinned_sums.data()->v[k];

  m.telemetry.evaluations += 1;
  m.telemetry.bytes_up += sizeof(math::PoseFrame);
  m.telemetry.bytes_down += sizeof(Vec<kSums>);
  m.telemetry.gpu_ms += ms;
  m.telemetry.device_allocations = device_allocation_count() - m.allocations_at_start;
  return out;
}

std::vector<math::DerivativeSums> CudaBackend::evaluate_batch(const std::vector<Pose6>& poses, bool with_hessian,
                                                              int source) {
  Impl& m = *impl_;
  if (source < 0 || static_cast<std::size_t>(source) >= m.sources.size()) {
    throw Error("CUDA backend: evaluate of source " + std::to_string(source) + " of " + std::to_string(m.sources.size()));
  }
  if (m.config_dirty) m.upload_config();
  const std::size_t k = poses.size();
  std::vector<math::DerivativeSums> out(k);
  for (auto& s : out) s.clear();
  if (k == 0 || m.sources[static_cast<std::size_t>(source)].n == 0) return out;
  if (k > 65535) throw Error("CUDA backend: " + std::to_string(k) + " poses in one evaluation batch (at most 65535)");
  m.size_for(k, false, 1);
  m.pinned_hyps.reserve_with_headroom(k);
  m.pinned_sums.reserve_with_headroom(k);
  m.pinned_active.reserve_with_headroom(k + 1);
  m.eval_source = -1;  // hyps[0] and the running list are this batch's now
  for (std::size_t i = 0; i < k; ++i) {
    const double p[6] = {poses[i](0), poses[i](1), poses[i](2), poses[i](3), poses[i](4), poses[i](5)};
    DeviceHyp& h = m.pinned_hyps.data()[i];
    h = DeviceHyp{};
    h.frame = math::pose_frame(p, with_hessian);
    h.source = source;
  }
  const BatchArgs a = m.args(false);
  const int blocks = m.sources[static_cast<std::size_t>(source)].blocks;
  NDTCU_NVTX_RANGE("derivatives");
  m.upload_hypotheses(k);
  NDTCU_CUDA_CHECK(cudaEventRecord(m.start, m.stream));
  const dim3 grid(blocks, static_cast<unsigned>(k));
  if (k > 1) {
    derivative_kernel<kBatchBlocksPerSm><<<grid, kBlock, 0, m.stream>>>(a, nullptr);
  } else {
    derivative_kernel<kSingleBlocksPerSm><<<grid, kBlock, 0, m.stream>>>(a, nullptr);
  }
  NDTCU_CUDA_CHECK_LAUNCH();
  reduce_kernel<<<static_cast<unsigned>(k), kBlock, 0, m.stream>>>(a);
  NDTCU_CUDA_CHECK_LAUNCH();
  NDTCU_CUDA_CHECK(cudaEventRecord(m.stop, m.stream));
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.pinned_sums.data(), m.sums.data(), k * sizeof(Vec<kSums>), cudaMemcpyDeviceToHost,
                                   m.stream));
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  float ms = 0.f;
  NDTCU_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
  for (std::size_t i = 0; i < k; ++i) {
    for (int j = 0; j < kSums; ++j) out[i].v[j] = m.pinned_sums.data()[i].v[j];
  }
  m.telemetry.evaluations += k;
  m.telemetry.bytes_up += k * (sizeof(DeviceHyp) + sizeof(int)) + sizeof(int);
  m.telemetry.bytes_down += k * sizeof(Vec<kSums>);
  m.telemetry.gpu_ms += ms;
  m.telemetry.device_allocations = device_allocation_count() - m.allocations_at_start;
  return out;
}

bool CudaBackend::device_loop_supported() const noexcept {
  return impl_->loop_launch == LoopLaunch::Stream || impl_->driver_version >= 12040 ||
         (impl_->loop_launch == LoopLaunch::Auto && impl_->cooperative_blocks > 0);
}

std::vector<DeviceLoopOutput> CudaBackend::run_fixed_step(const std::vector<DeviceHypothesis>& hypotheses,
                                                          const math::StepRules& rules, bool keep_trace) {
  Impl& m = *impl_;
  if (!device_loop_supported()) throw CudaError("the device-resident Newton loop needs a CUDA 12.4 driver or later");
  if (rules.max_iterations < 1) throw Error("device loop: max_iterations must be at least 1");
  if (m.config_dirty) m.upload_config();
  const std::size_t k = hypotheses.size();
  std::vector<DeviceLoopOutput> out(k);
  if (k == 0) return out;
  for (const DeviceHypothesis& h : hypotheses) {
    if (h.source < 0 || static_cast<std::size_t>(h.source) >= m.sources.size() ||
        m.sources[static_cast<std::size_t>(h.source)].n == 0) {
      throw Error("device loop: hypothesis of source " + std::to_string(h.source) + ", which has no points");
    }
  }
  const auto iterations = static_cast<std::size_t>(rules.max_iterations);
  m.size_for(k, keep_trace, rules.max_iterations);
  m.pinned_hyps.reserve_with_headroom(k);
  m.pinned_sums.reserve_with_headroom(k);
  m.pinned_active.reserve_with_headroom(k + 1);
  if (keep_trace) m.pinned_trace.reserve_with_headroom(k * iterations);
  // A batch of one whose blocks are all resident at once runs in the cooperative kernel.
  const int single_blocks = m.sources[static_cast<std::size_t>(hypotheses[0].source)].blocks;
  const bool cooperative = m.loop_launch == LoopLaunch::Auto && k == 1 && single_blocks <= m.cooperative_blocks;
  const bool in_graph = !cooperative && m.loop_launch != LoopLaunch::Stream;
  if (in_graph && m.driver_version < 12040) {
    throw CudaError("the device-resident Newton loop of a batch needs a CUDA 12.4 driver or later");
  }
  LoopGraph* graph = in_graph ? &m.loop_graph(static_cast<int>(k), keep_trace) : nullptr;
  *m.pinned_rules.data() = rules;
  m.eval_source = -1;  // hyps[0] and the running list are the batch's now

  for (std::size_t i = 0; i < k; ++i) {
    const double p[6] = {hypotheses[i].start(0), hypotheses[i].start(1), hypotheses[i].start(2),
                         hypotheses[i].start(3), hypotheses[i].start(4), hypotheses[i].start(5)};
    DeviceHyp& h = m.pinned_hyps.data()[i];
    h.state = math::start_state(p);
    h.frame = math::pose_frame(p, true);
    h.source = hypotheses[i].source;
    for (int j = 0; j < 6; ++j) h.prior_center[j] = hypotheses[i].prior_center(j);
  }

  NDTCU_NVTX_RANGE("device loop");
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.rules.data(), m.pinned_rules.data(), sizeof(math::StepRules),
                                   cudaMemcpyHostToDevice, m.stream));
  m.upload_hypotheses(k);
  NDTCU_CUDA_CHECK(cudaEventRecord(m.start, m.stream));
  if (cooperative) {
    BatchArgs a = m.args(keep_trace);
    void* params[] = {&a};
    NDTCU_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(cooperative_loop_kernel),
                                                 dim3(single_blocks), dim3(kBlock), params, 0, m.stream));
    m.telemetry.cooperative_loops += 1;
  } else if (in_graph) {
    NDTCU_CUDA_CHECK(cudaGraphLaunch(graph->exec, m.stream));
  } else {
    // A hypothesis evaluates at most max_iterations + 1 times (fixed_step), so that many
    // passes of the body run every loop to its end.
    const BatchArgs a = m.args(keep_trace);
    const int slots = Impl::loop_slots(static_cast<int>(k)), blocks = m.loop_blocks();
    for (int pass = 0; pass <= rules.max_iterations; ++pass) {
      NDTCU_CUDA_CHECK(Impl::launch_loop_body(m.stream, a, blocks, slots, 0, false));
    }
  }
  NDTCU_CUDA_CHECK(cudaEventRecord(m.stop, m.stream));
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.pinned_hyps.data(), m.hyps.data(), k * sizeof(DeviceHyp), cudaMemcpyDeviceToHost,
                                   m.stream));
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.pinned_sums.data(), m.sums.data(), k * sizeof(Vec<kSums>), cudaMemcpyDeviceToHost,
                                   m.stream));
  if (keep_trace) {
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.pinned_trace.data(), m.trace.data(), k * iterations * sizeof(math::StepTrace),
                                     cudaMemcpyDeviceToHost, m.stream));
  }
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.pinned_active.data() + k, m.active_count.data(), sizeof(int),
                                   cudaMemcpyDeviceToHost, m.stream));
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  float ms = 0.f;
  NDTCU_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
  if (const int running = m.pinned_active.data()[k]; running != 0) {
    throw CudaError("device loop: " + std::to_string(running) + " of " + std::to_string(k) +
                    " hypotheses still running after the loop ended (max_iterations " +
                    std::to_string(rules.max_iterations) + ")");
  }

  std::uint64_t evaluations = 0;
  for (std::size_t i = 0; i < k; ++i) {
    const math::StepState& st = m.pinned_hyps.data()[i].state;
    DeviceLoopOutput& o = out[i];
    for (int j = 0; j < 6; ++j) o.pose(j) = st.pose[j];
    o.iterations = st.iterations;
    o.evaluations = st.evaluations;
    o.reason = to_stop_reason(st.reason);
    for (int j = 0; j < kSums; ++j) o.final_sums.v[j] = m.pinned_sums.data()[i].v[j];
    if (keep_trace) o.trace = to_trace(m.pinned_trace.data() + i * iterations, std::min(st.iterations, rules.max_iterations));
    evaluations += static_cast<std::uint64_t>(st.evaluations);
  }
  m.telemetry.evaluations += evaluations;
  m.telemetry.bytes_up += k * (sizeof(DeviceHyp) + sizeof(int)) + sizeof(int) + sizeof(math::StepRules);
  m.telemetry.bytes_down += k * (sizeof(DeviceHyp) + sizeof(Vec<kSums>)) + (keep_trace ? k * iterations * sizeof(math::StepTrace) : 0);
  m.telemetry.gpu_ms += ms;
  m.telemetry.device_allocations = device_allocation_count() - m.allocations_at_start;
  return out;
}

VoxelLookup CudaBackend::lookup() const noexcept {
  return impl_->tiled ? impl_->tiled_version.lookup : impl_->map.lookup;
}
const CudaTelemetry& CudaBackend::telemetry() const noexcept { return impl_->telemetry; }
void CudaBackend::reset_telemetry() noexcept { impl_->telemetry = CudaTelemetry{}; impl_->allocations_at_start = device_allocation_count(); }

}  // namespace ndtcu::detail
