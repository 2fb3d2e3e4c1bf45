// The CUDA scan filter (src/cuda/cuda_filter.hpp): range crop and voxel downsampling on
// the GPU, with the CPU filter's cells, cell order and errors.
//
// Per call, on the filter's own stream:
//   1. upload xyz (AoS, as the cloud stores it) and intensities from pinned staging;
//   1b. with times and a twist, deskew_kernel moves each point to the scan's reference time
//      (math::deskew_point, the CPU preprocessing's function);
//   2. crop_kernel: each point's range test (math::within_range, the CPU's arithmetic) as
//      a flag, and per block the bounds of the kept points; box_kernel reduces the blocks;
//   3. DeviceSelect::Flagged compacts the kept point indices, order kept;
//   4. read back the kept count and bounds (synchronization 1): the host builds the
//      lattice with detail::voxel_lattice, exactly as voxel_downsample, which also throws
//      voxel_downsample's errors;
//   5. key_kernel: each kept point's cell index (math::cell_index, 32- or 64-bit as the
//      lattice says);
//   6. DeviceRadixSort::SortPairs of (cell, point index) over the lattice's key bits; a
//      radix sort is stable, so the points of a cell stay in input order;
//   7. gather_sorted_kernel: the points and intensities in sorted order (contiguous for the
//      sums) and a flag at the first point of every cell; DeviceSelect::Flagged turns the
//      flags into the cells' start offsets and counts the cells;
//   8. centroid_kernel: one thread per cell sums its points one after another in float
//      (input order: a fixed order, so the same scan gives the same bits every run) and
//      divides by the count, as the CPU does;
//   9. read back the cell count (synchronization 2), then the centroids (3).
// Times, when given, follow the points: gathered in sorted order and averaged per cell in
// double (gather_channel_kernel, channel_mean_kernel), as the CPU filter averages them.
// Leaf 0 (crop only) stops after step 4 and reads back the kept points in input order.
// A cell's sum is one thread's loop: cheap for the localizer's leaves, but a leaf of tens of
// metres puts thousands of points in one loop; a fixed-order tree per cell would shorten
// it, at the price of summing in an order the CPU does not use.
// The lattice and the output order are the CPU's by construction (same host code for the
// lattice, same per-point code for the cell index, output in ascending cell index).
#include "cuda_filter.hpp"

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_scope.hpp"
#include "voxel_filter_kernels.cuh"

#include "../filters/voxel_lattice.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace ndtcu::detail {
namespace {

// Point counts, offsets and thread indices are ints on the device (and CUB's selected
// counts); the last block's thread indices must not pass INT_MAX either.
constexpr std::size_t kMaxPoints = static_cast<std::size_t>(std::numeric_limits<int>::max() - kBlock);

static_assert(sizeof(Eigen::Vector3f) == sizeof(float3), "Vector3f and float3 must share a layout");

}  // namespace

