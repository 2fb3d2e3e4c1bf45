#include "device_voxel_map.hpp"

#include "cuda_check.cuh"
#include "cuda_voxel_build.hpp"
#include "device_buffer.cuh"
#include "device_tiled_map.hpp"
#include "unpack_voxels.cuh"
#include "voxel_lookup_build.cuh"

#include "../log.hpp"
#include "../map/dense_voxel_index.hpp"
#include "../map/voxel_map_access.hpp"

#include <cstring>
#include <mutex>
#include <string>
#include <utility>

namespace ndtcu::detail {
namespace {

constexpr int kBlock = 256;

// One uploaded map: its buffers and the view of them the kernels read.
struct MapBuffers {
  DeviceBuffer<double> mean[3], icov[6];
  DeviceBuffer<float> centroid[3];
  DeviceBuffer<std::uint64_t> table_keys;
  DeviceBuffer<std::int32_t> table_values, dense;
  math::VoxelGridView grid{};
  VoxelLookup lookup = VoxelLookup::Hash;
  double resolution = 0.0;
  bool has_map = false;
};

// Where one upload's arrays go: straight up (`pinned` null), or packed into `pinned` and
// copied from there (staging; see upload_map).
class Uploader {
 public:
  Uploader(cudaStream_t stream, PinnedBuffer<unsigned char>* pinned) : stream_(stream), pinned_(pinned) {}

  static std::size_t padded(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

  template <typename T>
  void put(DeviceBuffer<T>& buffer, const T* host, std::size_t n) {
    const std::size_t size = n * sizeof(*host);
    bytes_ += size;
    if (!pinned_) {
      buffer.upload(host, n, stream_);
      return;
    }
    buffer.resize_with_headroom(n);
    if (n == 0) return;
    unsigned char* slot = pinned_->data() + offset_;
    std::memcpy(slot, host, size);
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(buffer.data(), slot, size, cudaMemcpyHostToDevice, stream_));
    offset_ += padded(size);
  }

  std::uint64_t bytes() const { return bytes_; }

