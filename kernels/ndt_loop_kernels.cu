// The CUDA NDT loop's kernels and their thin launchers (ndt_loop_kernels.cuh): one
// derivative kernel per Newton evaluation for every running hypothesis of a batch, a
// fixed-order reduction per hypothesis, and the fixed-step update of kernels/ndt_step.hpp
// run on the device.
//
// Shape of the device loop, and why. A hypothesis's evaluation is spread over many
// blocks (256 threads; one thread per point in a batch, up to 8 in a single alignment:
// single_shape), and the loop is one
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

#include <algorithm>
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
// four-block instance and a batch of one the unbounded one; both make the same pair terms
// and add them in the same order, so their bits are the same (the batch tests compare
// them bit for bit, for every count of lanes).
// Before the factored form and the shared-memory reduction: 140 registers unbounded, 64
// at four blocks with 372 bytes spilled; before float terms: 212-220 registers.
constexpr int kSingleBlocksPerSm = 1;
constexpr int kBatchBlocksPerSm = 4;
/// Blocks of a batch's step kernel per SM (step_kernel): three, as its 76 registers gave
/// before the step kept its system in registers.
constexpr int kBatchStepBlocksPerSm = 3;

/// The shared memory of block_partial's reduction: every point's sums (float, as its first
/// lane holds them), each component's group of 32 points in a row padded to 33 floats so
/// that neither the writes nor the column sums meet a bank twice, then each group's sums
/// in double: 34.7 KB (35 KB a block with the rest; with four blocks per SM, 140 of an
/// H200 SM's 228 KB).
struct BlockSums {
  Real lanes[kSums][kWarpsPerBlock][33];
  double groups[kWarpsPerBlock][kSums];
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

/// The per-point accumulation of a point shared by `lanes` > 1 consecutive threads of a
/// warp (every thread of the warp calls it; `valid`: this thread's point exists): the same
/// sums as one thread's (math::accumulate_point_cells), bit for bit. Lane l finds the
/// voxels of table cells l, l + lanes, ... (walk_neighbours) and makes their pair terms
/// (math::pair_sum_terms); then, round j by round j, all the point's lanes add the terms
/// of cells j * lanes + l in lane order (math::add_pair_terms after shuffles), which is
/// table order: the order one thread adds them in. Lane 0 then takes the point's
/// derivatives into `own`. Returns the point's pairs and sets `best` to its best score
/// term (both over all its lanes).
__device__ int accumulate_point_lanes(const DeviceConfig& c, const BlockMap& map, const math::PoseTerms<Real>& pt,
                                      bool valid, float x, float y, float z, const float* tp, bool with_hessian,
                                      int lane, int lanes, Real* own, Real& best) {
  constexpr unsigned kAll = 0xffffffffu;
  constexpr int kMaxFound = (math::kMaxNeighbours + 1) / 2;  // cells of a lane, with two lanes or more
  std::int32_t found[kMaxFound];
  unsigned hits = 0;  // bit j: this lane's cell of round j holds a voxel (found in order)
  int pairs = 0;
  if (valid) {
    math::walk_neighbours(map.grid, c.search, map.cells, tp, lane, lanes, [&](std::int32_t v, int m) {
      found[pairs++] = v;
      hits |= 1u << (m / lanes);
    });
  }
  // Each lane's pair terms first, in a loop of their own like one thread's (so a lane waits
  // for its own voxels' loads only), kept for the rounds below.
  math::PointPairSums<Real> terms[kMaxFound];
  unsigned used = 0;  // bit k: found[k]'s pair passed the guard
  for (int k = 0; k < pairs; ++k) {
    Real q[3], icov[6];
    math::voxel_pair(map.grid, found[k], tp, q, icov);
    if (math::pair_sum_terms(q, icov, pt.d1, pt.d2, with_hessian, terms[k])) {
      used |= 1u << k;
      if (terms[k].score > best) best = terms[k].score;
    }
  }
  math::PointPairSums<Real> ps = math::zero_pair_sums<Real>();
  const int first = static_cast<int>(threadIdx.x % 32) - lane;
  const int rounds = (map.cells.cells + lanes - 1) / lanes;
  // Lane r of every point of the warp: the lanes r, r + lanes, ... .
  unsigned every = 0;
  for (int l = 0; l < 32; l += lanes) every |= 1u << l;
  int next = 0;
  for (int j = 0; j < rounds; ++j) {
    const bool hit = (hits >> j) & 1u;
    const unsigned round_hits = __ballot_sync(kAll, hit);
    if (round_hits == 0) continue;  // no lane of the warp has a voxel this round
    math::PointPairSums<Real> t = math::zero_pair_sums<Real>();
    int use = 0;
    if (hit) {
      t = terms[next];
      use = (used >> next) & 1u;
      ++next;
    }
    for (int r = 0; r < lanes; ++r) {
      if ((round_hits & (every << r)) == 0) continue;  // no point's lane r has one
      const int from = first + r;
      math::PointPairSums<Real> tr;
      const int use_r = __shfl_sync(kAll, use, from);
      tr.score = __shfl_sync(kAll, t.score, from);
      for (int a = 0; a < 3; ++a) tr.u[a] = __shfl_sync(kAll, t.u[a], from);
      if (with_hessian) {
        for (int e = 0; e < 6; ++e) tr.m[e] = __shfl_sync(kAll, t.m[e], from);
      }
      if (use_r) math::add_pair_terms(tr, with_hessian, ps);
    }
  }
  for (int offset = lanes / 2; offset > 0; offset >>= 1) {
    best = fmax(best, __shfl_xor_sync(kAll, best, offset));
    pairs += __shfl_xor_sync(kAll, pairs, offset);
  }
  if (valid && lane == 0 && pairs > 0) math::add_point_pair_sums(pt, x, y, z, ps, with_hessian, own);
  return pairs;
}

/// The fixed tree in which a block's 8 groups of one-lane points, and a batch of one's
/// groups when its points had several lanes (hypothesis_sums), are added into a partial.
__device__ double group_tree(const double* w) {
  return ((w[0] + w[1]) + (w[2] + w[3])) + ((w[4] + w[5]) + (w[6] + w[7]));
}

/// Block `b` of a source's evaluation at `terms` in the single alignment's launch shape
/// (SINGLE) or the batch's: its lanes per point (one: math::accumulate_point_cells; more:
/// accumulate_point_lanes, the same bits), each point's sums in Real on its first lane,
/// then reduced in double through shared memory in an order fixed by the points alone:
/// the points' sums are stored by group of kPointGroup points, thread (k, g) adds component
/// k of group g's 32 points (four interleaved sums in point order, then those four in a
/// fixed tree), and then
///  - one lane per point (a block of 8 whole groups): thread k adds the 8 groups in a fixed
///    tree (group_tree) into the block's partial, `out`[b];
///  - more lanes: each group's sum goes to `groups_out`, and hypothesis_sums adds each run
///    of 8 groups in the same tree.
/// So a hypothesis's sums are the same bits in either launch shape.
///
/// Against a shuffle tree per component (31 x 5 double shuffles and additions in every
/// thread, about six times the instructions), the shared-memory reduction took 22% less
/// GPU time per hypothesis-iteration in batches of 1024 (KITTI 5k 1.52 -> 1.19 us) and 89
/// registers instead of 140 unbounded, measured on an H200 (BENCHMARK.md, "The derivative
/// kernel's arithmetic").
template <bool SINGLE>
__device__ void block_partial(const DeviceConfig& c, const BlockMap& map, const DeviceSource& src,
                              const math::PoseTerms<Real>& terms, bool with_hessian, int b, BlockSums& shared,
                              Vec<kSums>* out, Vec<kSums>* groups_out) {
  const int lanes = SINGLE ? src.single.lanes : 1;  // a batch runs one thread per point
  const int t = b * kBlock + threadIdx.x;
  const int i = t / lanes, lane = t % lanes;
  const bool valid = i < src.n;
  Real own[kSums];
#pragma unroll
  for (int k = 0; k < kSums; ++k) own[k] = 0;
  Real best = 0;
  int pairs = 0;
  float x = 0.f, y = 0.f, z = 0.f;
  float tp[3] = {0.f, 0.f, 0.f};
  if (valid) {
    x = c.x[src.offset + i];
    y = c.y[src.offset + i];
    z = c.z[src.offset + i];
    math::transform_point(terms.m, x, y, z, tp);
  }
  if (lanes == 1) {
    if (valid) {
      pairs = math::accumulate_point_cells(map.grid, c.search, map.cells, terms, x, y, z, tp, with_hessian, own, best);
    }
  } else {
    pairs = accumulate_point_lanes(c, map, terms, valid, x, y, z, tp, with_hessian, lane, lanes, own, best);
  }
  if (valid && lane == 0 && pairs > 0) math::add_point_terms(best, pairs, own);
  // Point p of the block (its first lane) stores its sums as point p % 32 of group p / 32.
  if (lane == 0) {
    const int p = threadIdx.x / lanes;
#pragma unroll
    for (int k = 0; k < kSums; ++k) shared.lanes[k][p / kPointGroup][p % kPointGroup] = own[k];
  }
  __syncthreads();
  static_assert(kPointGroup == 32 && kBlock / kPointGroup == kWarpsPerBlock, "a group is a warp of one-lane points");
  static_assert(kSums * kWarpsPerBlock <= kBlock, "one thread per component and group");
  static_assert(kWarpsPerBlock == 8, "group_tree adds 8 groups");
  const int groups = kWarpsPerBlock / lanes;  // groups of this block
  if (threadIdx.x < kSums * groups) {
    const int k = threadIdx.x / groups, g = threadIdx.x % groups;
    const Real* v = shared.lanes[k][g];
    double s[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
    for (int l = 0; l < kPointGroup; l += 4) {
#pragma unroll
      for (int j = 0; j < 4; ++j) s[j] += static_cast<double>(v[l + j]);
    }
    const double sum = (s[0] + s[1]) + (s[2] + s[3]);
    if (lanes == 1) {
      shared.groups[g][k] = sum;
    } else if (const int group = b * groups + g; group < src.groups) {
      groups_out[group].v[k] = sum;
    }
  }
  if (lanes == 1) {
    __syncthreads();
    if (threadIdx.x < kSums) {
      const int k = threadIdx.x;
      double w[kWarpsPerBlock];
#pragma unroll
      for (int g = 0; g < kWarpsPerBlock; ++g) w[g] = shared.groups[g][k];
      out[b].v[k] = group_tree(w);
    }
  }
}

/// The source hypothesis h aligns (two dependent loads from global memory).
__device__ DeviceSource hypothesis_source(const BatchArgs& a, int h) { return a.cfg->sources[a.hyps[h].source]; }

/// What a block keeps in shared memory while it evaluates: the pose terms of the frame it
/// evaluates at and whether it takes the Hessian, the reduction's sums, the map.
struct BlockShared {
  math::PoseTerms<Real> terms;
  unsigned flags;
  BlockSums sums;
  BlockMap map;
};

/// The pose terms of frame `f` into `s` (one thread).
__device__ void set_pose_terms(const math::PoseFrame& f, Real d1, Real d2, BlockShared& s) {
  math::pose_terms(f, d1, d2, s.terms);
  s.flags = f.flags;
}

/// Block b of hypothesis h's evaluation at the pose terms in `s` (with its map loaded) in
/// the source's single-alignment launch shape (SINGLE) or its batch shape, its groups'
/// partial sums stored (every thread of the block calls it).
template <bool SINGLE>
__device__ void evaluate_terms(const BatchArgs& a, const DeviceSource& src, int h, int b, BlockShared& s) {
  block_partial<SINGLE>(*a.cfg, s.map, src, s.terms, (s.flags & math::kWithHessian) != 0, b, s.sums,
                        a.partials + static_cast<std::size_t>(h) * a.max_blocks, a.group_partials);
  __syncthreads();  // terms and sums are read before a next evaluation of this block writes them
}

/// Block b of grid row `row`'s evaluation in the source's single-alignment launch shape
/// (SINGLE) or its batch shape, its groups' partial sums stored: running hypothesis
/// active[row] at its pose frame, or for an evaluation (`e.frames` not null) pose `row` of
/// source e.source at e.frames[row]. The derivative kernel and the cooperative loop both
/// evaluate through evaluate_terms, and a point's sums do not depend on the shape, so
/// their partials, and bits, are the same.
template <bool SINGLE>
__device__ void evaluate_block(const BatchArgs& a, const EvaluationArgs& e, int row, int b) {
  const bool evaluation = e.frames != nullptr;
  const int h = evaluation ? row : a.active[row];
  const DeviceConfig& c = *a.cfg;
  const DeviceSource src = evaluation ? c.sources[e.source] : hypothesis_source(a, h);
  if (b >= (SINGLE ? src.single.blocks : src.blocks)) return;
  __shared__ BlockShared s;
  if (threadIdx.x == 0) {
    set_pose_terms(evaluation ? e.frames[h] : a.hyps[h].frame, static_cast<Real>(c.d1), static_cast<Real>(c.d2), s);
  }
  load_block_map(c, s.map);
  __syncthreads();
  evaluate_terms<SINGLE>(a, src, h, b, s);
}

/// The derivative kernel: block (b, row) evaluates block b of grid row `row`
/// (evaluate_block), in the single alignment's launch shape for the single alignment's
/// instance and in the batch's otherwise.
template <int BLOCKS_PER_SM>
__global__ void __launch_bounds__(kBlock, BLOCKS_PER_SM) derivative_kernel(BatchArgs a, EvaluationArgs e) {
  if (e.frames == nullptr && static_cast<int>(blockIdx.y) >= *a.active_count) return;
  evaluate_block<BLOCKS_PER_SM == kSingleBlocksPerSm>(a, e, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x));
}

/// Hypothesis h's sums, into `out` (every thread of the block calls it): reduce_partials
/// of its partials, in an order fixed by its source `src`'s count of one-lane blocks; for a
/// batch of one (`single`) whose points had several lanes, the same reduction of the
/// partials its group sums make (each group_tree of 8 groups: reduce_partials' `Part`), so
/// the same additions in the same order. The source is the caller's: the cooperative loop
/// reads it once, where each iteration's sum began with the loads of hypothesis_source.
__device__ void hypothesis_sums(const BatchArgs& a, int h, const DeviceSource& src, bool single, double* out) {
  if (single && src.single.lanes > 1) {
    const Vec<kSums>* groups = a.group_partials;
    const int count = src.groups;
    reduce_partials<kSums>(src.blocks, out, [groups, count](int s, int k) {
      double w[kWarpsPerBlock];
#pragma unroll
      for (int j = 0; j < kWarpsPerBlock; ++j) {
        const int g = s * kWarpsPerBlock + j;  // a group past the source's adds 0, as absent points do
        w[j] = g < count ? groups[g].v[k] : 0.0;
      }
      return group_tree(w);
    });
    return;
  }
  const Vec<kSums>* partials = a.partials + static_cast<std::size_t>(h) * a.max_blocks;
  reduce_partials<kSums>(partials, src.blocks, out);
}

/// The host-driven evaluations' reduction: block h sums pose h's partials into sums[h]
/// (`single`: a batch of one, evaluated in the single alignment's shape).
__global__ void __launch_bounds__(kBlock) reduce_kernel(BatchArgs a, EvaluationArgs e, bool single) {
  const int h = blockIdx.x;
  hypothesis_sums(a, h, a.cfg->sources[e.source], single, a.sums[h].v);
}

/// Hypothesis h's fixed step under `rules` from its sums at the current pose, on its loop
/// state `state`, the pose prior (centred at `prior_center`) added to the sums first (so
/// the sums read back include it, as the host loops' do): true when it goes on, with the
/// pose frame of its next evaluation written to `frame`. `trace`: the batch's trace, or
/// null (not kept, or a copy of the step that does not record it). Warp 0 of the block
/// calls it: lane 0 takes the step, then lanes 0-11 take the trigonometric values of the
/// next frame (math::frame_trig) at once, where one thread took them one after another,
/// and lane 0 puts the frame together (math::pose_frame_from: the bits math::pose_frame
/// gives on one device thread).
__device__ bool hypothesis_step(const math::StepRules& rules, const double* prior_center, int h, double* sums,
                                math::StepState& state, math::PoseFrame& frame, math::StepTrace* trace) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x % 32);
  bool more = false;
  double pose[6];
  if (lane == 0) {
    // The sums and the state in registers while the step runs (through the pointers each
    // use was a load from memory, in a chain of dependent ones), written back after.
    double v[kSums];
#pragma unroll
    for (int k = 0; k < kSums; ++k) v[k] = sums[k];
    math::StepState s = state;
    math::add_prior(rules.prior, prior_center, s.pose, true, v);
    math::StepTrace* own = trace ? trace + static_cast<std::size_t>(h) * rules.max_iterations : nullptr;
    more = math::fixed_step(v, rules, s, own, [](const double* g, double* dp) { return math::lu_direction(g, dp); });
    state = s;
#pragma unroll
    for (int k = 0; k < kSums; ++k) sums[k] = v[k];
#pragma unroll
    for (int i = 0; i < 6; ++i) pose[i] = s.pose[i];
  }
  if (!__shfl_sync(kAll, more, 0)) return false;