struct CudaScanFilter::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  // Set while work may be queued on the stream: a call that threw midway leaves it set,
  // and the next call waits for the stream before it reuses (or frees) a buffer.
  bool in_flight = false;
  CudaFilterTelemetry telemetry;

  // Every buffer is sized by the input points (n) and only grows.
  struct Buffers {
    DeviceBuffer<float3> points, sorted_points, out_points;
    DeviceBuffer<float> intensity, sorted_intensity, out_intensity;
    DeviceBuffer<float> time, sorted_time, out_time;  // per-point times, when the scan has them
    DeviceBuffer<unsigned char> flags;  // range flags, then cell-start flags
    DeviceBuffer<std::uint32_t> kept_index, sorted_index, run_start;
    DeviceBuffer<std::uint64_t> keys, sorted_keys;  // 32-bit keys use the first half
    DeviceBuffer<Box> block_boxes;
    DeviceBuffer<Summary> summary;
    DeviceBuffer<unsigned char> temp;  // CUB's temporary storage
    PinnedBuffer<float3> up_points, down_points;
    PinnedBuffer<float> up_intensity, down_intensity, up_time, down_time;
    PinnedBuffer<Summary> down_summary;
  };
  std::unique_ptr<Buffers> buf;

  ~Impl() {
    // Free on the filter's device, after its queued work (a call that threw midway).
    int previous = -1;
    if (stream) {
      int current = 0;
      if (cudaGetDevice(&current) == cudaSuccess && current != device && cudaSetDevice(device) == cudaSuccess) {
        previous = current;
      }
      cudaStreamSynchronize(stream);
    }
    buf.reset();
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
    if (previous >= 0) cudaSetDevice(previous);
    (void)cudaGetLastError();
  }

  // The stream is idle when this returns (so buffers may grow).
  void settle() {
    if (in_flight) {
      NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
      in_flight = false;
    }
  }

  // Grows `temp` to at least `bytes`; the stream must be idle.
  void reserve_temp(std::size_t bytes) {
    buf->temp.resize_with_headroom(bytes);
  }

  // Reads the summary back and waits for the stream.
  const Summary& read_summary() {
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(buf->down_summary.data(), buf->summary.data(), sizeof(Summary),
                                     cudaMemcpyDeviceToHost, stream));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
    in_flight = false;
    return *buf->down_summary.data();
  }

  // Steps 5-9 for a lattice with keys of type Key: returns the number of cells, with the
  // centroids (and mean intensities) in out_points (out_intensity).
  template <typename Key, typename Lattice>
  int cells(const Lattice& lattice, int key_bits, int kept, bool with_intensity, bool with_time) {
    Buffers& b = *buf;
    Key* keys = reinterpret_cast<Key*>(b.keys.data());
    Key* sorted_keys = reinterpret_cast<Key*>(b.sorted_keys.data());
    const thrust::counting_iterator<std::uint32_t> positions(0);
    std::size_t sort_bytes = 0, select_bytes = 0;
    NDTCU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, sorted_keys, b.kept_index.data(),
                                                     b.sorted_index.data(), kept, 0, key_bits, stream));
    NDTCU_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, select_bytes, positions, b.flags.data(), b.run_start.data(),
                                                &b.summary.data()->leaves, kept, stream));
    reserve_temp(std::max(sort_bytes, select_bytes));  // the stream is idle after the first read-back

    const float* intensity = with_intensity ? b.intensity.data() : nullptr;
    float* sorted_intensity = with_intensity ? b.sorted_intensity.data() : nullptr;
    const int blocks = grid_blocks(static_cast<std::size_t>(kept), kBlock);
    in_flight = true;
    key_kernel<<<blocks, kBlock, 0, stream>>>(b.points.data(), b.kept_index.data(), kept, lattice, keys);
    NDTCU_CUDA_CHECK_LAUNCH();
    NDTCU_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.temp.data(), sort_bytes, keys, sorted_keys,
                                                     b.kept_index.data(), b.sorted_index.data(), kept, 0, key_bits,
                                                     stream));
    gather_sorted_kernel<<<blocks, kBlock, 0, stream>>>(sorted_keys, b.sorted_index.data(), b.points.data(),
                                                        intensity, kept, b.sorted_points.data(), sorted_intensity,
                                                        b.flags.data());
    NDTCU_CUDA_CHECK_LAUNCH();
    NDTCU_CUDA_CHECK(cub::DeviceSelect::Flagged(b.temp.data(), select_bytes, positions, b.flags.data(),
                                                b.run_start.data(), &b.summary.data()->leaves, kept, stream));
    centroid_kernel<<<blocks, kBlock, 0, stream>>>(b.sorted_points.data(), sorted_intensity, b.run_start.data(),
                                                   b.summary.data(), kept, b.out_points.data(),
                                                   with_intensity ? b.out_intensity.data() : nullptr);
    NDTCU_CUDA_CHECK_LAUNCH();
    if (with_time) {
      gather_channel_kernel<<<blocks, kBlock, 0, stream>>>(b.time.data(), b.sorted_index.data(), kept,
                                                           b.sorted_time.data());
      NDTCU_CUDA_CHECK_LAUNCH();
      channel_mean_kernel<<<blocks, kBlock, 0, stream>>>(b.sorted_time.data(), b.run_start.data(), b.summary.data(),
                                                         kept, b.out_time.data());
      NDTCU_CUDA_CHECK_LAUNCH();
    }
    return read_summary().leaves;
  }

  // Downloads the first `count` output points (and intensities) into `out`.
  void download(std::size_t count, bool with_intensity, bool with_time, PointCloud& out) {
    Buffers& b = *buf;
    in_flight = true;
    b.out_points.download(b.down_points.data(), count, stream);
    if (with_intensity) b.out_intensity.download(b.down_intensity.data(), count, stream);
    if (with_time) b.out_time.download(b.down_time.data(), count, stream);
    NDTCU_CUDA_CHECK(cudaEventRecord(stop, stream));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
    in_flight = false;
    out.points.resize(count);
    if (count) std::memcpy(static_cast<void*>(out.points.data()), b.down_points.data(), count * sizeof(float3));
    if (with_intensity) out.intensity.assign(b.down_intensity.data(), b.down_intensity.data() + count);
    if (with_time) out.time.assign(b.down_time.data(), b.down_time.data() + count);
    float ms = 0.f;
    NDTCU_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    telemetry.gpu_ms += ms;
  }
};

