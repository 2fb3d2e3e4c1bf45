// The voxel map's cells on the GPU (src/cuda/cuda_voxel_build.hpp): keys, a CUB radix
// sort, run-length encoding, per-cell statistics by the shared voxel_statistics.hpp, and
// a compaction of the usable cells, all on one stream; the host reads back the usable
// cells and one status byte per occupied cell.
#include "../src/cuda/cuda_voxel_build.hpp"
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "ndt_neighbours.hpp"
#include "voxel_statistics.hpp"

#include <cub/cub.cuh>

#include <fmt/format.h>

#include <limits>

namespace ndtcu::detail {

namespace {

constexpr int kThreads = 256;

int blocks_for(std::size_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

// Cell key and point index of every point; the first point out of the key's range is
// recorded in *bad (the smallest index, as the CPU build names it).
__global__ void key_kernel(const float3* points, std::size_t n, float inv_res, std::uint64_t* keys,
                           std::uint32_t* index, unsigned long long* bad) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float3 p = points[i];
  const std::int64_t a = math::lattice_index(p.x, inv_res), b = math::lattice_index(p.y, inv_res),
                     k = math::lattice_index(p.z, inv_res);
  if (!math::key_in_range(a, b, k)) {
    atomicMin(bad, static_cast<unsigned long long>(i));
    keys[i] = 0;
  } else {
    keys[i] = math::pack_key(static_cast<std::int32_t>(a), static_cast<std::int32_t>(b), static_cast<std::int32_t>(k));
  }
  index[i] = static_cast<std::uint32_t>(i);
}

// A usable run's statistics. `pad` fills the struct to a multiple of 8 bytes and is
// written, so copying a result whole reads no uninitialized byte.
struct RunResult {
  double mean[3];
  double icov[6];
  double cov[6];
  float centroid[3];
  float pad;
};
static_assert(sizeof(RunResult) == 15 * sizeof(double) + 4 * sizeof(float), "no implicit padding");

// Status of a run (one byte each, read back): 0 sparse, 1 singular, 2 usable.
// Run r: its points (sorted by key, then index) summed in input order, and its statistics.
__global__ void stats_kernel(const float3* points, const std::uint32_t* index, const std::uint32_t* offsets,
                             const std::uint32_t* counts, const int* runs, int min_points, bool autoware, bool pcl,
                             double eigenvalue_ratio, RunResult* results, std::uint32_t* usable, std::uint8_t* status) {
  const int r = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= *runs) return;
  const std::uint32_t count = counts[r];
  if (count < static_cast<std::uint32_t>(min_points)) {
    status[r] = 0;
    usable[r] = 0;
    return;
  }
  math::VoxelSums s;
  math::start_sums(s, autoware);
  const std::uint32_t begin = offsets[r];
  for (std::uint32_t m = 0; m < count; ++m) {
    const float3 p = points[index[begin + m]];
    math::add_point(s, p.x, p.y, p.z);
  }
  math::VoxelStatistics st;
  math::voxel_statistics(s, pcl, eigenvalue_ratio, st);
  status[r] = st.usable ? 2 : 1;
  usable[r] = st.usable ? 1 : 0;
  if (!st.usable) return;
  RunResult& out = results[r];
  out.pad = 0.0f;
  static constexpr int kRow[6] = {0, 0, 0, 1, 1, 2}, kCol[6] = {0, 1, 2, 1, 2, 2};
  for (int a = 0; a < 3; ++a) {
    out.mean[a] = st.mean[a];
    out.centroid[a] = st.centroid[a];
  }
  for (int e = 0; e < 6; ++e) {
    out.icov[e] = st.icov[kRow[e]][kCol[e]];
    out.cov[e] = st.cov[kRow[e]][kCol[e]];
  }
}

// The usable runs, in run order, at their exclusive-scan positions.
__global__ void compact_kernel(const int* runs, const std::uint32_t* usable, const std::uint32_t* position,
                               const std::uint64_t* run_keys, const std::uint32_t* counts, const RunResult* results,
                               std::uint64_t* keys_out, std::uint32_t* counts_out, RunResult* results_out) {
  const int r = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= *runs || !usable[r]) return;
  const std::uint32_t v = position[r];
  keys_out[v] = run_keys[r];
  counts_out[v] = counts[r];
  results_out[v] = results[r];
}

}  // namespace

