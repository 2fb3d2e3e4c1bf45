// The CUDA NDT pipeline: device-resident voxel map and source, one fused kernel per
// Newton evaluation (or a precompute pass plus the derivative kernel), a fixed-order
// reduction, 64 bytes up and 31 doubles down per evaluation.
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "fixed_order_reduce.cuh"
#include "ndt_math.hpp"

#include "../src/cuda/cuda_backend.hpp"
#include "../src/ndt/dense_voxel_index.hpp"
#include "../src/log.hpp"
#include "../src/nvtx.hpp"

#include <ndtcu/cuda_device.hpp>

#include <cmath>
#include <type_traits>
#include <limits>

namespace ndtcu::detail {
namespace {

constexpr int kSums = math::kSumSize;

/// Everything that crosses the bus per evaluation: sin/cos of roll, pitch, yaw (double,
/// for the rotation and the angular terms), the translation (float, as PCL's float
/// transform takes it) and flags. Passed as the kernel's by-value parameter.
struct PoseUpload {
  double sincos[6];    ///< cos roll, sin roll, cos pitch, sin pitch, cos yaw, sin yaw
  float translation[3];
  std::uint32_t flags;  ///< kSmallRoll | kSmallPitch | kSmallYaw | kWithHessian
};
static_assert(sizeof(PoseUpload) == 64, "the per-evaluation upload is 64 bytes");
constexpr std::uint32_t kSmallRoll = 1u, kSmallPitch = 2u, kSmallYaw = 4u, kWithHessian = 8u;

/// The pose terms of a host-driven evaluation: the kernel's by-value parameter.
struct PoseByValue {
  PoseUpload p;
  __device__ const PoseUpload& get() const { return p; }
};
/// The pose terms of the device-resident loop: written by the step kernel, read in place.
struct PoseInMemory {
  const PoseUpload* p;
  __device__ const PoseUpload& get() const { return *p; }
};

/// The upload for `pose` (x y z roll pitch yaw, map-relative): PCL's small-angle rule for
/// the angular terms (the transform keeps the true values), the translation as float.
__host__ __device__ inline PoseUpload make_upload(const double pose[6], bool with_hessian) {
  PoseUpload up{};
  for (int a = 0; a < 3; ++a) {
    const double angle = pose[3 + a];
    up.sincos[2 * a] = cos(angle);
    up.sincos[2 * a + 1] = sin(angle);
    if (fabs(angle) < 10e-5) up.flags |= (1u << a);
  }
  for (int a = 0; a < 3; ++a) up.translation[a] = static_cast<float>(pose[a]);
  if (with_hessian) up.flags |= kWithHessian;
  return up;
}

/// Per-map and per-source constants, in device memory (uploaded once, not per evaluation).
struct DeviceConfig {
  math::VoxelGridView grid;
  const float* x;
  const float* y;
  const float* z;
  int n;
  math::Search search;
  double d1, d2;
  double* jacobian;  ///< [8][n] precomputed variant: the non-constant Jacobian entries
  double* hessian;   ///< [15][n] precomputed variant: the point-Hessian entries
};

// Threads per source point (LANES, 1 to 8). One evaluation is bounded by the latency of
// the lookups (up to 27 dependent load chains per point), not by arithmetic. When the
// source is small next to the GPU, several threads share a point's cells, which shortens
// each thread's chain and puts more warps in flight; when the source alone fills the GPU,
// one thread per point avoids recomputing the point's derivatives in every lane. The
// backend picks LANES from the point count and the device (lanes_for()). LANES divides a
// warp, so a point's threads combine their best term and counts with shuffles.
constexpr int kMaxLanes = 8;
// 256 threads per block: the 31-double per-thread sums stay in registers within the
// 255-register limit (one block per SM, 8 warps).
constexpr int kBlock = 256;

/// Combines a point's lanes: the best score term (max) and the pair count (sum) over the
/// LANES consecutive lanes, then adds the point's NVTL term and match counts once, on
/// its first lane. Every lane of the warp calls it.
template <int LANES>
__device__ void finish_point(bool valid, int lane, double best, int pairs, Vec<kSums>& sums) {
  static_assert(32 % LANES == 0, "a point's threads stay within one warp");
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset >>= 1) {
    best = fmax(best, __shfl_xor_sync(0xffffffffu, best, offset));
    pairs += __shfl_xor_sync(0xffffffffu, pairs, offset);
  }
  if (valid && lane == 0 && pairs > 0) {
    sums.v[math::kNvtlSum] += best;
    sums.v[math::kCorrespondences] += static_cast<double>(pairs);
    sums.v[math::kPointsMatched] += 1.0;
  }
}

/// The per-evaluation constants, built once per block in shared memory: the float
/// transform from the uploaded sin/cos, and the angular terms with the small-angle rule.
__device__ void build_pose_terms(const PoseUpload& p, double d1, double d2, math::PoseTerms<double>& t) {
  const double cx = p.sincos[0], sx = p.sincos[1], cy = p.sincos[2], sy = p.sincos[3], cz = p.sincos[4],
               sz = p.sincos[5];
  // R = Rx(roll) Ry(pitch) Rz(yaw), rounded to float once per entry.
  const double r[9] = {cy * cz,           -cy * sz,           sy,
                       cx * sz + sx * sy * cz, cx * cz - sx * sy * sz, -sx * cy,
                       sx * sz - cx * sy * cz, sx * cz + cx * sy * sz, cx * cy};
  for (int row = 0; row < 3; ++row) {
    for (int c = 0; c < 3; ++c) t.m[4 * row + c] = static_cast<float>(r[3 * row + c]);
    t.m[4 * row + 3] = p.translation[row];
  }
  t.angular = math::angular_terms_sincos<double>((p.flags & kSmallRoll) ? 1.0 : cx, (p.flags & kSmallRoll) ? 0.0 : sx,
                                                 (p.flags & kSmallPitch) ? 1.0 : cy, (p.flags & kSmallPitch) ? 0.0 : sy,
                                                 (p.flags & kSmallYaw) ? 1.0 : cz, (p.flags & kSmallYaw) ? 0.0 : sz);
  t.d1 = d1;
  t.d2 = d2;
}

/// The body both derivative kernels share: per-block pose terms, LANES threads per point,
/// the point's share of cells, the lane combination and the grid reduction. `point`
/// yields the point's Jacobian and point Hessian (computed, or read from buffers).
template <int LANES, typename PointDerivatives>
__device__ void derivative_sums(const DeviceConfig* __restrict__ cfg, const PoseUpload& pose,
                                ReduceScratch<kSums> scratch, PointDerivatives point) {
  __shared__ math::PoseTerms<double> terms;
  const DeviceConfig c = *cfg;
  if (threadIdx.x == 0) build_pose_terms(pose, c.d1, c.d2, terms);
  __syncthreads();
  Vec<kSums> sums = Vec<kSums>::zero();
  const int t = blockIdx.x * kBlock + threadIdx.x;
  const int i = t / LANES, lane = t % LANES;
  const bool valid = i < c.n;
  const bool with_hessian = (pose.flags & kWithHessian) != 0;
  double best = 0.0;
  int pairs = 0;
  if (valid) {
    const float x = c.x[i], y = c.y[i], z = c.z[i];
    float tp[3];
    math::transform_point(terms.m, x, y, z, tp);
    math::PointJacobian<double> J{};
    math::PointHessian<double> H{};
    point(c, terms, i, x, y, z, with_hessian, J, H);
    pairs = math::accumulate_point_cells(c.grid, c.search, terms, tp, J, H, with_hessian, lane, LANES, sums.v, best);
  }
  finish_point<LANES>(valid, lane, best, pairs, sums);
  reduce_grid_fixed_order<kSums, kBlock>(sums, scratch);
}

/// Fused variant's point derivatives: computed in registers by each lane.
struct ComputedDerivatives {
  __device__ void operator()(const DeviceConfig&, const math::PoseTerms<double>& terms, int, float x, float y,
                             float z, bool with_hessian, math::PointJacobian<double>& J,
                             math::PointHessian<double>& H) const {
    J = math::point_jacobian(terms.angular, double(x), double(y), double(z));
    if (with_hessian) H = math::point_hessian(terms.angular, double(x), double(y), double(z));
  }
};

/// Precomputed variant's point derivatives: read from the buffers derivatives_kernel wrote.
struct BufferedDerivatives {
  __device__ void operator()(const DeviceConfig& c, const math::PoseTerms<double>&, int i, float, float, float,
                             bool with_hessian, math::PointJacobian<double>& J, math::PointHessian<double>& H) const {
    J.col[0][0] = J.col[1][1] = J.col[2][2] = 1.0;
    double* jslots[8] = {&J.col[3][1], &J.col[3][2], &J.col[4][0], &J.col[4][1],
                         &J.col[4][2], &J.col[5][0], &J.col[5][1], &J.col[5][2]};
#pragma unroll
    for (int k = 0; k < 8; ++k) *jslots[k] = c.jacobian[k * c.n + i];
    if (with_hessian) {
      double* hslots[15] = {&H.a[1], &H.a[2], &H.b[1], &H.b[2], &H.c[1], &H.c[2], &H.d[0], &H.d[1],
                            &H.d[2], &H.e[0], &H.e[1], &H.e[2], &H.f[0], &H.f[1], &H.f[2]};
#pragma unroll
      for (int k = 0; k < 15; ++k) *hslots[k] = c.hessian[k * c.n + i];
    }
  }
};

/// Fused variant: one kernel per evaluation.
template <int LANES, typename Pose>
__global__ void __launch_bounds__(kBlock) fused_kernel(const DeviceConfig* __restrict__ cfg, Pose pose,
                                                       ReduceScratch<kSums> scratch) {
  derivative_sums<LANES>(cfg, pose.get(), scratch, ComputedDerivatives{});
}

/// Precomputed variant, pass 1: each point's Jacobian (8 entries) and point Hessian (15)
/// into the preallocated buffers.
template <typename Pose>
__global__ void __launch_bounds__(kBlock) derivatives_kernel(const DeviceConfig* __restrict__ cfg, Pose pose_source) {
  __shared__ math::PoseTerms<double> terms;
  const DeviceConfig c = *cfg;
  const PoseUpload& pose = pose_source.get();
  if (threadIdx.x == 0) build_pose_terms(pose, c.d1, c.d2, terms);
  __syncthreads();
  const int i = blockIdx.x * kBlock + threadIdx.x;
  if (i >= c.n) return;
  const double x = c.x[i], y = c.y[i], z = c.z[i];
  const math::PointJacobian<double> J = math::point_jacobian(terms.angular, x, y, z);
  const double jv[8] = {J.col[3][1], J.col[3][2], J.col[4][0], J.col[4][1], J.col[4][2], J.col[5][0], J.col[5][1],
                        J.col[5][2]};
  for (int k = 0; k < 8; ++k) c.jacobian[k * c.n + i] = jv[k];
  if (pose.flags & kWithHessian) {
    const math::PointHessian<double> H = math::point_hessian(terms.angular, x, y, z);
    const double hv[15] = {H.a[1], H.a[2], H.b[1], H.b[2], H.c[1], H.c[2], H.d[0], H.d[1],
                           H.d[2], H.e[0], H.e[1], H.e[2], H.f[0], H.f[1], H.f[2]};
    for (int k = 0; k < 15; ++k) c.hessian[k * c.n + i] = hv[k];
  }
}

/// Precomputed variant, pass 2: the derivative sums from the buffers of pass 1.
template <int LANES, typename Pose>
__global__ void __launch_bounds__(kBlock) buffered_kernel(const DeviceConfig* __restrict__ cfg, Pose pose,
                                                          ReduceScratch<kSums> scratch) {
  derivative_sums<LANES>(cfg, pose.get(), scratch, BufferedDerivatives{});
}

math::Search to_device_search(SearchMethod m) { return to_math(m); }

/// Calls f with std::integral_constant<int, lanes> for lanes 1, 2, 4 or 8.
template <typename F>
void launch_lanes(int lanes, F&& f) {
  switch (lanes) {
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    default: f(std::integral_constant<int, 1>{}); break;
  }
}

/// Threads per point for n points: as many as keep n * lanes within the threads the
/// device holds at once (one 256-thread block per SM at this register use), a power of
/// two up to kMaxLanes. Measured on an H100 (BENCHMARK.md): 8 lanes make 1.5k points 30%
/// faster than 1, while at 20k points and more 1 lane is fastest.
int lanes_for(int n, int multiprocessors) {
  const long long resident = static_cast<long long>(multiprocessors) * kBlock;
  int lanes = 1;
  while (lanes < kMaxLanes && static_cast<long long>(n) * lanes * 2 <= resident) lanes *= 2;
  return lanes;
}

// ---- The device-resident fixed-step Newton loop (GpuNewtonLoop::Device) ----

/// StopReason as the step kernel writes it.
enum LoopReason : int { kConverged = 0, kMaxIterations = 1, kNoCorrespondence = 2, kSingularHessian = 3 };

/// One iteration of the trace: the pose after the step, the score there, the step length.
struct TraceEntry {
  double pose[6];
  double score;
  double step;
};

/// Everything the loop keeps between its kernels, in device memory. The host writes it once
/// per alignment (64 + 128 bytes up) and reads it back once at the end.
struct LoopState {
  PoseUpload up;            ///< the pose terms the next evaluation uses
  double pose[6];           ///< the current pose
  double step_min, step_max, epsilon;
  TraceEntry* trace;        ///< max_iterations entries
  int max_iterations;
  int pcl_convergence;      ///< 1: PCL's stopping rule, 0: Autoware's
  int iterations;
  int evaluations;
  int reason;               ///< LoopReason once the loop has stopped
  double last_step;         ///< the last step's length
  double last_delta[3];     ///< the last step's translation (PCL's rule)
};

/// Solves H x = b (6x6, row-major in `a`) by LU with partial pivoting, in place. False when
/// a pivot is not above 6 * machine epsilon * the largest |entry| (or is not a number): the
/// matrix is numerically singular, the case the host loop's SVD rank test reports.
__device__ bool solve6(double a[36], double b[6], double x[6]) {
  double largest = 0.0;
  for (int k = 0; k < 36; ++k) largest = fmax(largest, fabs(a[k]));
  const double tiny = 6.0 * 2.220446049250313e-16 * largest;
  for (int k = 0; k < 6; ++k) {
    int p = k;
    for (int r = k + 1; r < 6; ++r) {
      if (fabs(a[6 * r + k]) > fabs(a[6 * p + k])) p = r;
    }
    if (!(fabs(a[6 * p + k]) > tiny)) return false;
    if (p != k) {
      for (int c = 0; c < 6; ++c) {
        const double t = a[6 * k + c];
        a[6 * k + c] = a[6 * p + c];
        a[6 * p + c] = t;
      }
      const double t = b[k];
      b[k] = b[p];
      b[p] = t;
    }
    for (int r = k + 1; r < 6; ++r) {
      const double f = a[6 * r + k] / a[6 * k + k];
      for (int c = k + 1; c < 6; ++c) a[6 * r + c] -= f * a[6 * k + c];
      b[r] -= f * b[k];
    }
  }
  for (int k = 5; k >= 0; --k) {
    double s = b[k];
    for (int c = k + 1; c < 6; ++c) s -= a[6 * k + c] * x[c];
    x[k] = s / a[6 * k + k];
  }
  return true;
}

/// Records the iteration a step just completed (its evaluation's `score`) and applies the
/// stopping rules in optimize()'s order; true when the loop stops.
__device__ bool finish_iteration(LoopState& s, double score) {
  TraceEntry& e = s.trace[s.iterations - 1];
  bool finite = true;
  for (int k = 0; k < 6; ++k) {
    e.pose[k] = s.pose[k];
    finite = finite && isfinite(s.pose[k]);
  }
  e.score = score;
  e.step = fabs(s.last_step);
  if (!finite) {
    s.reason = kSingularHessian;
    return true;
  }
  bool small_step;
  if (s.pcl_convergence) {
    // PCL: the step's translation as float, its squared norm against epsilon itself.
    const float t0 = static_cast<float>(s.last_delta[0]), t1 = static_cast<float>(s.last_delta[1]),
                t2 = static_cast<float>(s.last_delta[2]);
    small_step = s.epsilon > 0 && static_cast<double>(t0 * t0 + t1 * t1 + t2 * t2) <= s.epsilon;
  } else {
    small_step = fabs(s.last_step) < s.epsilon;  // Autoware: the step length
  }
  if (small_step) {
    s.reason = kConverged;
    return true;
  }
  if (s.iterations >= s.max_iterations) {
    s.reason = kMaxIterations;
    return true;
  }
  return false;
}

/// One thread: after each evaluation, finishes the previous step, then solves the Newton
/// system, takes the clamped step and writes the next evaluation's pose terms, or ends the
/// loop (sets its condition to 0). optimize()'s fixed step, rule by rule.
__global__ void newton_step_kernel(LoopState* __restrict__ state, const Vec<kSums>* __restrict__ result,
                                   cudaGraphConditionalHandle loop) {
  LoopState& s = *state;
  const double* v = result->v;
  s.evaluations += 1;
  // After the first evaluation, every evaluation is at the pose the last step reached
  // (a zero step is finished below, without one).
  if (s.iterations > 0) {
    if (finish_iteration(s, v[math::kScore])) {
      cudaGraphSetConditional(loop, 0);
      return;
    }
  }
  for (;;) {
    if (v[math::kPointsMatched] == 0.0) {
      s.reason = kNoCorrespondence;
      cudaGraphSetConditional(loop, 0);
      return;
    }
    double h[36], g[6], x[6];
    for (int i = 0; i < 6; ++i) {
      g[i] = -v[math::kGradient + i];
      for (int j = 0; j < 6; ++j) h[6 * i + j] = v[math::kHessian + math::upper_index(i < j ? i : j, i < j ? j : i)];
    }
    if (!solve6(h, g, x)) {
      s.reason = kSingularHessian;
      cudaGraphSetConditional(loop, 0);
      return;
    }
    double norm = 0.0;
    for (int i = 0; i < 6; ++i) norm += x[i] * x[i];
    norm = sqrt(norm);
    if (norm == 0.0 || isnan(norm)) {
      s.reason = norm == 0.0 ? kConverged : kSingularHessian;
      cudaGraphSetConditional(loop, 0);
      return;
    }
    double dir[6], d_phi_0 = 0.0;
    for (int i = 0; i < 6; ++i) {
      dir[i] = x[i] / norm;
      d_phi_0 -= v[math::kGradient + i] * dir[i];
    }
    double step;
    if (d_phi_0 == 0.0) {
      step = 0.0;  // not a descent direction, and no better one: no step, no evaluation
    } else {
      if (d_phi_0 >= 0) {
        for (int i = 0; i < 6; ++i) dir[i] = -dir[i];
      }
      step = fmax(fmin(norm, s.step_max), s.step_min);
    }
    for (int i = 0; i < 6; ++i) s.pose[i] += dir[i] * step;
    for (int i = 0; i < 3; ++i) s.last_delta[i] = dir[i] * step;
    s.last_step = step;
    s.iterations += 1;
    if (step == 0.0) {
      // The host loop records this iteration with the unchanged score and solves again.
      if (finish_iteration(s, v[math::kScore])) {
        cudaGraphSetConditional(loop, 0);
        return;
      }
      continue;
    }
    s.up = make_upload(s.pose, true);
    return;  // the condition stays 1: the loop evaluates at the new pose
  }
}

StopReason to_stop_reason(int r) {
  switch (r) {
    case kConverged: return StopReason::Converged;
    case kNoCorrespondence: return StopReason::NoCorrespondence;
    case kSingularHessian: return StopReason::SingularHessian;
    default: return StopReason::MaxIterations;
  }
}

}  // namespace

