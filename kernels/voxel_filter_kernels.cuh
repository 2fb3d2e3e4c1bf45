#pragma once
// The kernels of the CUDA scan filter (src/cuda/cuda_filter.cu launches them and says
// what each step does): the range crop with the kept points' bounds, the cell keys, the
// points gathered in cell order, and the cells' centroids.
#include "deskew.hpp"
#include "voxel_grid_math.hpp"

#include <cub/block/block_reduce.cuh>
#include <cuda_runtime.h>

#include <cstdint>

namespace ndtcu::detail {
// Internal to the translation unit that launches them (no separable compilation).
namespace {

constexpr int kBlock = 256;

/// Bounds of the kept points (relative coordinates).
struct Box {
  float lo[3];
  float hi[3];
};

__device__ inline Box empty_box() {
  const float inf = __int_as_float(0x7f800000);
  return Box{{inf, inf, inf}, {-inf, -inf, -inf}};
}

/// Componentwise min and max: exact, so the order of the reduction does not matter.
struct BoxMerge {
  __device__ Box operator()(const Box& a, const Box& b) const {
    Box r;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
      r.lo[k] = fminf(a.lo[k], b.lo[k]);
      r.hi[k] = fmaxf(a.hi[k], b.hi[k]);
    }
    return r;
  }
};

/// What the host reads back: after the crop (kept, box) and after the cells (leaves).
struct Summary {
  int kept;    ///< points inside the range (written by DeviceSelect)
  int leaves;  ///< occupied cells (written by DeviceSelect)
  Box box;     ///< bounds of the kept points
};

using BoxReduce = cub::BlockReduce<Box, kBlock>;

/// Range flag per point and the bounds of each block's kept points.
__global__ void __launch_bounds__(kBlock)
    crop_kernel(const float3* __restrict__ points, int n, double ox, double oy, double oz, double min2, double max2,
                unsigned char* __restrict__ flags, Box* __restrict__ block_boxes) {
  __shared__ typename BoxReduce::TempStorage storage;
  const int i = blockIdx.x * kBlock + threadIdx.x;
  Box b = empty_box();
  if (i < n) {
    const float3 p = points[i];
    const bool keep = math::within_range(ox, oy, oz, p.x, p.y, p.z, min2, max2);
    flags[i] = keep ? 1 : 0;
    if (keep) b = Box{{p.x, p.y, p.z}, {p.x, p.y, p.z}};
  }
  const Box r = BoxReduce(storage).Reduce(b, BoxMerge{});
  if (threadIdx.x == 0) block_boxes[blockIdx.x] = r;
}

/// The bounds over all blocks (one block).
__global__ void __launch_bounds__(kBlock) box_kernel(const Box* __restrict__ block_boxes, int blocks,
                                                     Summary* __restrict__ summary) {
  __shared__ typename BoxReduce::TempStorage storage;
  Box b = empty_box();
  const BoxMerge merge;
  for (int k = threadIdx.x; k < blocks; k += kBlock) b = merge(b, block_boxes[k]);
  const Box r = BoxReduce(storage).Reduce(b, merge);
  if (threadIdx.x == 0) summary->box = r;
}

/// Each point moved to the scan's reference time along `path` (math::deskew_point, the
/// function the CPU preprocessing calls), in place, before the crop. The path (2.4 kB) is a
/// kernel parameter: constant memory, read alike by every thread.
__global__ void __launch_bounds__(kBlock)
    deskew_kernel(float3* __restrict__ points, const float* __restrict__ time, int n, math::SweepPath path) {
  const int i = blockIdx.x * kBlock + threadIdx.x;
  if (i >= n) return;
  float3 p = points[i];
  math::deskew_point(path, time[i], p.x, p.y, p.z);
  points[i] = p;
}

/// One value per point gathered by index (the times in kept or in sorted order).
__global__ void __launch_bounds__(kBlock)
    gather_channel_kernel(const float* __restrict__ values, const std::uint32_t* __restrict__ index, int count,
                          float* __restrict__ out) {
  const int j = blockIdx.x * kBlock + threadIdx.x;
  if (j >= count) return;
  out[j] = values[index[j]];
}

/// One thread per cell: the mean of its sorted values (times), summed in order in double
/// as the CPU filter sums a cell's times (emit_centroids), rounded to float once.
__global__ void __launch_bounds__(kBlock)
    channel_mean_kernel(const float* __restrict__ sorted_values, const std::uint32_t* __restrict__ run_start,
                        const Summary* __restrict__ summary, int kept, float* __restrict__ out) {
  const int r = blockIdx.x * kBlock + threadIdx.x;
  const int leaves = summary->leaves;
  if (r >= leaves) return;
  const int begin = static_cast<int>(run_start[r]);
  const int end = r + 1 < leaves ? static_cast<int>(run_start[r + 1]) : kept;
  double s = 0.0;
  for (int k = begin; k < end; ++k) s = math::add_rn(s, static_cast<double>(sorted_values[k]));
  out[r] = static_cast<float>(math::div_rn(s, static_cast<double>(end - begin)));
}

/// The kept points themselves, in input order (crop only).
__global__ void __launch_bounds__(kBlock)
    gather_kept_kernel(const float3* __restrict__ points, const float* __restrict__ intensity,
                       const std::uint32_t* __restrict__ kept_index, int kept, float3* __restrict__ out,
                       float* __restrict__ out_intensity) {
  const int j = blockIdx.x * kBlock + threadIdx.x;
  if (j >= kept) return;
  const std::uint32_t i = kept_index[j];
  out[j] = points[i];
  if (intensity) out_intensity[j] = intensity[i];
}

/// Each kept point's cell index on the lattice (PclCellIndex or WideCellIndex).
template <typename Lattice, typename Key>
__global__ void __launch_bounds__(kBlock)
    key_kernel(const float3* __restrict__ points, const std::uint32_t* __restrict__ kept_index, int kept,
               Lattice lattice, Key* __restrict__ keys) {
  const int j = blockIdx.x * kBlock + threadIdx.x;
  if (j >= kept) return;
  const float3 p = points[kept_index[j]];
  keys[j] = math::cell_index(lattice, p.x, p.y, p.z);
}

/// Points and intensities in sorted order, and a flag at each cell's first point.
template <typename Key>
__global__ void __launch_bounds__(kBlock)
    gather_sorted_kernel(const Key* __restrict__ sorted_keys, const std::uint32_t* __restrict__ sorted_index,
                         const float3* __restrict__ points, const float* __restrict__ intensity, int kept,
                         float3* __restrict__ sorted_points, float* __restrict__ sorted_intensity,
                         unsigned char* __restrict__ heads) {
  const int k = blockIdx.x * kBlock + threadIdx.x;
  if (k >= kept) return;
  const std::uint32_t i = sorted_index[k];
  sorted_points[k] = points[i];
  if (intensity) sorted_intensity[k] = intensity[i];
  heads[k] = (k == 0 || sorted_keys[k] != sorted_keys[k - 1]) ? 1 : 0;
}

/// One thread per cell: the float sum of its points in order, divided by the count (the
/// CPU's emit_centroids). The cell count comes from the device (DeviceSelect's), so the
/// grid covers `kept`, the most there can be.
__global__ void __launch_bounds__(kBlock)
    centroid_kernel(const float3* __restrict__ sorted_points, const float* __restrict__ sorted_intensity,
                    const std::uint32_t* __restrict__ run_start, const Summary* __restrict__ summary, int kept,
                    float3* __restrict__ centroids, float* __restrict__ centroid_intensity) {
  const int r = blockIdx.x * kBlock + threadIdx.x;
  const int leaves = summary->leaves;
  if (r >= leaves) return;
  const int begin = static_cast<int>(run_start[r]);
  const int end = r + 1 < leaves ? static_cast<int>(run_start[r + 1]) : kept;
  float sx = 0.f, sy = 0.f, sz = 0.f, si = 0.f;
  // Unrolling keeps the order of the additions; it only lets the loads run ahead.
#pragma unroll 4
  for (int k = begin; k < end; ++k) {
    const float3 p = sorted_points[k];
    sx = math::add_rn(sx, p.x);
    sy = math::add_rn(sy, p.y);
    sz = math::add_rn(sz, p.z);
  }
  const float count = static_cast<float>(end - begin);
  centroids[r] = make_float3(math::div_rn(sx, count), math::div_rn(sy, count), math::div_rn(sz, count));
  if (sorted_intensity) {
    for (int k = begin; k < end; ++k) si = math::add_rn(si, sorted_intensity[k]);
    centroid_intensity[r] = math::div_rn(si, count);
  }
}

}  // namespace
}  // namespace ndtcu::detail
