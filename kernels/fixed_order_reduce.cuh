#pragma once
// Deterministic reduction of a fixed-length double vector over a grid, in one launch.
//
// Every thread contributes a Vec<K> (for NDT: score, gradient, upper Hessian, counts).
// Each block reduces its threads' vectors with cub::BlockReduce (a fixed tree for a given
// block size) and stores one partial per block; the last block to finish (found with an
// atomic ticket after a fence) sums the partials in a fixed order (per component, a warp:
// strided lanes, then a shuffle tree) and writes the result. The order of every addition is therefore fixed by the launch shape alone,
// not by scheduling: the same input gives the same bits, which atomicAdd on doubles
// cannot promise. Doing the final pass in the last block instead of a second kernel saves
// a launch per Newton iteration.
#include <cub/block/block_reduce.cuh>

namespace ndtcu::detail {

/// A fixed-length vector of doubles that CUB can reduce.
template <int K>
struct Vec {
  double v[K];

  __host__ __device__ static Vec zero() {
    Vec z;
#pragma unroll
    for (int i = 0; i < K; ++i) z.v[i] = 0.0;
    return z;
  }
  __host__ __device__ Vec operator+(const Vec& o) const {
    Vec r;
#pragma unroll
    for (int i = 0; i < K; ++i) r.v[i] = v[i] + o.v[i];
    return r;
  }
};

/// Scratch owned by the caller (sized once): one partial per block and a ticket counter
/// that must be zero before the launch (the last block resets it for the next launch).
template <int K>
struct ReduceScratch {
  Vec<K>* partials;   ///< [gridDim.x]
  unsigned* ticket;   ///< one counter, zero between launches
  Vec<K>* result;     ///< one vector: the grid's sum
};

/// Called by every thread of the grid exactly once, with its contribution. BLOCK must be
/// the launch's blockDim.x.
template <int K, int BLOCK>
__device__ void reduce_grid_fixed_order(const Vec<K>& mine, ReduceScratch<K> scratch) {
  static_assert(BLOCK % 32 == 0, "whole warps");
  using BlockReduce = cub::BlockReduce<Vec<K>, BLOCK, cub::BLOCK_REDUCE_WARP_REDUCTIONS>;
  __shared__ typename BlockReduce::TempStorage storage;
  __shared__ bool is_last;
  Vec<K> block_sum = BlockReduce(storage).Sum(mine);
  if (threadIdx.x == 0) {
    scratch.partials[blockIdx.x] = block_sum;
    __threadfence();  // the partial is visible to the grid before the ticket is taken
    unsigned done = atomicAdd(scratch.ticket, 1u);
    is_last = (done == gridDim.x - 1);
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // see every other block's partial
  // Component i is summed by one warp: lane l adds blocks l, l + 32, l + 64, ... in order,
  // then a fixed shuffle tree adds the 32 lanes. The order depends on gridDim.x only, and
  // the dependent chain is gridDim.x / 32 long instead of gridDim.x.
  constexpr int kWarps = BLOCK / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = warp; i < K; i += kWarps) {
    double s = 0.0;
    for (unsigned b = lane; b < gridDim.x; b += 32) s += static_cast<volatile double*>(scratch.partials[b].v)[i];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_down_sync(0xffffffffu, s, offset);
    if (lane == 0) scratch.result->v[i] = s;
  }
  if (threadIdx.x == 0) *scratch.ticket = 0u;
}

}  // namespace ndtcu::detail