std::uint64_t device_allocations() noexcept { return device_allocation_count(); }

struct CudaBackend::Impl {
  cudaStream_t stream = nullptr;
  std::uint64_t allocations_at_start = 0;
  // Map.
  DeviceBuffer<double> mean[3], icov[6];
  DeviceBuffer<float> centroid[3];
  DeviceBuffer<std::uint64_t> table_keys;
  DeviceBuffer<std::int32_t> table_values, dense;
  math::VoxelGridView grid{};
  VoxelLookup lookup = VoxelLookup::Hash;
  double resolution = 0.0;
  bool has_map = false;
  // Source.
  DeviceBuffer<float> x, y, z;
  DeviceBuffer<double> jacobian, hessian;
  std::vector<float> staging;
  int n = 0;
  int lanes = 1;            // threads per point for the current source (lanes_for)
  int multiprocessors = 1;  // of the current device
  int driver_version = 0;   // cudaDriverGetVersion: conditional graph nodes need 12040
  // Per evaluation.
  DeviceBuffer<DeviceConfig> config;
  DeviceBuffer<Vec<kSums>> partials, result;
  DeviceBuffer<unsigned> ticket;
  PinnedBuffer<Vec<kSums>> pinned_result;
  cudaEvent_t start = nullptr, stop = nullptr;
  SearchMethod search = SearchMethod::Radius;
  double outlier_ratio = 0.55;
  DerivativeVariant variant = DerivativeVariant::Fused;
  bool config_dirty = true;
  CudaTelemetry telemetry;
  // The device-resident loop: its state, trace, pinned staging and graph. The graph is
  // built for a grid of `graph_blocks` blocks (with headroom: threads past the source's
  // point count add zeros, which leave the fixed-order sums bit-identical) and the lanes and
  // variant it was captured with; a source that needs more blocks, or far fewer, rebuilds it.
  DeviceBuffer<LoopState> loop_state;
  DeviceBuffer<TraceEntry> trace;
  PinnedBuffer<LoopState> pinned_state;
  PinnedBuffer<TraceEntry> pinned_trace;
  cudaStream_t capture_stream = nullptr;  // a private stream: the caller's may be the legacy default
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;
  int graph_blocks = 0, graph_lanes = 0;
  DerivativeVariant graph_variant = DerivativeVariant::Fused;
  const void* graph_partials = nullptr;