 private:
  static constexpr std::size_t kAlign = 256;
  cudaStream_t stream_;
  PinnedBuffer<unsigned char>* pinned_;
  std::size_t offset_ = 0;
  std::uint64_t bytes_ = 0;
};

// The dense index's bytes checked against the device's free memory: a forced dense index
// over a sparse, wide map can ask for more than any device has. Checked before the host
// copy is built.
void check_dense_fits(const LatticeBox& box) {
  std::size_t free_b = 0, total_b = 0;
  NDTCU_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (box.bytes() > double(free_b)) {
    throw CudaError("dense voxel index of " + std::to_string(static_cast<unsigned long long>(box.cells())) +
                    " cells needs " + std::to_string(static_cast<unsigned long long>(box.bytes())) +
                    " bytes, the device has " + std::to_string(free_b) + " of " + std::to_string(total_b) +
                    " bytes free (use the hash lookup)");
  }
}

// The voxels of `cells` (a GPU build's, `nv` of them) into `d`'s arrays, and its hash
// table of `capacity` slots built on the device.
void copy_cells(MapBuffers& d, const DeviceVoxelCells& cells, std::size_t nv, std::size_t capacity,
                cudaStream_t stream) {
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
    unpack_voxels_kernel<<<grid_blocks(nv, kBlock), kBlock, 0, stream>>>(cells.results, nv, out);
    NDTCU_CUDA_CHECK_LAUNCH();
    insert_keys_kernel<<<grid_blocks(nv, kBlock), kBlock, 0, stream>>>(cells.keys, nv, d.table_keys.data(),
                                                                       d.table_values.data(), capacity - 1);
    NDTCU_CUDA_CHECK_LAUNCH();
  }
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
std::uint64_t upload_map(MapBuffers& d, const VoxelMap& map, VoxelLookup lookup, std::size_t dense_budget_bytes,
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
  bool use_dense = lookup == VoxelLookup::Dense || (lookup == VoxelLookup::Auto && box.bytes() <= dense_budget_bytes);
  if (nv == 0) use_dense = false;
  DenseVoxelIndex index;
  if (use_dense) {
    check_dense_fits(box);
    if (!cells) index = DenseVoxelIndex::build(map, box);
  }
  const VoxelHashTable table = voxel_hash_table(map);
  Uploader up(stream, pinned);
  if (pinned) {
    const auto padded = Uploader::padded;
    const std::size_t total = 9 * padded(nv * sizeof(double)) + 3 * padded(nv * sizeof(float)) +
                              padded(table.keys.size() * sizeof(std::uint64_t)) +
                              padded(table.values.size() * sizeof(std::int32_t)) +
                              padded(index.cells.size() * sizeof(std::int32_t));
    pinned->reserve_with_headroom(total);
  }
  const std::size_t capacity = table.keys.size();
  if (cells) {
    copy_cells(d, *cells, nv, capacity, stream);
  } else {
    for (int a = 0; a < 3; ++a) {
      up.put(d.mean[a], map.mean(a).data(), nv);
      up.put(d.centroid[a], map.centroid(a).data(), nv);
    }
    for (int e = 0; e < 6; ++e) up.put(d.icov[e], map.inverse_covariance(e).data(), nv);
    up.put(d.table_keys, table.keys.data(), capacity);
    up.put(d.table_values, table.values.data(), table.values.size());
  }

  const double* mean[3] = {d.mean[0].data(), d.mean[1].data(), d.mean[2].data()};
  const float* centroid[3] = {d.centroid[0].data(), d.centroid[1].data(), d.centroid[2].data()};
  const double* icov[6];
  for (int e = 0; e < 6; ++e) icov[e] = d.icov[e].data();
  math::VoxelGridView g = math::voxel_grid_view(nv, mean, icov, centroid, map.inverse_resolution(), map.radius_squared());
  math::attach_hash(g, d.table_keys.data(), d.table_values.data(), capacity);
  if (use_dense) {
    if (cells) {
      const auto n_cells = static_cast<std::size_t>(box.cells());
      d.dense.resize_discard(n_cells);
      NDTCU_CUDA_CHECK(cudaMemsetAsync(d.dense.data(), 0xff, n_cells * sizeof(std::int32_t), stream));  // -1
      DenseVoxelIndex::attach(g, d.dense.data(), box);
      scatter_dense_kernel<<<grid_blocks(nv, kBlock), kBlock, 0, stream>>>(cells->keys, nv, d.dense.data(), g);
      NDTCU_CUDA_CHECK_LAUNCH();
    } else {
      up.put(d.dense, index.cells.data(), index.cells.size());
      DenseVoxelIndex::attach(g, d.dense.data(), box);
    }
  }
  d.lookup = use_dense ? VoxelLookup::Dense : VoxelLookup::Hash;
  d.grid = g;
  d.resolution = map.resolution();
  d.has_map = true;
  log().debug("cuda: map of {} voxels {}, {} lookup ({} cells in the occupied box)", nv,
              cells ? "taken from the device build" : "uploaded", d.lookup == VoxelLookup::Dense ? "dense" : "hash",
              box.cells());
  return up.bytes();
}

}  // namespace

struct DeviceVoxelMap::Impl {
  cudaStream_t stream = nullptr;
  // The map in use, and the next one staged on the upload stream (stage).
  MapBuffers map;
  MapBuffers staged;
  std::mutex staging_mutex;                    // guards the staged map and the upload stream
  cudaStream_t upload_stream = nullptr;        // created by the first stage
  PinnedBuffer<unsigned char> staging_host;    // the staged map's arrays, packed for the copy
  cudaEvent_t staged_done = nullptr;           // the staged map's upload finished
  cudaEvent_t map_released = nullptr;          // the last map swapped out is no longer read
  std::shared_ptr<const VoxelMap> staged_map;  // what `staged` holds, once its upload is queued (else null)
  VoxelLookup staged_lookup = VoxelLookup::Auto;
  std::size_t staged_budget = 0;
  std::uint64_t staged_bytes = 0;
  // A tiled map's device twin, when the map comes from one (use_tiled), and the version
  // of it in use.
  DeviceTiledMap* tiled = nullptr;
  DeviceMapVersion tiled_version;

