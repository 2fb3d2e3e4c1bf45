// The tiled map's device twin (src/cuda/device_tiled_map.hpp): voxels in slots, written a
// publish at a time, and a lookup rebuilt on the device into one of two buffers.
#include "device_tiled_map.hpp"

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "tiled_map_kernels.cuh"
#include "voxel_lookup_build.cuh"

#include "../log.hpp"
#include "../map/dense_voxel_index.hpp"
#include "../nvtx.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace ndtcu::detail {
namespace {

constexpr int kThreads = 256;

// The slots' arrays: what VoxelGridView points into, and each slot's key.
struct SlotArrays {
  DeviceBuffer<double> mean[3], icov[6];
  DeviceBuffer<float> centroid[3];
  DeviceBuffer<std::uint64_t> keys;  // kEmptyKey for a free slot
  std::size_t capacity = 0;

  std::size_t bytes() const { return capacity * (9 * sizeof(double) + 3 * sizeof(float) + sizeof(std::uint64_t)); }
};

SlotPointers pointers(SlotArrays& a) {
  SlotPointers p{};
  for (int i = 0; i < 3; ++i) {
    p.mean[i] = a.mean[i].data();
    p.centroid[i] = a.centroid[i].data();
  }
  for (int e = 0; e < 6; ++e) p.icov[e] = a.icov[e].data();
  p.keys = a.keys.data();
  return p;
}

// One lookup buffer: the hash table or the dense index of a version.
struct LookupBuffers {
  DeviceBuffer<std::uint64_t> table_keys;
  DeviceBuffer<std::int32_t> table_values, dense;