  ~Impl() {
    destroy_graph();
    if (capture_stream) cudaStreamDestroy(capture_stream);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }

  void destroy_graph() noexcept {
    if (graph_exec) cudaGraphExecDestroy(graph_exec);
    if (graph) cudaGraphDestroy(graph);
    graph_exec = nullptr;
    graph = nullptr;
  }

  /// The derivative kernels of one evaluation at `pose` on `s`, over `blocks` blocks of
  /// LANES threads per point (the precomputed variant adds its per-point pass first).
  template <typename Pose>
  void launch_derivatives(Pose pose, int blocks, cudaStream_t s) {
    ReduceScratch<kSums> scratch{partials.data(), ticket.data(), result.data()};
    if (variant == DerivativeVariant::Fused) {
      launch_lanes(lanes, [&](auto lanes_constant) {
        fused_kernel<decltype(lanes_constant)::value><<<blocks, kBlock, 0, s>>>(config.data(), pose, scratch);
      });
      NDTCU_CUDA_CHECK_LAUNCH();
    } else {
      const int points = blocks * kBlock / lanes;  // the points the grid covers
      derivatives_kernel<<<(points + kBlock - 1) / kBlock, kBlock, 0, s>>>(config.data(), pose);
      NDTCU_CUDA_CHECK_LAUNCH();
      launch_lanes(lanes, [&](auto lanes_constant) {
        buffered_kernel<decltype(lanes_constant)::value><<<blocks, kBlock, 0, s>>>(config.data(), pose, scratch);
      });
      NDTCU_CUDA_CHECK_LAUNCH();
    }
  }

