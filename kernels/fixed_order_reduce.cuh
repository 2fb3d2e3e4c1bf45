#pragma once
// Deterministic reduction of fixed-length double vectors: a hypothesis's per-block
// partial sums (score, gradient, upper Hessian, NVTL and counts) into its sums, by one
// block in an order fixed by the number of partials alone, not by scheduling: the same
// input gives the same bits, which atomicAdd on doubles cannot promise. The derivative
// kernel writes the partials (one per block, block_partial in ndt_loop_kernels.cu); the
// step kernel, the cooperative loop and the host-driven evaluations' reduce kernel sum
// them here.

namespace ndtcu::detail {

/// A fixed-length vector of doubles.
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

/// Hypothesis sums from its `blocks` partials, by a whole block of 256 threads in a fixed
/// order: thread t adds component t % 32 of partials t / 32, t / 32 + 8, ... in order (a
/// warp reads whole partials, and every load is independent of the others), then thread c
/// adds the 8 groups of component c in a fixed tree. The order depends on the block count
/// alone. part(b, c) gives component c of partial b (a load, or a partial made on the fly
/// from finer sums). Every thread of the block calls it; `out` is written by threads 0 to
/// K - 1.
template <int K, typename Part>
__device__ void reduce_partials(int blocks, double* out, Part&& part) {
  static_assert(K <= 32, "one component per lane, 8 groups of 32 lanes (256 threads)");
  constexpr int kGroups = 8;
  __shared__ double group[kGroups][32];
  const int c = threadIdx.x % 32, g = threadIdx.x / 32;
  double s = 0.0;
  if (c < K) {
    // Four partials' loads are issued before their additions (which keep their order), so a
    // thread waits on memory once per four partials rather than once per partial: a
    // batch of one waits on this sum between its evaluation and its step.
    constexpr int kAhead = 4;
    for (int b = g; b < blocks; b += kAhead * kGroups) {
      double p[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j) p[j] = b + j * kGroups < blocks ? part(b + j * kGroups, c) : 0.0;
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        if (b + j * kGroups < blocks) s += p[j];
      }
    }
  }
  group[g][c] = s;
  __syncthreads();
  if (threadIdx.x < K) {
    const double* v = &group[0][threadIdx.x];
    out[threadIdx.x] = ((v[0] + v[32]) + (v[64] + v[96])) + ((v[128] + v[160]) + (v[192] + v[224]));
  }
  __syncthreads();
}

/// The same over `blocks` partials in memory.
template <int K>
__device__ void reduce_partials(const Vec<K>* partials, int blocks, double* out) {
  reduce_partials<K>(blocks, out, [partials](int b, int c) { return partials[b].v[c]; });
}

}  // namespace ndtcu::detail
