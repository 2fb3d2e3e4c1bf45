// The voxel map's cells on the GPU (src/cuda/cuda_voxel_build.hpp): keys, a CUB radix
// sort, run-length encoding, per-cell statistics by the shared voxel_statistics.hpp, and
// a compaction of the usable cells, all on the voxelizer's stream; the host reads back
// the usable cells and one status byte per occupied cell (a map), or every occupied
// cell's sums and statistics (a tile of a tiled map).
#include "cuda_voxel_build.hpp"

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "voxel_build_kernels.cuh"

#include <cub/cub.cuh>

#include <fmt/format.h>

#include <cstring>
#include <limits>

namespace ndtcu::detail {

struct CudaVoxelizer::Impl {
  bool pinned_upload = false;
  cudaStream_t stream = nullptr;
  // Grow-only buffers, sized by the largest cloud so far: points and their keys, then runs.
  PinnedBuffer<float3> staging;  // the points' upload: one short DMA instead of a pageable copy
  DeviceBuffer<float3> points;
  DeviceBuffer<std::uint64_t> keys, sorted_keys, run_keys, keys_out;
  DeviceBuffer<std::uint32_t> index, sorted_index, counts, offsets, usable, position, counts_out;
  DeviceBuffer<unsigned long long> bad;
  DeviceBuffer<int> runs;
  DeviceBuffer<unsigned char> temp;
  DeviceBuffer<VoxelResult> results, compacted;
  DeviceBuffer<std::uint8_t> status;
  DeviceBuffer<math::VoxelSums> sums;
  DeviceBuffer<math::VoxelStatistics> stats;

  explicit Impl(bool pinned) : pinned_upload(pinned) {
    int device = 0;
    NDTCU_CUDA_CHECK(cudaGetDevice(&device));
    NDTCU_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ~Impl() {
    if (stream) cudaStreamDestroy(stream);
  }

  // Keys, the stable sort and the runs of `cloud`: returns the number of runs (occupied
  // cells); sorted_index, run_keys, counts and offsets hold them.
  int sort_into_runs(PointCloudView cloud, float inverse_resolution) {
    const std::size_t n = cloud.size();
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw Error("voxel map: more than 2^31 points for the GPU build");
    }
    static_assert(sizeof(Eigen::Vector3f) == sizeof(float3), "Vector3f and float3 must share a layout");
    points.resize_with_headroom(n);
    const float3* from = reinterpret_cast<const float3*>(cloud.points);
    if (pinned_upload) {
      staging.reserve_with_headroom(n);
      std::memcpy(staging.data(), cloud.points, n * sizeof(float3));
      from = staging.data();
    }
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(points.data(), from, n * sizeof(float3), cudaMemcpyHostToDevice, stream));
    for (auto* b : {&keys, &sorted_keys, &run_keys}) b->resize_with_headroom(n);
    for (auto* b : {&index, &sorted_index, &counts, &offsets}) b->resize_with_headroom(n);
    bad.resize_discard(1);
    runs.resize_discard(1);
    const unsigned long long none = std::numeric_limits<unsigned long long>::max();
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(bad.data(), &none, sizeof(none), cudaMemcpyHostToDevice, stream));
    key_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(points.data(), n, inverse_resolution, keys.data(), index.data(),
                                                        bad.data());
    NDTCU_CUDA_CHECK_LAUNCH();
    const int n_int = static_cast<int>(n);
    std::size_t temp_sort = 0, temp_rle = 0, temp_scan = 0;
    NDTCU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_sort, keys.data(), sorted_keys.data(), index.data(),
                                                     sorted_index.data(), n_int, 0, 63, stream));
    NDTCU_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, temp_rle, sorted_keys.data(), run_keys.data(),
                                                        counts.data(), runs.data(), n_int, stream));
    NDTCU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_scan, counts.data(), offsets.data(), n_int, stream));
    temp.resize_with_headroom(std::max({temp_sort, temp_rle, temp_scan, std::size_t{1}}));
    unsigned long long first_bad = none;
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(&first_bad, bad.data(), sizeof(first_bad), cudaMemcpyDeviceToHost, stream));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (first_bad != none) {
      throw Error(fmt::format("voxel map: point {} lies more than 2^20 voxels of {} m from the cloud origin; set an "
                              "origin near the data",
                              first_bad, static_cast<double>(1.0f / inverse_resolution)));
    }
    // Stable radix sort by key (63 bits): within a cell the points keep their input order.
    std::size_t t = temp.size();
    NDTCU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), t, keys.data(), sorted_keys.data(), index.data(),
                                                     sorted_index.data(), n_int, 0, 63, stream));
    t = temp.size();
    NDTCU_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(temp.data(), t, sorted_keys.data(), run_keys.data(),
                                                        counts.data(), runs.data(), n_int, stream));
    int run_count = 0;
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(&run_count, runs.data(), sizeof(int), cudaMemcpyDeviceToHost, stream));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
    t = temp.size();
    NDTCU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data(), t, counts.data(), offsets.data(), run_count, stream));
    return run_count;
  }
};