  /// Builds (or keeps) the loop graph for the current source: a conditional WHILE node whose
  /// body is the derivative kernels reading the pose terms from the loop state, then the
  /// step kernel, which ends the loop.
  void ensure_graph() {
    const int needed = static_cast<int>(std::max<std::int64_t>(1, (static_cast<std::int64_t>(n) * lanes + kBlock - 1) / kBlock));
    if (graph_exec && graph_lanes == lanes && graph_variant == variant && needed <= graph_blocks &&
        needed * 2 >= graph_blocks && graph_partials == partials.data()) {
      return;
    }
    destroy_graph();
    const int blocks = needed + needed / 4 + 1;  // headroom for scans a little larger
    if (partials.size() < static_cast<std::size_t>(blocks)) partials.resize_discard(blocks);
    if (!capture_stream) NDTCU_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking));
    NDTCU_CUDA_CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphConditionalHandle handle = 0;
    NDTCU_CUDA_CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));
    cudaGraphNodeParams params{};
    params.type = cudaGraphNodeTypeConditional;
    params.conditional.handle = handle;
    params.conditional.type = cudaGraphCondTypeWhile;
    params.conditional.size = 1;
    cudaGraphNode_t node = nullptr;
    NDTCU_CUDA_CHECK(cudaGraphAddNode(&node, graph, nullptr, nullptr, 0, &params));
    cudaGraph_t body = params.conditional.phGraph_out[0];
    NDTCU_CUDA_CHECK(
        cudaStreamBeginCaptureToGraph(capture_stream, body, nullptr, nullptr, 0, cudaStreamCaptureModeThreadLocal));
    try {
      launch_derivatives(PoseInMemory{&loop_state.data()->up}, blocks, capture_stream);
      newton_step_kernel<<<1, 1, 0, capture_stream>>>(loop_state.data(), result.data(), handle);
      NDTCU_CUDA_CHECK_LAUNCH();
    } catch (...) {
      cudaGraph_t discarded = nullptr;
      cudaStreamEndCapture(capture_stream, &discarded);
      destroy_graph();
      throw;
    }
    cudaGraph_t captured = nullptr;
    NDTCU_CUDA_CHECK(cudaStreamEndCapture(capture_stream, &captured));
    NDTCU_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
    graph_blocks = blocks;
    graph_lanes = lanes;
    graph_variant = variant;
    graph_partials = partials.data();
    telemetry.graph_builds += 1;
  }

  void upload_config() {
    if (!has_map) throw Error("CudaBackend: no map set");
    math::GaussConstants g = math::gauss_constants(resolution, outlier_ratio);
    DeviceConfig c{};
    c.grid = grid;
    c.x = x.data();
    c.y = y.data();
    c.z = z.data();
    c.n = n;
    c.search = to_device_search(search);
    c.d1 = g.d1;
    c.d2 = g.d2;
    c.jacobian = jacobian.data();
    c.hessian = hessian.data();
    config.upload(&c, 1, stream);
    telemetry.setup_bytes_up += sizeof(c);
    config_dirty = false;
  }
};