  std::size_t bytes() const {
    return table_keys.capacity() * sizeof(std::uint64_t) + (table_values.capacity() + dense.capacity()) * sizeof(std::int32_t);
  }
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct DeviceTiledMap::Impl {
  double resolution;
  float inverse_resolution;
  float radius_squared;
  std::size_t dense_budget;
  cudaStream_t stream = nullptr;
  cudaEvent_t released = nullptr;  // recorded on the consumer's stream where it stopped reading a version

  // Owner's state (publish's thread).
  std::shared_ptr<SlotArrays> arrays = std::make_shared<SlotArrays>();
  LookupBuffers lookups[2];
  std::unordered_map<std::uint64_t, std::uint32_t> slot_of;  // every voxel of the newest version
  std::vector<std::uint32_t> free_list;                       // slots no version reads
  std::vector<std::pair<std::uint64_t, std::uint32_t>> pending;  // (version that freed it, slot)
  std::vector<std::pair<std::uint64_t, std::shared_ptr<SlotArrays>>> retired;  // (version that replaced them, arrays)
  std::uint32_t used_slots = 0;  // slots [0, used_slots) have been handed out
  PinnedBuffer<SlotWrite> pinned_writes;
  PinnedBuffer<SlotKey> pinned_keys;
  PinnedBuffer<StagePair> pinned_stage;
  PinnedBuffer<int> pinned_box;
  DeviceBuffer<SlotWrite> writes;
  DeviceBuffer<SlotKey> keys;
  DeviceBuffer<StagePair> stage_pairs;
  DeviceBuffer<int> box;
  bool broken = false;  // a device error left the slots and the record apart

  // Shared with the consumer.
  mutable std::mutex mutex;
  DeviceMapVersion live;       // what the consumer reads (or would: the newest, when none is bound)
  DeviceMapVersion published;  // the newest complete version
  int live_set = 0;            // lookup buffer of `live`
  int published_set = 0;
  std::shared_ptr<SlotArrays> live_arrays, published_arrays;  // kept alive while read
  const void* consumer = nullptr;
  std::uint64_t next_version = 1;

  Impl(double r, float inverse, float radius_sq, std::size_t budget)
      : resolution(r),
        inverse_resolution(inverse), radius_squared(radius_sq), dense_budget(budget) {
    NDTCU_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    NDTCU_CUDA_CHECK(cudaEventCreateWithFlags(&released, cudaEventDisableTiming));
    NDTCU_CUDA_CHECK(cudaEventRecord(released, stream));
    box.resize_discard(6);
    pinned_box.reserve(6);
  }

  ~Impl() {
    if (stream) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    if (released) {
      cudaEventSynchronize(released);
      cudaEventDestroy(released);
    }
  }

  // Slots of `n` more voxels: free ones first, then never used ones.
  std::uint32_t take_slot() {
    if (!free_list.empty()) {
      const std::uint32_t s = free_list.back();
      free_list.pop_back();
      return s;
    }
    return used_slots++;
  }

  // The arrays with room for `needed` slots: a growth copies every slot on the device into
  // new arrays (half as large again), the old ones kept until no version reads them.
  bool ensure_capacity(std::size_t needed, std::uint64_t version) {
    if (needed <= arrays->capacity) return false;
    auto grown = std::make_shared<SlotArrays>();
    const std::size_t capacity = std::max<std::size_t>(4096, needed + needed / 2);
    for (int a = 0; a < 3; ++a) {
      grown->mean[a].resize_discard(capacity);
      grown->centroid[a].resize_discard(capacity);
    }
    for (int e = 0; e < 6; ++e) grown->icov[e].resize_discard(capacity);
    grown->keys.resize_discard(capacity);
    grown->capacity = capacity;
    const std::size_t old = arrays->capacity;
    // The statistics of the slots handed out so far (each written when it was), and every
    // key (free ones preset to kEmptyKey): no byte never written is copied.
    const auto copy = [&](auto& to, const auto& from, std::size_t n) {
      if (n == 0) return;
      NDTCU_CUDA_CHECK(
          cudaMemcpyAsync(to.data(), from.data(), n * sizeof(*from.data()), cudaMemcpyDeviceToDevice, stream));
    };
    for (int a = 0; a < 3; ++a) {
      copy(grown->mean[a], arrays->mean[a], used_slots);
      copy(grown->centroid[a], arrays->centroid[a], used_slots);
    }
    for (int e = 0; e < 6; ++e) copy(grown->icov[e], arrays->icov[e], used_slots);
    copy(grown->keys, arrays->keys, old);
    NDTCU_CUDA_CHECK(cudaMemsetAsync(grown->keys.data() + old, 0xff, (capacity - old) * sizeof(std::uint64_t), stream));
    retired.emplace_back(version, std::move(arrays));
    arrays = std::move(grown);
    return true;
  }

  /// The lookup of the used slots of the newest arrays, built on the stream into lookup
  /// buffer `target_set` (the one no version in use reads): a dense index when the occupied
  /// box fits the budget, the hash otherwise (`lookup` says which). Returns the view.
  math::VoxelGridView build_lookup(int target_set, VoxelLookup& lookup);
};

math::VoxelGridView DeviceTiledMap::Impl::build_lookup(int target_set, VoxelLookup& lookup) {
  SlotArrays& a = *arrays;
  const std::size_t voxels = slot_of.size();
  const std::size_t slots = used_slots;
  LookupBuffers& l = lookups[target_set];
  const double* mean[3] = {a.mean[0].data(), a.mean[1].data(), a.mean[2].data()};
  const float* centroid[3] = {a.centroid[0].data(), a.centroid[1].data(), a.centroid[2].data()};
  const double* icov[6];
  for (int e = 0; e < 6; ++e) icov[e] = a.icov[e].data();
  math::VoxelGridView g = math::voxel_grid_view(voxels, mean, icov, centroid, inverse_resolution, radius_squared);
  LatticeBox occupied;
  if (voxels) {
    int* hb = pinned_box.data();
    hb[0] = hb[1] = hb[2] = INT_MAX;
    hb[3] = hb[4] = hb[5] = INT_MIN;
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(box.data(), hb, 6 * sizeof(int), cudaMemcpyHostToDevice, stream));
    box_kernel<<<grid_blocks(slots, kThreads), kThreads, 0, stream>>>(a.keys.data(), slots, box.data());
    NDTCU_CUDA_CHECK_LAUNCH();
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(hb, box.data(), 6 * sizeof(int), cudaMemcpyDeviceToHost, stream));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < 3; ++i) {
      occupied.min[i] = hb[i];
      occupied.dims[i] = static_cast<std::int64_t>(hb[3 + i]) - hb[i] + 1;
    }
  }
  const bool dense = voxels && occupied.bytes() <= static_cast<double>(dense_budget);
  if (dense) {
    const auto cells = static_cast<std::size_t>(occupied.cells());
    l.dense.resize_with_headroom(cells);
    NDTCU_CUDA_CHECK(cudaMemsetAsync(l.dense.data(), 0xff, cells * sizeof(std::int32_t), stream));  // -1
    DenseVoxelIndex::attach(g, l.dense.data(), occupied);
    scatter_dense_kernel<<<grid_blocks(slots, kThreads), kThreads, 0, stream>>>(a.keys.data(), slots,
                                                                                 l.dense.data(), g);
    NDTCU_CUDA_CHECK_LAUNCH();
    lookup = VoxelLookup::Dense;
  } else {
    const std::size_t capacity = math::hash_capacity(voxels);
    l.table_keys.resize_with_headroom(capacity);
    l.table_values.resize_with_headroom(capacity);
    NDTCU_CUDA_CHECK(cudaMemsetAsync(l.table_keys.data(), 0xff, capacity * sizeof(std::uint64_t), stream));
    NDTCU_CUDA_CHECK(cudaMemsetAsync(l.table_values.data(), 0xff, capacity * sizeof(std::int32_t), stream));
    if (slots) {
      insert_keys_kernel<<<grid_blocks(slots, kThreads), kThreads, 0, stream>>>(
          a.keys.data(), slots, l.table_keys.data(), l.table_values.data(), capacity - 1);
      NDTCU_CUDA_CHECK_LAUNCH();
    }
    math::attach_hash(g, l.table_keys.data(), l.table_values.data(), capacity);
    lookup = VoxelLookup::Hash;
  }
  return g;
}