#pragma unroll
  for (int i = 0; i < 6; ++i) pose[i] = __shfl_sync(kAll, pose[i], 0);
  const double value = lane < math::kFrameTrig ? math::frame_trig(pose, lane) : 0.0;
  double trig[math::kFrameTrig];
#pragma unroll
  for (int t = 0; t < math::kFrameTrig; ++t) trig[t] = __shfl_sync(kAll, value, t);
  if (lane == 0) frame = math::pose_frame_from(pose, trig, true);
  return true;
}

/// Running slot `slot`'s step: the fixed-order sum of its hypothesis's partials
/// (hypothesis_sums; `single`: a batch of one), then (warp 0) hypothesis_step, whose
/// answer goes to running[slot].
__device__ void step_slot(const BatchArgs& a, int slot, bool single) {
  const int h = a.active[slot];
  double* sums = a.sums[h].v;
  hypothesis_sums(a, h, hypothesis_source(a, h), single, sums);
  if (threadIdx.x < 32) {
    DeviceHyp& hyp = a.hyps[h];
    const bool more = hypothesis_step(*a.rules, hyp.prior_center, h, sums, hyp.state, hyp.frame, a.trace);
    if (threadIdx.x == 0) a.running[slot] = more ? 1 : 0;
  }
}

/// The step kernel: block b takes running slot b: the fixed-order sum of its
/// hypothesis's partials, then (warp 0) the shared fixed step and, when it goes on, the
/// pose frame of its next evaluation. The last block to finish compacts the running
/// slots, in slot order, and ends the loop when none is left (`in_graph`: by the graph's
/// conditional; launched on a stream, the host's fixed count of launches ends it and the
/// launches after the last hypothesis stopped find nothing running).
/// Two instances: a batch of one's, whose step on one thread is the loop's critical path,
/// keeps the step's sums, state and 6x6 system in registers (224 of them); a batch's runs a
/// block per hypothesis and wants several blocks per SM, so it takes kBatchStepBlocksPerSm
/// and lets the step spill. Measured on an H200 (BENCHMARK.md, "The step in registers").
template <int BLOCKS_PER_SM>
__global__ void __launch_bounds__(kBlock, BLOCKS_PER_SM)
    step_kernel(BatchArgs a, cudaGraphConditionalHandle loop, bool in_graph) {
  const int count = *a.active_count;
  const int slot = blockIdx.x;
  if (slot < count) step_slot(a, slot, gridDim.x == 1);  // one slot: the derivative kernel ran the single shape
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

/// The whole loop of a batch of one in one launch (LoopLaunch::Auto), one grid-wide barrier
/// per iteration: its blocks evaluate the hypothesis (evaluate_terms, block b as the
/// derivative kernel's block b) into the partials of the iteration's parity, a barrier, and
/// then every block sums those partials and takes the step itself, on its own copy of the
/// loop state in shared memory (block 0 also records the trace, and writes the state, the
/// frame and the sums back when the loop ends). The steps are the same function of the same
/// bits in every block, so every block goes on with the same frame, and they are the graph
/// kernels' sums and steps, so the same bits as the graph's. Partials are written to
/// alternate buffers: a block that is still summing iteration i's while another evaluates
/// i + 1 reads the other buffer, and none can reach i + 2 before every block passed the
/// barrier of i + 1, which follows its reading of i's. The hypothesis, its source and the
/// map are read once, before the loop.
/// Against the step on block 0 between two barriers, with the step on one thread and the
/// map read at every evaluation, the whole change took a single alignment of 30 iterations
/// from 22.3 to 16.0 us of GPU per iteration on KITTI's 5k-point scan, 19.8 to 14.1 on
/// BALM's, 23.6 to 17.8 on hdl32's (H200; BENCHMARK.md, "The step in registers").
/// Its blocks must all be resident at once (cooperative launch): the host launches it only
/// when the source's blocks fit (CudaBackend::Impl::cooperative_blocks). Its 246 registers
/// (the step's system in registers) hold it to one block per SM.
__global__ void __launch_bounds__(kBlock, kSingleBlocksPerSm) cooperative_loop_kernel(BatchArgs a) {
  cg::grid_group grid = cg::this_grid();
  // What does not change while the loop runs is read once: the hypothesis, its source, the
  // Gaussian constants, the map, the step's rules and the prior's centre (the last two in
  // shared memory: read from global memory, each was a load in the step's dependent chain).
  const int h = a.active[0];
  const DeviceConfig& c = *a.cfg;
  const DeviceSource src = hypothesis_source(a, h);
  const Real d1 = static_cast<Real>(c.d1), d2 = static_cast<Real>(c.d2);
  const bool evaluates = static_cast<int>(blockIdx.x) < src.single.blocks;
  __shared__ BlockShared block;
  __shared__ math::StepState state;
  __shared__ math::PoseFrame frame;
  __shared__ double sums[kSums];
  __shared__ math::StepRules rules;
  __shared__ double prior_center[6];
  __shared__ bool more;
  if (threadIdx.x == 0) {
    state = a.hyps[h].state;
    frame = a.hyps[h].frame;
    rules = *a.rules;
#pragma unroll
    for (int i = 0; i < 6; ++i) prior_center[i] = a.hyps[h].prior_center[i];
    more = *static_cast<volatile int*>(a.active_count) > 0;
    set_pose_terms(frame, d1, d2, block);
  }
  load_block_map(c, block.map);
  __syncthreads();
  const bool leader = blockIdx.x == 0;
  BatchArgs at = a;  // the iteration's partial buffers
  bool evaluated = false;
  for (int parity = 0; more; parity ^= 1) {
    evaluated = true;
    at.partials = a.partials + static_cast<std::size_t>(parity) * a.max_blocks;
    at.group_partials = a.group_partials + static_cast<std::size_t>(parity) * a.max_groups;
    if (evaluates) evaluate_terms<true>(at, src, h, static_cast<int>(blockIdx.x), block);
    grid.sync();
    hypothesis_sums(at, h, src, true, sums);
    if (threadIdx.x < 32) {
      const bool next = hypothesis_step(rules, prior_center, h, sums, state, frame, leader ? a.trace : nullptr);
      if (threadIdx.x == 0) {
        more = next;
        if (next) set_pose_terms(frame, d1, d2, block);
      }
    }
    __syncthreads();
  }
  if (leader && evaluated) {
    if (threadIdx.x < kSums) a.sums[h].v[threadIdx.x] = sums[threadIdx.x];
    if (threadIdx.x == 0) {
      a.hyps[h].state = state;
      a.hyps[h].frame = frame;
      a.running[0] = 0;
      *a.active_count = 0;
    }
  }
}

}  // namespace