CudaBackend::CudaBackend(CUstream_st* stream) : impl_(std::make_unique<Impl>()) {
  std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw CudaError("CUDA backend unavailable: " + why);
  impl_->stream = stream;
  impl_->allocations_at_start = device_allocation_count();
  int device = 0;
  NDTCU_CUDA_CHECK(cudaGetDevice(&device));
  NDTCU_CUDA_CHECK(cudaDeviceGetAttribute(&impl_->multiprocessors, cudaDevAttrMultiProcessorCount, device));
  NDTCU_CUDA_CHECK(cudaDriverGetVersion(&impl_->driver_version));
  impl_->pinned_result.reserve(1);
  NDTCU_CUDA_CHECK(cudaEventCreate(&impl_->start));
  NDTCU_CUDA_CHECK(cudaEventCreate(&impl_->stop));
  impl_->config.resize_discard(1);
  impl_->result.resize_discard(1);
  impl_->ticket.resize_discard(1);
  NDTCU_CUDA_CHECK(cudaMemsetAsync(impl_->ticket.data(), 0, sizeof(unsigned), impl_->stream));
}

CudaBackend::~CudaBackend() = default;

void CudaBackend::set_map(const VoxelMap& map, VoxelLookup lookup, std::size_t dense_budget_bytes) {
  Impl& m = *impl_;
  m.has_map = false;  // a failed upload leaves no half-set map behind
  const std::size_t nv = map.size();
  for (int a = 0; a < 3; ++a) {
    m.mean[a].upload(map.mean(a).data(), nv, m.stream);
    m.centroid[a].upload(map.centroid(a).data(), nv, m.stream);
  }
  for (int e = 0; e < 6; ++e) m.icov[e].upload(map.inverse_covariance(e).data(), nv, m.stream);
  m.table_keys.upload(map.table_keys().data(), map.table_keys().size(), m.stream);
  m.table_values.upload(map.table_values().data(), map.table_values().size(), m.stream);
  m.telemetry.setup_bytes_up += nv * (9 * sizeof(double) + 3 * sizeof(float)) +
                                map.table_keys().size() * (sizeof(std::uint64_t) + sizeof(std::int32_t));

  math::VoxelGridView g{};
  g.size = static_cast<std::int32_t>(nv);
  for (int a = 0; a < 3; ++a) {
    g.mean[a] = m.mean[a].data();
    g.centroid[a] = m.centroid[a].data();
  }
  for (int e = 0; e < 6; ++e) g.icov[e] = m.icov[e].data();
  g.table_keys = m.table_keys.data();
  g.table_values = m.table_values.data();
  g.table_mask = map.table_keys().empty() ? 0 : map.table_keys().size() - 1;
  g.inv_resolution = map.inverse_resolution();
  g.radius_sq = map.radius_squared();

  // Dense index over the occupied lattice box, when asked for or when it fits the budget.
  const LatticeBox box = occupied_box(map);
  const double cells = box.cells();
  const double dense_bytes = box.bytes();
  bool use_dense = lookup == VoxelLookup::Dense || (lookup == VoxelLookup::Auto && dense_bytes <= dense_budget_bytes);
  if (nv == 0) use_dense = false;
  if (use_dense) {
    // Check the device before building the host copy: a forced dense index over a sparse,
    // wide map can ask for more than any device has.
    std::size_t free_b = 0, total_b = 0;
    NDTCU_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (dense_bytes > double(free_b)) {
      throw CudaError("dense voxel index of " + std::to_string(static_cast<unsigned long long>(cells)) +
                      " cells needs " + std::to_string(static_cast<unsigned long long>(dense_bytes)) +
                      " bytes, the device has " + std::to_string(free_b) + " of " + std::to_string(total_b) +
                      " bytes free (use the hash lookup)");
    }
    const DenseVoxelIndex index = DenseVoxelIndex::build(map, box);
    m.dense.upload(index.cells.data(), index.cells.size(), m.stream);
    m.telemetry.setup_bytes_up += index.cells.size() * sizeof(std::int32_t);
    DenseVoxelIndex::attach(g, m.dense.data(), box);
    m.lookup = VoxelLookup::Dense;
  } else {
    m.lookup = VoxelLookup::Hash;
  }
  m.grid = g;
  m.resolution = map.resolution();
  m.has_map = true;
  m.config_dirty = true;
  log().debug("cuda: map of {} voxels uploaded, {} lookup ({} cells in the occupied box)", nv,
              m.lookup == VoxelLookup::Dense ? "dense" : "hash", cells);
}