  ~Impl() {
    unbind_tiled();
    if (upload_stream) {
      cudaStreamSynchronize(upload_stream);
      cudaStreamDestroy(upload_stream);
    }
    if (staged_done) cudaEventDestroy(staged_done);
    if (map_released) cudaEventDestroy(map_released);
  }

  void unbind_tiled() noexcept {
    if (!tiled) return;
    tiled->release(this, stream);
    tiled = nullptr;
    tiled_version = DeviceMapVersion{};
  }

  // The staged map when it is `map` with these lookup arguments: the stream waits (on the
  // device, not here) for its upload, the buffers swap, and the old map's are free for the
  // next staging once what is queued now has run. False when it is not staged.
  bool swap_in_staged(const VoxelMap& next, VoxelLookup lookup, std::size_t dense_budget_bytes) {
    std::lock_guard<std::mutex> lock(staging_mutex);
    if (staged_map.get() != &next || staged_lookup != lookup || staged_budget != dense_budget_bytes) return false;
    NDTCU_CUDA_CHECK(cudaStreamWaitEvent(stream, staged_done, 0));
    std::swap(map, staged);
    NDTCU_CUDA_CHECK(cudaEventRecord(map_released, stream));
    staged_map.reset();
    return true;
  }
};

DeviceVoxelMap::DeviceVoxelMap(CUstream_st* stream) : impl_(std::make_unique<Impl>()) { impl_->stream = stream; }

DeviceVoxelMap::~DeviceVoxelMap() = default;

MapChange DeviceVoxelMap::set(const VoxelMap& map, VoxelLookup lookup, std::size_t dense_budget_bytes) {
  Impl& m = *impl_;
  m.unbind_tiled();
  if (m.swap_in_staged(map, lookup, dense_budget_bytes)) return {m.staged_bytes, true};
  return {upload_map(m.map, map, lookup, dense_budget_bytes, m.stream, nullptr), false};
}

MapChange DeviceVoxelMap::set_from_device(const VoxelMap& map, const DeviceVoxelCells& cells, VoxelLookup lookup,
                                          std::size_t dense_budget_bytes) {
  Impl& m = *impl_;
  m.unbind_tiled();
  const MapChange change{upload_map(m.map, map, lookup, dense_budget_bytes, m.stream, nullptr, &cells), false};
  // The cells stay the voxelizer's: done with them before it may run again.
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return change;
}

void DeviceVoxelMap::stage(std::shared_ptr<const VoxelMap> map, VoxelLookup lookup, std::size_t dense_budget_bytes) {
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

MapChange DeviceVoxelMap::use_tiled(DeviceTiledMap& map, bool take_newer) {
  Impl& m = *impl_;
  if (m.tiled != &map) {
    m.unbind_tiled();
    DeviceMapVersion v;
    map.acquire(&m, m.stream, 0, v);  // throws while another backend is bound: nothing changed
    m.tiled = &map;
    m.tiled_version = v;
    return {0, true};
  }
  if (!take_newer) return {};
  DeviceMapVersion v;
  if (!map.acquire(&m, m.stream, m.tiled_version.version, v)) return {};
  m.tiled_version = v;
  return {0, true};
}

std::size_t DeviceVoxelMap::tiled_voxels() const noexcept { return impl_->tiled_version.voxels; }

bool DeviceVoxelMap::ready() const noexcept { return impl_->tiled || impl_->map.has_map; }

const math::VoxelGridView& DeviceVoxelMap::grid() const noexcept {
  return impl_->tiled ? impl_->tiled_version.grid : impl_->map.grid;
}

double DeviceVoxelMap::resolution() const noexcept {
  return impl_->tiled ? impl_->tiled->resolution() : impl_->map.resolution;
}

VoxelLookup DeviceVoxelMap::lookup() const noexcept {
  return impl_->tiled ? impl_->tiled_version.lookup : impl_->map.lookup;
}

}  // namespace ndtcu::detail