CudaScanFilter::CudaScanFilter(int device) : impl_(std::make_unique<Impl>()) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw CudaError("CUDA scan filter unavailable: " + why);
  int count = 0;
  NDTCU_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0) NDTCU_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= count) {
    throw CudaError("CUDA scan filter: no device " + std::to_string(device) + " (" + std::to_string(count) +
                    " present)");
  }
  DeviceScope scope(device);
  Impl& m = *impl_;
  m.device = device;
  NDTCU_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  NDTCU_CUDA_CHECK(cudaEventCreate(&m.start));
  NDTCU_CUDA_CHECK(cudaEventCreate(&m.stop));
  m.buf = std::make_unique<Impl::Buffers>();
  m.buf->summary.resize_discard(1);
  // The summary is read back after the crop, before the leaf count is written: zero it
  // once, so no read-back copies uninitialized memory.
  NDTCU_CUDA_CHECK(cudaMemsetAsync(m.buf->summary.data(), 0, sizeof(Summary), m.stream));
  m.buf->down_summary.reserve(1);
}

CudaScanFilter::~CudaScanFilter() = default;

int CudaScanFilter::device() const noexcept { return impl_->device; }
const CudaFilterTelemetry& CudaScanFilter::telemetry() const noexcept { return impl_->telemetry; }