void CudaBackend::set_source(const std::vector<Eigen::Vector3f>& points) {
  Impl& m = *impl_;
  if (points.size() > static_cast<std::size_t>(std::numeric_limits<int>::max() / (2 * kMaxLanes))) {
    throw Error("CUDA backend: " + std::to_string(points.size()) + " source points are more than it indexes");
  }
  const std::size_t n = points.size();
  // A scan larger than any before grows the buffers to 1.5 times its size: localizing a
  // sequence whose filtered scans grow a little at a time would otherwise reallocate (a
  // device-wide synchronization) and rebuild the loop graph on every new maximum.
  for (auto* buffer : {&m.x, &m.y, &m.z}) buffer->resize_with_headroom(n);
  // Structure of arrays: x, y, z each contiguous, so a warp's loads coalesce.
  m.staging.resize(3 * n);
  for (std::size_t i = 0; i < n; ++i) {
    m.staging[i] = points[i].x();
    m.staging[n + i] = points[i].y();
    m.staging[2 * n + i] = points[i].z();
  }
  m.x.upload(m.staging.data(), n, m.stream);
  m.y.upload(m.staging.data() + n, n, m.stream);
  m.z.upload(m.staging.data() + 2 * n, n, m.stream);
  m.n = static_cast<int>(n);
  m.telemetry.setup_bytes_up += 3 * n * sizeof(float);
  m.lanes = lanes_for(static_cast<int>(n), m.multiprocessors);
  const std::size_t blocks = std::max<std::size_t>(1, (n * static_cast<std::size_t>(m.lanes) + kBlock - 1) / kBlock);
  m.partials.resize_with_headroom(blocks);
  if (m.variant == DerivativeVariant::Precomputed) {
    m.jacobian.resize_discard(8 * n);
    m.hessian.resize_discard(15 * n);
  }
  m.config_dirty = true;
}