CudaVoxelizer::CudaVoxelizer(bool pinned_upload) : impl_(std::make_unique<Impl>(pinned_upload)) {}
CudaVoxelizer::~CudaVoxelizer() = default;

VoxelCells CudaVoxelizer::usable_cells(PointCloudView cloud, float inverse_resolution, const VoxelMapOptions& options,
                                       DeviceVoxelCells* on_device) {
  VoxelCells out;
  if (on_device) *on_device = DeviceVoxelCells{};
  if (cloud.size() == 0) return out;
  Impl& m = *impl_;
  const cudaStream_t stream = m.stream;
  const int run_count = m.sort_into_runs(cloud, inverse_resolution);
  const auto runs_n = static_cast<std::size_t>(run_count);
  m.results.resize_with_headroom(runs_n);
  m.compacted.resize_with_headroom(runs_n);
  m.status.resize_with_headroom(runs_n);
  m.usable.resize_with_headroom(runs_n);
  m.position.resize_with_headroom(runs_n);
  m.keys_out.resize_with_headroom(runs_n);
  m.counts_out.resize_with_headroom(runs_n);
  const bool autoware = options.covariance == CovarianceMode::Autoware;
  stats_kernel<<<grid_blocks(runs_n, kThreads), kThreads, 0, stream>>>(
      m.points.data(), m.sorted_index.data(), m.offsets.data(), m.counts.data(), m.runs.data(), options.min_points,
      autoware, !autoware, options.eigenvalue_ratio, m.results.data(), m.usable.data(), m.status.data());
  NDTCU_CUDA_CHECK_LAUNCH();
  std::size_t t = m.temp.size();
  NDTCU_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(m.temp.data(), t, m.usable.data(), m.position.data(), run_count, stream));
  compact_kernel<<<grid_blocks(runs_n, kThreads), kThreads, 0, stream>>>(m.runs.data(), m.usable.data(), m.position.data(),
                                                               m.run_keys.data(), m.counts.data(), m.results.data(),
                                                               m.keys_out.data(), m.counts_out.data(), m.compacted.data());
  NDTCU_CUDA_CHECK_LAUNCH();

  std::vector<std::uint8_t> host_status(runs_n);
  m.status.download(host_status.data(), runs_n, stream);
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
  out.occupied_cells = runs_n;
  std::size_t voxels = 0;
  for (std::uint8_t s : host_status) {
    out.sparse_cells += s == 0;
    out.singular_cells += s == 1;
    voxels += s == 2;
  }
  resize_voxels(out, voxels);
  std::vector<VoxelResult> host(voxels);
  m.keys_out.download(out.keys.data(), voxels, stream);
  m.counts_out.download(out.counts.data(), voxels, stream);
  m.compacted.download(host.data(), voxels, stream);
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (on_device) *on_device = DeviceVoxelCells{m.keys_out.data(), m.compacted.data(), voxels};
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

OccupiedCells CudaVoxelizer::occupied_cells(PointCloudView cloud, float inverse_resolution,
                                            const VoxelMapOptions& options, DeviceOccupiedCells* on_device) {
  OccupiedCells out;
  if (on_device) *on_device = DeviceOccupiedCells{};
  if (cloud.size() == 0) return out;
  Impl& m = *impl_;
  const cudaStream_t stream = m.stream;
  const int run_count = m.sort_into_runs(cloud, inverse_resolution);
  const auto runs_n = static_cast<std::size_t>(run_count);
  m.sums.resize_with_headroom(runs_n);
  m.stats.resize_with_headroom(runs_n);
  NDTCU_CUDA_CHECK(cudaMemsetAsync(m.stats.data(), 0, runs_n * sizeof(math::VoxelStatistics), stream));
  const bool autoware = options.covariance == CovarianceMode::Autoware;
  occupied_kernel<<<grid_blocks(runs_n, kThreads), kThreads, 0, stream>>>(
      m.points.data(), m.sorted_index.data(), m.offsets.data(), m.counts.data(), m.runs.data(), options.min_points,
      autoware, !autoware, options.eigenvalue_ratio, m.sums.data(), m.stats.data());
  NDTCU_CUDA_CHECK_LAUNCH();
  out.keys.resize(runs_n);
  out.sums.resize(runs_n);
  out.stats.resize(runs_n);
  m.run_keys.download(out.keys.data(), runs_n, stream);
  m.sums.download(out.sums.data(), runs_n, stream);
  m.stats.download(out.stats.data(), runs_n, stream);
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (on_device) *on_device = DeviceOccupiedCells{m.run_keys.data(), m.stats.data(), runs_n};
  return out;
}

VoxelCells cuda_voxel_cells(PointCloudView cloud, float inverse_resolution, const VoxelMapOptions& options) {
  if (cloud.size() == 0) return {};
  CudaVoxelizer voxelizer(false);  // one build: a page-locked copy would cost more than it saves
  return voxelizer.usable_cells(cloud, inverse_resolution, options);
}

}  // namespace ndtcu::detail