// Threads per source point. One evaluation is bounded by the latency of the lookups (up
// to 27 dependent load chains per point), not by arithmetic. More threads per point
// shorten a point's chain of lookups and put more warps in flight, which a single
// alignment's latency wants when the scan alone does not fill the GPU; but every warp then
// covers fewer points with the same instructions (the point's transform, its derivatives,
// the reduction), which a batch's throughput pays for. A point's sums, and the order they
// are added in, are the same however many threads share it (block_partial), so each side
// takes its own:
//  - a batch: one lane per point. Measured on an H200 (ndtcu_bench --batch, K = 1024,
//    against the lanes a scan had for both before, in the same run): KITTI 5k 0.90 -> 0.72
//    us of GPU per hypothesis-iteration (2 lanes before), BALM 1.4k 0.70 -> 0.29 (4),
//    hdl32 16k 1.92 -> 1.98 (1 before too);
//  - a single alignment: 8 lanes when n * 8 fits in the threads the device holds at once
//    at one block per SM, else 4 when n * 4 does, else 1. Measured on an H200 (30
//    iterations, GPU us per iteration, each count forced): KITTI 5k 24.1 / 25.4 / 21.7 /
//    21.7 with 1 / 2 / 4 / 8 lanes, BALM 1.4k 23.7 / 25.3 / 21.5 / 19.5, hdl32 16k 23.5 /
//    25.7 with 1 / 2. Two lanes cost more than they save: their 14 rounds of shuffles
//    (accumulate_point_lanes) outweigh the halved chain of lookups.
LaunchShape single_shape(int n, int multiprocessors) {
  const long long resident = static_cast<long long>(multiprocessors) * kBlock;
  const int lanes = static_cast<long long>(n) * 8 <= resident ? 8 : static_cast<long long>(n) * 4 <= resident ? 4 : 1;
  static_assert(kMaxLanes == 8, "single_shape picks 1, 4 or 8 lanes");
  const long long threads = static_cast<long long>(n) * lanes;
  return {lanes, static_cast<int>(std::max<long long>(1, (threads + kBlock - 1) / kBlock))};
}

void launch_derivatives(const BatchArgs& a, dim3 grid, EvaluationArgs e, cudaStream_t stream) {
  if (grid.y > 1) {
    derivative_kernel<kBatchBlocksPerSm><<<grid, kBlock, 0, stream>>>(a, e);
  } else {
    derivative_kernel<kSingleBlocksPerSm><<<grid, kBlock, 0, stream>>>(a, e);
  }
}

void launch_reduce(const BatchArgs& a, EvaluationArgs e, int poses, cudaStream_t stream) {
  reduce_kernel<<<static_cast<unsigned>(poses), kBlock, 0, stream>>>(a, e, poses == 1);
}

cudaError_t launch_loop_body(const BatchArgs& a, int blocks, int slots, cudaGraphConditionalHandle handle,
                             bool in_graph, cudaStream_t stream) {
  launch_derivatives(a, dim3(blocks, slots), EvaluationArgs{nullptr, -1}, stream);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    if (slots == 1) {
      step_kernel<kSingleBlocksPerSm><<<slots, kBlock, 0, stream>>>(a, handle, in_graph);
    } else {
      step_kernel<kBatchStepBlocksPerSm><<<slots, kBlock, 0, stream>>>(a, handle, in_graph);
    }
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