void CudaBackend::configure(SearchMethod search, double outlier_ratio, DerivativeVariant variant) {
  Impl& m = *impl_;
  m.search = search;
  m.outlier_ratio = outlier_ratio;
  m.variant = variant;
  if (variant == DerivativeVariant::Precomputed) {
    m.jacobian.resize_discard(8 * static_cast<std::size_t>(m.n));
    m.hessian.resize_discard(15 * static_cast<std::size_t>(m.n));
  }
  m.config_dirty = true;
}

math::DerivativeSums CudaBackend::evaluate(const Pose6& pose, bool with_hessian) {
  Impl& m = *impl_;
  if (m.config_dirty) m.upload_config();
  math::DerivativeSums out;
  out.clear();
  if (m.n == 0) return out;

  const double p[6] = {pose(0), pose(1), pose(2), pose(3), pose(4), pose(5)};
  const PoseUpload up = make_upload(p, with_hessian);
  const int blocks = static_cast<int>((static_cast<std::int64_t>(m.n) * m.lanes + kBlock - 1) / kBlock);
  NDTCU_NVTX_RANGE("derivatives");
  NDTCU_CUDA_CHECK(cudaEventRecord(m.start, m.stream));
  m.launch_derivatives(PoseByValue{up}, blocks, m.stream);
  NDTCU_CUDA_CHECK(cudaEventRecord(m.stop, m.stream));
  NDTCU_NVTX_RANGE("reduce");  // the grid reduction's read-back and the one synchronization
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.pinned_result.data(), m.result.data(), sizeof(Vec<kSums>), cudaMemcpyDeviceToHost,
                                   m.stream));
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the one synchronization per evaluation
  float ms = 0.f;
  NDTCU_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
  for (int k = 0; k < kSums; ++k) out.v[k] = m.pinned_result.data()->v[k];

  m.telemetry.evaluations += 1;
  m.telemetry.bytes_up += sizeof(PoseUpload);
  m.telemetry.bytes_down += sizeof(Vec<kSums>);
  m.telemetry.gpu_ms += ms;
  m.telemetry.device_allocations = device_allocation_count() - m.allocations_at_start;
  return out;
}