DeviceTiledMap::DeviceTiledMap(double resolution, float inverse_resolution, float radius_squared,
                               std::size_t dense_budget_bytes)
    : impl_(std::make_unique<Impl>(resolution, inverse_resolution, radius_squared, dense_budget_bytes)) {}

DeviceTiledMap::~DeviceTiledMap() = default;

std::vector<std::uint32_t> DeviceTiledMap::stage(const DeviceOccupiedCells& from,
                                                 const std::vector<std::uint32_t>& cells) {
  Impl& m = *impl_;
  if (m.broken) throw CudaError("tiled map: its device map was left unusable by an earlier device error");
  std::vector<std::uint32_t> slots;
  if (cells.empty()) return slots;
  slots.reserve(cells.size());
  m.pinned_stage.reserve_with_headroom(cells.size());
  m.stage_pairs.resize_with_headroom(cells.size());
  // New arrays, if they must grow, are first read by the next version.
  const std::size_t fresh = cells.size() > m.free_list.size() ? cells.size() - m.free_list.size() : 0;
  m.ensure_capacity(static_cast<std::size_t>(m.used_slots) + fresh, m.next_version);
  try {
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::uint32_t slot = m.take_slot();
      m.pinned_stage.data()[i] = StagePair{cells[i], slot};
      slots.push_back(slot);
    }
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.stage_pairs.data(), m.pinned_stage.data(), cells.size() * sizeof(StagePair),
                                     cudaMemcpyHostToDevice, m.stream));
    stage_slots_kernel<<<grid_blocks(cells.size(), kThreads), kThreads, 0, m.stream>>>(
        from.stats, m.stage_pairs.data(), cells.size(), pointers(*m.arrays));
    NDTCU_CUDA_CHECK_LAUNCH();
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  } catch (const CudaError&) {
    m.broken = true;
    throw;
  }
  return slots;
}

void DeviceTiledMap::release_staged(const std::vector<std::uint32_t>& slots) {
  // In no lookup (their keys stayed kEmptyKey): free at once.
  impl_->free_list.insert(impl_->free_list.end(), slots.begin(), slots.end());
}

