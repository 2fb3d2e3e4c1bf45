#pragma once
// The CUDA NDT loop's kernels and their launchers (ndt_loop_kernels.cu): the derivative
// kernel over every running hypothesis of a batch, the fixed-order reduction per
// hypothesis, the step kernel that takes the fixed step of kernels/ndt_step.hpp on the
// device, and the cooperative kernel that runs a batch of one's whole loop in one launch.
// What they read is handed over in the trivially copyable structs below; the host objects
// that own the memory live in src/cuda/ (cuda_backend.hpp, device_voxel_map.hpp,
// loop_graph.hpp). Why the loop has this shape: BENCHMARK.md, "Designs measured and
// rejected".
#include "fixed_order_reduce.cuh"
#include "ndt_point.hpp"
#include "ndt_step.hpp"

#include <cuda_runtime.h>

namespace ndtcu::detail {

/// Components of a hypothesis's sums (score, gradient, Hessian, NVTL and counts).
constexpr int kSums = math::kSumSize;
/// Threads per source point at most (single_shape).
constexpr int kMaxLanes = 8;
/// Threads per block of every loop kernel: the 31-double per-thread sums stay in
/// registers within the 255-register limit.
constexpr int kLoopBlock = 256;

/// Source points per group: the first step of a hypothesis's reduction sums each group of
/// 32 consecutive points in a fixed order, then each run of 8 groups (a block of one-lane
/// points, kLoopBlock) in a fixed tree, into one partial (see block_partial).
constexpr int kPointGroup = 32;

/// How the derivative kernel spreads a source over threads: threads per point (1 to
/// kMaxLanes, a power of two) and the blocks that takes.
struct LaunchShape {
  int lanes;
  int blocks;
};

/// A source of the batch: where its points start in the concatenated buffers, how many,
/// its groups of kPointGroup points, its blocks at one thread per point (a batch's launch,
/// and the number of its partials), and the single alignment's launch shape (up to
/// kMaxLanes threads per point: its latency wants many). A point's sums, and the order they
/// are added in, do not depend on the threads per point, so neither does any result.
struct DeviceSource {
  int offset;
  int n;
  int groups;
  int blocks;
  LaunchShape single;
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
  Vec<kSums>* partials;         ///< [max(K, 2)][max_blocks] one partial sum per block of one-lane points
  Vec<kSums>* group_partials;   ///< [2][max_groups] a batch of one's group sums, when its points have several lanes
  Vec<kSums>* sums;             ///< [K] each hypothesis's sums at its current pose
  math::StepTrace* trace;       ///< [K][max_iterations], or null
  unsigned* ticket;             ///< the step kernel's last-block counter (zero between launches)
  int max_blocks;               ///< partials per hypothesis
  int max_groups;               ///< group sums in each half of group_partials (the cooperative loop alternates)
  const math::StepRules* rules; ///< the batch's rules (uploaded per batch: graphs do not depend on them)
};

/// What a host-driven evaluation hands the derivative and reduction kernels in place of
/// the device loop's hypotheses: the pose frame of each pose (pose h at frames[h], grid
/// row h) and the source every pose evaluates. With `frames` null the kernels evaluate the
/// loop's running hypotheses (DeviceHyp::frame, DeviceHyp::source, the running list).
struct EvaluationArgs {
  const math::PoseFrame* frames;
  int source;
};

/// The single alignment's launch shape for a source of n points on a device of
/// `multiprocessors` SMs (see the definition for the measurements).
LaunchShape single_shape(int n, int multiprocessors);

/// The derivative kernel over `grid` (blocks of a hypothesis x rows): block (b, row)
/// evaluates block b of hypothesis active[row] at its pose frame, or, for an evaluation
/// (`e.frames` not null), block b of source e.source at pose frame e.frames[row]. A grid of
/// one row runs the single alignment's instance and launch shape (DeviceSource::single),
/// more rows the batch's (one thread per point); a point's sums are the same bits in both.
void launch_derivatives(const BatchArgs& a, dim3 grid, EvaluationArgs e, cudaStream_t stream);
/// The host-driven evaluations' reduction: pose h < `poses` of evaluation `e` sums its
/// partials into sums[h], in a fixed order. Launchers that return nothing leave their
/// error to cudaGetLastError (the caller's NDTCU_CUDA_CHECK_LAUNCH).
void launch_reduce(const BatchArgs& a, EvaluationArgs e, int poses, cudaStream_t stream);
/// One pass of the device loop's body on `stream`: the derivative kernel over `blocks` x
/// `slots`, then the step kernel. Returns the launches' error (captured launches report
/// theirs at the capture's end). `in_graph`: the step kernel ends the loop through
/// `handle`, the graph's conditional.
cudaError_t launch_loop_body(const BatchArgs& a, int blocks, int slots, cudaGraphConditionalHandle handle,
                             bool in_graph, cudaStream_t stream);
/// The whole loop of a batch of one (hypothesis 0, `blocks` blocks all resident at once)
/// in one cooperative launch; returns the launch's error.
cudaError_t launch_cooperative_loop(BatchArgs a, int blocks, cudaStream_t stream);
/// Blocks of the cooperative loop kernel one SM holds at once, into `blocks`.
cudaError_t cooperative_loop_blocks_per_sm(int& blocks);

}  // namespace ndtcu::detail