PointCloud CudaScanFilter::crop_and_downsample(PointCloudView scan, const float* intensity, double min_range,
                                               double max_range, double leaf, const float* time,
                                               const math::SweepPath* path) {
  // The CPU filters' argument checks, in their order (crop, then leaf); 0 is "crop only".
  check_crop_range(min_range, max_range);
  if (leaf != 0.0) check_voxel_leaf(leaf);
  Impl& m = *impl_;
  ++m.telemetry.calls;
  m.telemetry.points_in += scan.size();
  PointCloud out;
  out.origin = scan.origin;
  const std::size_t n = scan.size();
  if (n == 0) return out;
  if (n > kMaxPoints) {
    throw Error("CUDA scan filter: " + std::to_string(n) + " points are more than it indexes (" +
                std::to_string(kMaxPoints) + ")");
  }
  const bool with_intensity = intensity != nullptr;
  const bool with_time = time != nullptr;
  const int n_int = static_cast<int>(n);
  const int blocks = grid_blocks(n, kBlock);

  DeviceScope scope(m.device);
  m.settle();
  Impl::Buffers& b = *m.buf;
  // Sizes for this input (the stream is idle: growing frees nothing in use), with headroom:
  // a sequence whose scans grow a little at a time would otherwise reallocate every frame.
  b.points.resize_with_headroom(n);
  b.sorted_points.resize_with_headroom(n);
  b.out_points.resize_with_headroom(n);
  if (with_intensity) {
    b.intensity.resize_with_headroom(n);
    b.sorted_intensity.resize_with_headroom(n);
    b.out_intensity.resize_with_headroom(n);
    b.up_intensity.reserve_with_headroom(n);
    b.down_intensity.reserve_with_headroom(n);
  }
  if (with_time) {
    b.time.resize_with_headroom(n);
    b.sorted_time.resize_with_headroom(n);
    b.out_time.resize_with_headroom(n);
    b.up_time.reserve_with_headroom(n);
    b.down_time.reserve_with_headroom(n);
  }
  b.flags.resize_with_headroom(n);
  b.kept_index.resize_with_headroom(n);
  b.sorted_index.resize_with_headroom(n);
  b.run_start.resize_with_headroom(n);
  b.keys.resize_with_headroom(n);
  b.sorted_keys.resize_with_headroom(n);
  b.block_boxes.resize_with_headroom(static_cast<std::size_t>(blocks));
  b.up_points.reserve_with_headroom(n);
  b.down_points.reserve_with_headroom(n);
  const thrust::counting_iterator<std::uint32_t> positions(0);
  std::size_t select_bytes = 0;
  NDTCU_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, select_bytes, positions, b.flags.data(), b.kept_index.data(),
                                              &b.summary.data()->kept, n_int, m.stream));
  m.reserve_temp(select_bytes);

  // 1-3: upload, crop and bounds, compaction of the kept indices.
  std::memcpy(b.up_points.data(), static_cast<const void*>(scan.points), n * sizeof(float3));
  if (with_intensity) std::memcpy(b.up_intensity.data(), intensity, n * sizeof(float));
  if (with_time) std::memcpy(b.up_time.data(), time, n * sizeof(float));
  m.in_flight = true;
  NDTCU_CUDA_CHECK(cudaEventRecord(m.start, m.stream));
  NDTCU_CUDA_CHECK(
      cudaMemcpyAsync(b.points.data(), b.up_points.data(), n * sizeof(float3), cudaMemcpyHostToDevice, m.stream));
  if (with_intensity) {
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(b.intensity.data(), b.up_intensity.data(), n * sizeof(float),
                                     cudaMemcpyHostToDevice, m.stream));
  }
  if (with_time) {
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(b.time.data(), b.up_time.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                                     m.stream));
    if (path) {  // 1b: each point to the reference time, before the crop (as on the CPU)
      deskew_kernel<<<blocks, kBlock, 0, m.stream>>>(b.points.data(), b.time.data(), n_int, *path);
      NDTCU_CUDA_CHECK_LAUNCH();
    }
  }
  const double min2 = min_range * min_range, max2 = max_range * max_range;  // as crop_range
  crop_kernel<<<blocks, kBlock, 0, m.stream>>>(b.points.data(), n_int, scan.origin.x(), scan.origin.y(),
                                               scan.origin.z(), min2, max2, b.flags.data(), b.block_boxes.data());
  NDTCU_CUDA_CHECK_LAUNCH();
  box_kernel<<<1, kBlock, 0, m.stream>>>(b.block_boxes.data(), blocks, b.summary.data());
  NDTCU_CUDA_CHECK_LAUNCH();
  NDTCU_CUDA_CHECK(cub::DeviceSelect::Flagged(b.temp.data(), select_bytes, positions, b.flags.data(),
                                              b.kept_index.data(), &b.summary.data()->kept, n_int, m.stream));
  // 4: the kept count and the bounds.
  const Summary cropped = m.read_summary();
  const int kept = cropped.kept;
  if (kept == 0) return out;  // an empty cloud, as voxel_downsample of an empty crop

  std::size_t count = 0;
  if (leaf == 0.0) {
    m.in_flight = true;
    gather_kept_kernel<<<grid_blocks(static_cast<std::size_t>(kept), kBlock), kBlock, 0, m.stream>>>(
        b.points.data(), with_intensity ? b.intensity.data() : nullptr, b.kept_index.data(), kept,
        b.out_points.data(), with_intensity ? b.out_intensity.data() : nullptr);
    NDTCU_CUDA_CHECK_LAUNCH();
    if (with_time) {
      gather_channel_kernel<<<grid_blocks(static_cast<std::size_t>(kept), kBlock), kBlock, 0, m.stream>>>(
          b.time.data(), b.kept_index.data(), kept, b.out_time.data());
      NDTCU_CUDA_CHECK_LAUNCH();
    }
    count = static_cast<std::size_t>(kept);
  } else {
    // The lattice over the kept points' bounds, and voxel_downsample's errors, from the
    // CPU filter's own code.
    const VoxelLattice lattice = voxel_lattice(cropped.box.lo, cropped.box.hi, leaf);
    const int leaves = lattice.pcl_index
                           ? m.cells<std::uint32_t>(lattice.pcl, lattice.key_bits, kept, with_intensity, with_time)
                           : m.cells<std::uint64_t>(lattice.wide, lattice.key_bits, kept, with_intensity, with_time);
    if (leaves < 1 || leaves > kept) {
      throw CudaError("CUDA scan filter: the device counted " + std::to_string(leaves) + " cells for " +
                      std::to_string(kept) + " points");
    }
    count = static_cast<std::size_t>(leaves);
  }
  m.download(count, with_intensity, with_time, out);
  m.telemetry.points_out += count;
  return out;
}

}  // namespace ndtcu::detail