DevicePublishStats DeviceTiledMap::publish(const std::vector<std::uint64_t>& erased,
                                           const std::vector<VoxelWrite>& written,
                                           const std::vector<VoxelAdopt>& adopted) {
  NDTCU_NVTX_RANGE("tiled map publish");
  Impl& m = *impl_;
  if (m.broken) throw CudaError("tiled map: its device map was left unusable by an earlier device error");
  const auto t0 = std::chrono::steady_clock::now();
  DevicePublishStats st;
  std::uint64_t live_version = 0;
  int target_set = 0;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    // A version published but not taken yet is withdrawn: its lookup buffer is the one
    // written now, and the consumer keeps the version it reads.
    if (m.published.version != m.live.version) {
      m.published = m.live;
      m.published_set = m.live_set;
      m.published_arrays = m.live_arrays;
    }
    // Nothing below is written before the consumer's stream has passed its last switch.
    NDTCU_CUDA_CHECK(cudaStreamWaitEvent(m.stream, m.released, 0));
    live_version = m.live.version;
    target_set = m.live.version == 0 ? 0 : 1 - m.live_set;
    st.version = m.next_version++;
  }
  // Slots and arrays that only versions before the live one read are free again.
  std::size_t kept = 0;
  for (const auto& p : m.pending) {
    if (p.first <= live_version) m.free_list.push_back(p.second);
    else m.pending[kept++] = p;
  }
  m.pending.resize(kept);
  m.retired.erase(std::remove_if(m.retired.begin(), m.retired.end(),
                                 [&](const auto& r) { return r.first <= live_version; }),
                  m.retired.end());

  bool recorded = false;  // the record of slots has changed
  try {
    // Staging first, then the growth: running out of memory in either leaves the record
    // and the device as they were.
    const std::size_t key_writes = erased.size() + written.size() + 2 * adopted.size();
    m.pinned_keys.reserve_with_headroom(std::max<std::size_t>(1, key_writes));
    m.pinned_writes.reserve_with_headroom(std::max<std::size_t>(1, written.size()));
    m.keys.resize_with_headroom(std::max<std::size_t>(1, key_writes));
    m.writes.resize_with_headroom(std::max<std::size_t>(1, written.size()));
    // Every written voxel takes a slot (a rewritten one too: its old slot is still read by
    // the version in use): free ones first, then new ones at the end.
    const std::size_t fresh = written.size() > m.free_list.size() ? written.size() - m.free_list.size() : 0;
    st.grown = m.ensure_capacity(static_cast<std::size_t>(m.used_slots) + fresh, st.version);
    // A removed or replaced voxel's old slot is freed: reused once this version is the
    // consumer's.
    recorded = true;
    std::size_t n_keys = 0;
    const auto retire = [&](std::uint32_t slot) {
      m.pinned_keys.data()[n_keys++] = SlotKey{math::kEmptyKey, slot, 0};
      m.pending.emplace_back(st.version, slot);
    };
    for (const std::uint64_t key : erased) {
      const auto it = m.slot_of.find(key);
      if (it == m.slot_of.end()) continue;
      retire(it->second);
      m.slot_of.erase(it);
      ++st.erased;
    }
    const auto place = [&](std::uint64_t key, std::uint32_t slot) {
      auto [it, inserted] = m.slot_of.try_emplace(key, slot);
      if (!inserted) {
        retire(it->second);
        it->second = slot;
      }
    };
    for (const VoxelAdopt& a : adopted) {
      place(a.key, a.slot);
      m.pinned_keys.data()[n_keys++] = SlotKey{a.key, a.slot, 0};
    }
    st.adopted = adopted.size();
    for (std::size_t i = 0; i < written.size(); ++i) {
      const VoxelWrite& w = written[i];
      const std::uint32_t slot = m.take_slot();
      place(w.key, slot);
      SlotWrite& out = m.pinned_writes.data()[i];
      out.key = w.key;
      out.slot = slot;
      out.pad = 0;
      out.stats = w.stats;
    }
    st.written = written.size();
    SlotArrays& a = *m.arrays;
    if (n_keys) {
      NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.keys.data(), m.pinned_keys.data(), n_keys * sizeof(SlotKey),
                                       cudaMemcpyHostToDevice, m.stream));
      set_keys_kernel<<<grid_blocks(n_keys, kThreads), kThreads, 0, m.stream>>>(m.keys.data(), n_keys, a.keys.data());
      NDTCU_CUDA_CHECK_LAUNCH();
    }
    if (!written.empty()) {
      NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.writes.data(), m.pinned_writes.data(), written.size() * sizeof(SlotWrite),
                                       cudaMemcpyHostToDevice, m.stream));
      write_slots_kernel<<<grid_blocks(written.size(), kThreads), kThreads, 0, m.stream>>>(m.writes.data(),
                                                                                           written.size(), pointers(a));
      NDTCU_CUDA_CHECK_LAUNCH();
    }
    st.bytes_up = n_keys * sizeof(SlotKey) + written.size() * sizeof(SlotWrite);

    // The lookup of every used slot, into the buffer no version in use reads.
    const std::size_t voxels = m.slot_of.size();
    const math::VoxelGridView g = m.build_lookup(target_set, st.lookup);
    // Complete before it is published: the consumer switches without waiting, and the
    // pinned staging is free for the next publish.
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    st.voxels = voxels;
    st.slots = a.capacity;
    DeviceMapVersion v;
    v.grid = g;
    v.version = st.version;
    v.voxels = voxels;
    v.lookup = st.lookup;
    std::lock_guard<std::mutex> lock(m.mutex);
    m.published = v;
    m.published_set = target_set;
    m.published_arrays = m.arrays;
    if (!m.consumer) {  // nobody reads: the newest is live at once
      m.live = v;
      m.live_set = target_set;
      m.live_arrays = m.arrays;
    }
  } catch (const CudaError&) {
    // After the record changed, the device may not hold what it says: no later publish.
    if (recorded) m.broken = true;
    throw;
  }
  st.ms = ms_since(t0);
  log().debug("tiled map: device version {}: {} voxels ({} sent up, {} staged on the device, {} removed, {} lookup) in "
              "{:.2f} ms",
              st.version, st.voxels, st.written, st.adopted, st.erased, st.lookup == VoxelLookup::Dense ? "dense" : "hash",
              st.ms);
  return st;
}