bool CudaBackend::device_loop_supported() const noexcept { return impl_->driver_version >= 12040; }

DeviceLoopOutput CudaBackend::run_fixed_step(const Pose6& initial, const DeviceLoopSettings& settings) {
  Impl& m = *impl_;
  if (!device_loop_supported()) throw CudaError("the device-resident Newton loop needs a CUDA 12.4 driver or later");
  if (settings.max_iterations < 1) throw Error("device loop: max_iterations must be at least 1");
  if (m.config_dirty) m.upload_config();
  DeviceLoopOutput out;
  out.pose = initial;
  if (m.n == 0) {  // as the host loop: one (empty) evaluation, no correspondence
    out.reason = StopReason::NoCorrespondence;
    out.evaluations = 1;
    out.final_sums.clear();
    return out;
  }
  const auto iterations = static_cast<std::size_t>(settings.max_iterations);
  m.trace.resize_discard(iterations);
  m.pinned_trace.reserve(iterations);
  m.pinned_state.reserve(1);
  m.loop_state.resize_discard(1);
  m.ensure_graph();

  LoopState& st = *m.pinned_state.data();
  st = LoopState{};
  for (int i = 0; i < 6; ++i) st.pose[i] = initial(i);
  st.up = make_upload(st.pose, true);
  st.step_min = settings.step_min;
  st.step_max = settings.step_max;
  st.epsilon = settings.epsilon;
  st.trace = m.trace.data();
  st.max_iterations = settings.max_iterations;
  st.pcl_convergence = settings.pcl_convergence ? 1 : 0;
  st.reason = kMaxIterations;

  NDTCU_NVTX_RANGE("device loop");
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.loop_state.data(), &st, sizeof(LoopState), cudaMemcpyHostToDevice, m.stream));
  NDTCU_CUDA_CHECK(cudaEventRecord(m.start, m.stream));
  NDTCU_CUDA_CHECK(cudaGraphLaunch(m.graph_exec, m.stream));
  NDTCU_CUDA_CHECK(cudaEventRecord(m.stop, m.stream));
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(&st, m.loop_state.data(), sizeof(LoopState), cudaMemcpyDeviceToHost, m.stream));
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.pinned_result.data(), m.result.data(), sizeof(Vec<kSums>), cudaMemcpyDeviceToHost,
                                   m.stream));
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.pinned_trace.data(), m.trace.data(), iterations * sizeof(TraceEntry),
                                   cudaMemcpyDeviceToHost, m.stream));
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  float ms = 0.f;
  NDTCU_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));

  for (int i = 0; i < 6; ++i) out.pose(i) = st.pose[i];
  out.iterations = st.iterations;
  out.evaluations = st.evaluations;
  out.reason = to_stop_reason(st.reason);
  for (int k = 0; k < kSums; ++k) out.final_sums.v[k] = m.pinned_result.data()->v[k];
  const int recorded = std::min(st.iterations, settings.max_iterations);
  out.trace.resize(static_cast<std::size_t>(recorded));
  for (int i = 0; i < recorded; ++i) {
    const TraceEntry& e = m.pinned_trace.data()[i];
    for (int k = 0; k < 6; ++k) out.trace[i].pose(k) = e.pose[k];
    out.trace[i].score = e.score;
    out.trace[i].step_length = e.step;
  }

  m.telemetry.evaluations += static_cast<std::uint64_t>(st.evaluations);
  m.telemetry.bytes_up += sizeof(LoopState);
  m.telemetry.bytes_down += sizeof(LoopState) + sizeof(Vec<kSums>) + iterations * sizeof(TraceEntry);
  m.telemetry.gpu_ms += ms;
  m.telemetry.device_allocations = device_allocation_count() - m.allocations_at_start;
  return out;
}

VoxelLookup CudaBackend::lookup() const noexcept { return impl_->lookup; }
const CudaTelemetry& CudaBackend::telemetry() const noexcept { return impl_->telemetry; }
void CudaBackend::reset_telemetry() noexcept { impl_->telemetry = CudaTelemetry{}; impl_->allocations_at_start = device_allocation_count(); }

}  // namespace ndtcu::detail