VoxelCells cuda_voxel_cells(PointCloudView cloud, float inverse_resolution, const VoxelMapOptions& options) {
  const std::size_t n = cloud.size();
  VoxelCells out;
  if (n == 0) return out;
  if (n > std::numeric_limits<std::uint32_t>::max()) throw Error("voxel map: more than 2^32 points");
  static_assert(sizeof(Eigen::Vector3f) == sizeof(float3), "Vector3f and float3 must share a layout");
  cudaStream_t stream = nullptr;
  DeviceBuffer<float3> points(n);
  points.upload(reinterpret_cast<const float3*>(cloud.points), n, stream);
  DeviceBuffer<std::uint64_t> keys(n), sorted_keys(n);
  DeviceBuffer<std::uint32_t> index(n), sorted_index(n);
  DeviceBuffer<unsigned long long> bad(1);
  const unsigned long long none = std::numeric_limits<unsigned long long>::max();
  bad.upload(&none, 1, stream);
  key_kernel<<<blocks_for(n), kThreads, 0, stream>>>(points.data(), n, inverse_resolution, keys.data(), index.data(),
                                                      bad.data());
  NDTCU_CUDA_CHECK_LAUNCH();
  unsigned long long first_bad = none;
  bad.download(&first_bad, 1, stream);
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (first_bad != none) {
    throw Error(fmt::format("voxel map: point {} lies more than 2^20 voxels of {} m from the cloud origin; set an "
                            "origin near the data",
                            first_bad, static_cast<double>(1.0f / inverse_resolution)));
  }
  // Stable radix sort by key (63 bits): within a cell the points keep their input order.
  const int n_int = static_cast<int>(std::min<std::size_t>(n, static_cast<std::size_t>(std::numeric_limits<int>::max())));
  if (static_cast<std::size_t>(n_int) != n) throw Error("voxel map: more than 2^31 points for the GPU build");
  std::size_t temp_sort = 0, temp_rle = 0, temp_scan = 0;
  NDTCU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_sort, keys.data(), sorted_keys.data(), index.data(),
                                                   sorted_index.data(), n_int, 0, 63, stream));
  DeviceBuffer<std::uint64_t> run_keys(n);
  DeviceBuffer<std::uint32_t> counts(n), offsets(n), usable(n), position(n);
  DeviceBuffer<int> runs(1);
  NDTCU_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, temp_rle, sorted_keys.data(), run_keys.data(),
                                                      counts.data(), runs.data(), n_int, stream));
  NDTCU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_scan, counts.data(), offsets.data(), n_int, stream));
  DeviceBuffer<unsigned char> temp(std::max({temp_sort, temp_rle, temp_scan, std::size_t{1}}));
  std::size_t t = temp.size();
  NDTCU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), t, keys.data(), sorted_keys.data(), index.data(),
                                                   sorted_index.data(), n_int, 0, 63, stream));
  t = temp.size();
  NDTCU_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(temp.data(), t, sorted_keys.data(), run_keys.data(),
                                                      counts.data(), runs.data(), n_int, stream));
  int run_count = 0;
  runs.download(&run_count, 1, stream);
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
  t = temp.size();
  NDTCU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data(), t, counts.data(), offsets.data(), run_count, stream));
  DeviceBuffer<RunResult> results(static_cast<std::size_t>(run_count)), compacted(static_cast<std::size_t>(run_count));
  DeviceBuffer<std::uint8_t> status(static_cast<std::size_t>(run_count));
  const bool autoware = options.covariance == CovarianceMode::Autoware;
  stats_kernel<<<blocks_for(static_cast<std::size_t>(run_count)), kThreads, 0, stream>>>(
      points.data(), sorted_index.data(), offsets.data(), counts.data(), runs.data(), options.min_points, autoware,
      !autoware, options.eigenvalue_ratio, results.data(), usable.data(), status.data());
  NDTCU_CUDA_CHECK_LAUNCH();
  t = temp.size();
  NDTCU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data(), t, usable.data(), position.data(), run_count, stream));
  DeviceBuffer<std::uint64_t> keys_out(static_cast<std::size_t>(run_count));
  DeviceBuffer<std::uint32_t> counts_out(static_cast<std::size_t>(run_count));
  compact_kernel<<<blocks_for(static_cast<std::size_t>(run_count)), kThreads, 0, stream>>>(
      runs.data(), usable.data(), position.data(), run_keys.data(), counts.data(), results.data(), keys_out.data(),
      counts_out.data(), compacted.data());
  NDTCU_CUDA_CHECK_LAUNCH();

  std::vector<std::uint8_t> host_status(static_cast<std::size_t>(run_count));
  status.download(host_status.data(), host_status.size(), stream);
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
  out.occupied_cells = host_status.size();
  std::size_t voxels = 0;
  for (std::uint8_t s : host_status) {
    out.sparse_cells += s == 0;
    out.singular_cells += s == 1;
    voxels += s == 2;
  }
  out.keys.resize(voxels);
  out.counts.resize(voxels);
  std::vector<RunResult> host(voxels);
  keys_out.download(out.keys.data(), voxels, stream);
  counts_out.download(out.counts.data(), voxels, stream);
  compacted.download(host.data(), voxels, stream);
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int a = 0; a < 3; ++a) {
    out.mean[a].resize(voxels);
    out.centroid[a].resize(voxels);
  }
  for (int e = 0; e < 6; ++e) {
    out.icov[e].resize(voxels);
    out.cov[e].resize(voxels);
  }
  for (std::size_t v = 0; v < voxels; ++v) {
    for (int a = 0; a < 3; ++a) {
      out.mean[a][v] = host[v].mean[a];
      out.centroid[a][v] = host[v].centroid[a];
    }
    for (int e = 0; e < 6; ++e) {
      out.icov[e][v] = host[v].icov[e];
      out.cov[e][v] = host[v].cov[e];
    }
  }
  return out;
}

}  // namespace ndtcu::detail