bool DeviceTiledMap::acquire(const void* consumer, CUstream_st* stream, std::uint64_t seen, DeviceMapVersion& out) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  if (m.consumer && m.consumer != consumer) {
    throw Error(
        "tiled map: its device map is in use by another CUDA aligner (one at a time: the other leaves it when it is "
        "given another target or destroyed)");
  }
  m.consumer = consumer;
  if (m.published.version != m.live.version) {
    // Where the consumer stopped reading the old version: what it queued before now.
    NDTCU_CUDA_CHECK(cudaEventRecord(m.released, stream));
    m.live = m.published;
    m.live_set = m.published_set;
    m.live_arrays = m.published_arrays;
  }
  out = m.live;
  return m.live.version != seen;
}

void DeviceTiledMap::release(const void* consumer, CUstream_st* stream) noexcept {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  if (m.consumer != consumer) return;
  cudaEventRecord(m.released, stream);
  m.consumer = nullptr;
  m.live = m.published;
  m.live_set = m.published_set;
  m.live_arrays = m.published_arrays;
}

std::vector<std::uint64_t> DeviceTiledMap::keys() const {
  std::vector<std::uint64_t> out;
  out.reserve(impl_->slot_of.size());
  for (const auto& entry : impl_->slot_of) out.push_back(entry.first);
  return out;
}

double DeviceTiledMap::resolution() const noexcept { return impl_->resolution; }

std::size_t DeviceTiledMap::voxels() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->published.voxels;
}

std::size_t DeviceTiledMap::device_bytes() const {
  const Impl& m = *impl_;
  std::size_t b = m.arrays->bytes() + m.lookups[0].bytes() + m.lookups[1].bytes() +
                  m.writes.capacity() * sizeof(SlotWrite) + m.keys.capacity() * sizeof(SlotKey) +
                  m.stage_pairs.capacity() * sizeof(StagePair);
  for (const auto& r : m.retired) b += r.second->bytes();
  return b;
}

}  // namespace ndtcu::detail
