#include <ndtcu/error.hpp>
#include <ndtcu/tiled_voxel_map.hpp>

#include "cuda/device_scope.hpp"
#include "cuda/device_tiled_map.hpp"
#include "log.hpp"
#include "tiled_voxel_map_access.hpp"
#include "voxel_cells.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <mutex>
#include <set>
#include <unordered_map>

namespace ndtcu {

namespace {

// One tile's cells: every occupied cell (sparse ones too: two tiles' sparse parts of a
// shared cell can make a usable voxel), in cell order, with its sums and, where it has
// min_points points, its statistics.
constexpr std::uint32_t kNoSlot = ~std::uint32_t(0);

struct TileCells : detail::OccupiedCells {
  std::size_t points = 0;
  // On the GPU, once the map has a device twin: per cell, the twin's slot that the tile's
  // own voxel was staged in, straight from the voxelizer (kNoSlot for a cell that is not
  // usable, or whose slot a publish has taken); empty otherwise.
  std::vector<std::uint32_t> staged;
  std::int32_t lo[3] = {INT_MAX, INT_MAX, INT_MAX};  // the lattice box of its cells
  std::int32_t hi[3] = {INT_MIN, INT_MIN, INT_MIN};

  void set_box() noexcept {
    for (const std::uint64_t key : keys) {
      for (int a = 0; a < 3; ++a) {
        const std::int32_t c = math::unpack_key(key, a);
        lo[a] = std::min(lo[a], c);
        hi[a] = std::max(hi[a], c);
      }
    }
  }

  bool box_holds(std::uint64_t key) const noexcept {
    for (int a = 0; a < 3; ++a) {
      const std::int32_t c = math::unpack_key(key, a);
      if (c < lo[a] || c > hi[a]) return false;
    }
    return true;
  }

  // The index of cell `key`, or -1.
  std::int64_t find(std::uint64_t key) const noexcept {
    if (!box_holds(key)) return -1;
    const auto it = std::lower_bound(keys.begin(), keys.end(), key);
    return it != keys.end() && *it == key ? it - keys.begin() : -1;
  }

  std::size_t bytes() const noexcept {
    return keys.capacity() * sizeof(std::uint64_t) + sums.capacity() * sizeof(math::VoxelSums) +
           stats.capacity() * sizeof(math::VoxelStatistics) + staged.capacity() * sizeof(std::uint32_t);
  }
};

// A cell of one tile, for the join.
struct CellRef {
  std::uint64_t key;
  std::uint32_t tile;  // the tile's rank in id order
  std::uint32_t cell;
};

// A cell's part in one tile.
struct CellPart {
  const TileCells* tile;
  std::uint32_t cell;
};

// What the device twin's record keeps of a lattice cell: how many loaded tiles hold it,
// and which one when it is one (null when not known: found again at the publish).
struct CellOwners {
  std::uint32_t count = 0;
  TileCells* only = nullptr;
  std::uint32_t cell = 0;
};

}  // namespace

struct TiledVoxelMap::Impl {
  VoxelMapOptions options;
  Eigen::Vector3d origin;
  float inverse = 0.f;
  double resolution = 0.0;
  detail::ThreadPool pool;
  bool on_gpu = false;                               // tiles voxelized on the GPU
  int cuda_device = -1;                              // ... on this device (DeviceScope)
  std::unique_ptr<detail::CudaVoxelizer> voxelizer;  // made at the first GPU tile
  std::map<std::string, TileCells> tiles;  // ordered by id: the join's tile order
  std::shared_ptr<const VoxelMap> joined;  // null after a change
  // Publishing. On the GPU, a device twin and the record of every occupied cell of the
  // loaded tiles (kept from the first publish on), with the cells changed since the last
  // publish; on the CPU, the joined map published.
  std::unique_ptr<detail::DeviceTiledMap> device;
  bool tracking = false;
  std::unordered_map<std::uint64_t, CellOwners> owners;
  std::vector<std::uint64_t> touched;
  mutable std::mutex published_mutex;  // guards the two below (read by aligners' threads)
  std::shared_ptr<const VoxelMap> published_host;
  std::uint64_t published_version = 0;

  Impl(const VoxelMapOptions& o, const Eigen::Vector3d& org)
      : options(o),
        origin(org),
        inverse(detail::inverse_resolution(o.resolution)),
        resolution(static_cast<double>(static_cast<float>(o.resolution))),
        pool(o.threads),
        on_gpu(detail::build_on_gpu(o)),
        cuda_device(on_gpu ? detail::resolve_device(o.device) : -1) {}

  // The device objects are freed on their device (the streamer's thread may end them).
  ~Impl() {
    try {
      detail::DeviceScope scope(cuda_device);
      voxelizer.reset();
      device.reset();
    } catch (...) {
      voxelizer.reset();
      device.reset();
    }
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  TileCells build(const std::string& id, const PointCloud& cloud) {
    if (id.empty()) throw Error("tiled map: a tile id must not be empty");
    // The tile's points relative to the map's origin.
    PointCloud moved;
    const PointCloud* points = &cloud;
    if (cloud.origin != origin) {
      moved.origin = origin;
      moved.points.reserve(cloud.size());
      const Eigen::Vector3d shift = cloud.origin - origin;
      for (const Eigen::Vector3f& p : cloud.points) moved.points.push_back((shift + p.cast<double>()).cast<float>());
      points = &moved;
    }
    for (std::size_t i = 0; i < points->size(); ++i) {
      if (!points->points[i].allFinite()) {
        throw Error(fmt::format("tiled map: tile '{}': point {} is not finite (relative to the map origin)", id, i));
      }
    }
    TileCells t;
    t.points = points->size();
    if (on_gpu) {
      detail::DeviceScope scope(cuda_device);
      if (!voxelizer) voxelizer = std::make_unique<detail::CudaVoxelizer>(true);
      // With a device twin, the tile's voxels go from the voxelizer into free slots of the
      // twin on the device; a publish adopts them.
      const bool stage = device && tracking;
      detail::DeviceOccupiedCells on_device;
      try {
        static_cast<detail::OccupiedCells&>(t) =
            voxelizer->occupied_cells(*points, inverse, options, stage ? &on_device : nullptr);
      } catch (const CudaError&) {
        throw;
      } catch (const Error& e) {
        throw Error(fmt::format("tiled map: tile '{}': {}", id, e.what()));
      }
      t.set_box();
      if (stage) {
        std::vector<std::uint32_t> usable;
        for (std::uint32_t c = 0; c < t.keys.size(); ++c) {
          if (t.stats[c].usable) usable.push_back(c);
        }
        const std::vector<std::uint32_t> slots = device->stage(on_device, usable);
        t.staged.assign(t.keys.size(), kNoSlot);
        for (std::size_t i = 0; i < usable.size(); ++i) t.staged[usable[i]] = slots[i];
      }
      return t;
    }
    detail::SortedCells sorted;
    try {
      sorted = detail::sort_into_cells(*points, inverse, resolution, pool);
    } catch (const Error& e) {
      throw Error(fmt::format("tiled map: tile '{}': {}", id, e.what()));
    }
    const bool autoware = options.covariance == CovarianceMode::Autoware;
    const std::size_t cells = sorted.runs.size();
    t.keys.resize(cells);
    t.sums.resize(cells);
    t.stats.resize(cells);
    constexpr std::size_t kChunk = 1024;
    pool.parallel_for((cells + kChunk - 1) / kChunk, [&](std::size_t c) {
      const std::size_t end = std::min(cells, (c + 1) * kChunk);
      for (std::size_t r = c * kChunk; r < end; ++r) {
        t.keys[r] = sorted.keyed[sorted.runs[r].first].first;
        t.sums[r] = detail::cell_sums(*points, sorted, r, autoware);
        t.stats[r].usable = false;
        if (t.sums[r].n >= static_cast<std::uint32_t>(options.min_points)) {
          math::voxel_statistics(t.sums[r], !autoware, options.eigenvalue_ratio, t.stats[r]);
        }
      }
    });
    t.set_box();
    return t;
  }

  // The joined voxel of a cell from its parts in `n` tiles (part(m) for m < n, tiles in id
  // order): a single tile's own statistics, or those of the tiles' sums merged in that
  // order. Null when the cell has fewer than min_points points; else check `usable`.
  template <typename Part>
  const math::VoxelStatistics* joined_statistics(std::size_t n, Part&& part, math::VoxelStatistics& s) const {
    const auto min_points = static_cast<std::uint32_t>(options.min_points);
    const CellPart first = part(0);
    if (n == 1) return first.tile->sums[first.cell].n < min_points ? nullptr : &first.tile->stats[first.cell];
    const bool autoware = options.covariance == CovarianceMode::Autoware;
    math::VoxelSums sums = first.tile->sums[first.cell];
    for (std::size_t m = 1; m < n; ++m) {
      const CellPart p = part(m);
      math::merge_sums(sums, p.tile->sums[p.cell], autoware);
    }
    if (sums.n < min_points) return nullptr;
    math::voxel_statistics(sums, !autoware, options.eigenvalue_ratio, s);
    return &s;
  }

  // Frees the twin's slots staged for tile `t` that no publish took. When memory runs out
  // for the list, the slots stay taken (unused device capacity), nothing else.
  void release_staged(TileCells& t) noexcept {
    if (t.staged.empty() || !device) return;
    try {
      detail::DeviceScope scope(cuda_device);
      std::vector<std::uint32_t> slots;
      for (const std::uint32_t s : t.staged) {
        if (s != kNoSlot) slots.push_back(s);
      }
      device->release_staged(slots);
    } catch (...) {
    }
    t.staged.clear();
  }

  // The device twin's record: tile `t`'s cells added (+1) or removed (-1). The record is
  // a cache of the tiles: when memory runs out it is dropped, and the next publish makes
  // it again from the tiles (and the device map's own keys).
  void track(TileCells& t, int sign) noexcept {
    if (!tracking) return;
    try {
      track_cells(t, sign);
    } catch (...) {
      drop_record();
    }
  }

  void drop_record() noexcept {
    tracking = false;
    owners = {};
    touched = {};
  }

  void track_cells(TileCells& t, int sign) {
    for (std::uint32_t c = 0; c < t.keys.size(); ++c) {
      const std::uint64_t key = t.keys[c];
      touched.push_back(key);
      if (sign > 0) {
        CellOwners& o = owners[key];
        if (o.count++ == 0) {
          o.only = &t;
          o.cell = c;
        } else {
          o.only = nullptr;
        }
      } else {
        const auto it = owners.find(key);
        if (--it->second.count == 0) owners.erase(it);
        else it->second.only = nullptr;
      }
    }
  }

  // Publishes on the device: the voxels of the cells touched since the last publish,
  // joined as map() joins them, written or removed.
  TiledVoxelMapPublish publish_device() {
    TiledVoxelMapPublish out;
    out.on_device = true;
    detail::DeviceScope scope(cuda_device);
    const auto t0 = std::chrono::steady_clock::now();
    if (!device) {
      // The lattice and the radius search's squared radius as VoxelMap's (float(r * r) of
      // the float-rounded resolution).
      auto made = std::make_unique<detail::DeviceTiledMap>(resolution, inverse, static_cast<float>(resolution * resolution));
      std::lock_guard<std::mutex> lock(published_mutex);
      device = std::move(made);
    }
    if (!tracking) {  // the first publish (or the record was dropped): every cell, and every voxel the device holds
      try {
        owners.reserve(stats_cells() + stats_cells() / 4);
        for (auto& entry : tiles) track_cells(entry.second, +1);
        const std::vector<std::uint64_t> held = device->keys();
        touched.insert(touched.end(), held.begin(), held.end());
      } catch (...) {
        drop_record();
        throw;
      }
      tracking = true;
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    std::vector<std::uint64_t> erased;
    std::vector<detail::VoxelWrite> written;
    std::vector<detail::VoxelAdopt> adopted;
    adopted.reserve(touched.size());
    std::vector<CellPart> parts;
    math::VoxelStatistics scratch;
    for (const std::uint64_t key : touched) {
      const auto it = owners.find(key);
      if (it == owners.end()) {
        erased.push_back(key);
        continue;
      }
      CellOwners& o = it->second;
      parts.clear();
      if (!o.only) {
        for (auto& entry : tiles) {
          const std::int64_t c = entry.second.find(key);
          if (c >= 0) parts.push_back({&entry.second, static_cast<std::uint32_t>(c)});
          if (c >= 0 && o.count == 1) {
            o.only = &entry.second;
            o.cell = static_cast<std::uint32_t>(c);
          }
        }
      } else {
        parts.push_back({o.only, o.cell});
      }
      const math::VoxelStatistics* st =
          joined_statistics(parts.size(), [&](std::size_t m) { return parts[m]; }, scratch);
      if (!st || !st->usable) {
        erased.push_back(key);
        continue;
      }
      // A cell of one tile whose voxel was staged on the device: taken from there.
      if (o.only && !o.only->staged.empty() && o.only->staged[o.cell] != kNoSlot) {
        adopted.push_back({key, o.only->staged[o.cell]});
        o.only->staged[o.cell] = kNoSlot;  // the map's now
        continue;
      }
      written.emplace_back();
      written.back().key = key;
      detail::to_voxel_result(*st, written.back().stats);
    }
    out.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const detail::DevicePublishStats d = device->publish(erased, written, adopted);  // on a throw, touched stays
    touched.clear();
    out.version = d.version;
    out.voxels = d.voxels;
    out.written = d.written + d.adopted;
    out.staged = d.adopted;
    out.removed = d.erased;
    out.bytes_up = d.bytes_up;
    out.device_ms = d.ms;
    return out;
  }

  std::size_t stats_cells() const {
    std::size_t n = 0;
    for (const auto& entry : tiles) n += entry.second.keys.size();
    return n;
  }

  std::shared_ptr<const VoxelMap> join() {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<const TileCells*> order;
    std::vector<std::size_t> bounds{0};  // each tile's refs: [bounds[t], bounds[t + 1])
    std::size_t points = 0;
    for (const auto& entry : tiles) {
      order.push_back(&entry.second);
      bounds.push_back(bounds.back() + entry.second.keys.size());
      points += entry.second.points;
    }
    // Every tile's cells, tile after tile (each run sorted by key), merged pairwise: the
    // merge is stable, so equal keys stay in tile (id) order.
    std::vector<CellRef> refs(bounds.back());
    pool.parallel_for(order.size(), [&](std::size_t t) {
      for (std::size_t c = 0; c < order[t]->keys.size(); ++c) {
        refs[bounds[t] + c] = {order[t]->keys[c], static_cast<std::uint32_t>(t), static_cast<std::uint32_t>(c)};
      }
    });
    const auto by_key = [](const CellRef& a, const CellRef& b) { return a.key < b.key; };
    for (std::size_t width = 1; width < order.size(); width *= 2) {
      const std::size_t pairs = (order.size() + 2 * width - 1) / (2 * width);
      pool.parallel_for(pairs, [&](std::size_t p) {
        const std::size_t lo = 2 * width * p, mid = lo + width, hi = std::min(order.size(), lo + 2 * width);
        if (mid >= hi) return;
        std::inplace_merge(refs.begin() + static_cast<std::ptrdiff_t>(bounds[lo]),
                           refs.begin() + static_cast<std::ptrdiff_t>(bounds[mid]),
                           refs.begin() + static_cast<std::ptrdiff_t>(bounds[hi]), by_key);
      });
    }
    // One voxel per key (a group of refs): a tile's own statistics, or those of the joined
    // sums. First each group's outcome, then the usable ones written at their places, both
    // in parallel chunks of groups.
    std::vector<std::size_t> group_begin;
    group_begin.reserve(refs.size() + 1);
    for (std::size_t r = 0; r < refs.size(); ++r) {
      if (r == 0 || refs[r].key != refs[r - 1].key) group_begin.push_back(r);
    }
    const std::size_t groups = group_begin.size();
    group_begin.push_back(refs.size());
    // The statistics of group g into `s`: a group of one tile's cell points at the tile's
    // statistics; a shared cell's are computed from the joined sums.
    const auto group_statistics = [&](std::size_t g, math::VoxelStatistics& s) -> const math::VoxelStatistics* {
      const auto part = [&](std::size_t m) {
        const CellRef& r = refs[group_begin[g] + m];
        return CellPart{order[r.tile], r.cell};
      };
      return joined_statistics(group_begin[g + 1] - group_begin[g], part, s);
    };
    const auto group_points = [&](std::size_t g) {
      std::uint32_t n = 0;
      for (std::size_t m = group_begin[g]; m < group_begin[g + 1]; ++m) n += order[refs[m].tile]->sums[refs[m].cell].n;
      return n;
    };
    constexpr std::size_t kChunk = 2048;
    const std::size_t chunks = (groups + kChunk - 1) / kChunk;
    std::vector<std::uint8_t> status(groups);  // 0 sparse, 1 singular, 2 usable
    pool.parallel_for(chunks, [&](std::size_t c) {
      math::VoxelStatistics s;
      for (std::size_t g = c * kChunk; g < std::min(groups, (c + 1) * kChunk); ++g) {
        const math::VoxelStatistics* st = group_statistics(g, s);
        status[g] = !st ? 0 : st->usable ? 2 : 1;
      }
    });
    std::vector<std::uint32_t> position(groups);
    detail::VoxelCells cells;
    cells.occupied_cells = groups;
    std::size_t voxels = 0;
    for (std::size_t g = 0; g < groups; ++g) {
      position[g] = static_cast<std::uint32_t>(voxels);
      cells.sparse_cells += status[g] == 0;
      cells.singular_cells += status[g] == 1;
      voxels += status[g] == 2;
    }
    detail::resize_voxels(cells, voxels);
    pool.parallel_for(chunks, [&](std::size_t c) {
      math::VoxelStatistics s;
      for (std::size_t g = c * kChunk; g < std::min(groups, (c + 1) * kChunk); ++g) {
        if (status[g] != 2) continue;
        detail::set_voxel(cells, position[g], refs[group_begin[g]].key, group_points(g), *group_statistics(g, s));
      }
    });
    VoxelMap map = detail::assemble_voxel_map(std::move(cells), options, origin, points, on_gpu);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    detail::set_build_ms(map, ms);
    detail::log().debug("tiled map: {} tiles joined into {} voxels in {:.1f} ms", tiles.size(), map.size(), ms);
    return std::make_shared<const VoxelMap>(std::move(map));
  }
};

TiledVoxelMap::TiledVoxelMap(const VoxelMapOptions& options, const Eigen::Vector3d& origin) {
  detail::check_voxel_map_options(options);
  if (!origin.allFinite()) throw Error("tiled map: the origin must be finite");
  impl_ = std::make_unique<Impl>(options, origin);
}

TiledVoxelMap::~TiledVoxelMap() = default;
TiledVoxelMap::TiledVoxelMap(TiledVoxelMap&&) noexcept = default;
TiledVoxelMap& TiledVoxelMap::operator=(TiledVoxelMap&&) noexcept = default;

void TiledVoxelMap::add_tile(const std::string& id, const PointCloud& cloud) { add_tiles({{id, &cloud}}); }

void TiledVoxelMap::add_tiles(const std::vector<std::pair<std::string, const PointCloud*>>& tiles) {
  Impl& m = *impl_;
  std::set<std::string> batch;
  for (const auto& [id, cloud] : tiles) {
    if (!cloud) throw Error(fmt::format("tiled map: tile '{}' has no cloud (null)", id));
    if (m.tiles.count(id) != 0) throw Error(fmt::format("tiled map: tile '{}' is loaded already (remove it first)", id));
    if (!batch.insert(id).second) throw Error(fmt::format("tiled map: tile '{}' is named twice", id));
  }
  std::vector<TileCells> built;
  built.reserve(tiles.size());
  try {
    for (const auto& [id, cloud] : tiles) built.push_back(m.build(id, *cloud));
  } catch (...) {
    for (TileCells& t : built) m.release_staged(t);
    throw;
  }
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    const auto it = m.tiles.emplace(tiles[i].first, std::move(built[i])).first;
    m.track(it->second, +1);
  }
  if (!tiles.empty()) m.joined.reset();
}

void TiledVoxelMap::remove_tiles(const std::vector<std::string>& ids) {
  Impl& m = *impl_;
  std::set<std::string> batch;
  for (const std::string& id : ids) {
    if (m.tiles.count(id) == 0) throw Error(fmt::format("tiled map: tile '{}' is not loaded", id));
    if (!batch.insert(id).second) throw Error(fmt::format("tiled map: tile '{}' is named twice", id));
  }
  for (const std::string& id : ids) {
    const auto it = m.tiles.find(id);
    m.track(it->second, -1);
    m.release_staged(it->second);
    m.tiles.erase(it);
  }
  if (!ids.empty()) m.joined.reset();
}

void TiledVoxelMap::clear() noexcept {
  for (auto& entry : impl_->tiles) impl_->release_staged(entry.second);
  impl_->drop_record();  // the next publish removes every voxel the device holds
  impl_->tiles.clear();
  impl_->joined.reset();
}

bool TiledVoxelMap::contains(const std::string& id) const { return impl_->tiles.count(id) != 0; }

std::vector<std::string> TiledVoxelMap::tile_ids() const {
  std::vector<std::string> ids;
  ids.reserve(impl_->tiles.size());
  for (const auto& entry : impl_->tiles) ids.push_back(entry.first);
  return ids;
}

std::size_t TiledVoxelMap::tile_memory_bytes(const std::string& id) const {
  const auto it = impl_->tiles.find(id);
  return it == impl_->tiles.end() ? 0 : it->second.bytes();
}

TiledVoxelMapStats TiledVoxelMap::stats() const {
  TiledVoxelMapStats s;
  for (const auto& entry : impl_->tiles) {
    ++s.tiles;
    s.points += entry.second.points;
    s.cells += entry.second.keys.size();
    s.memory_bytes += entry.second.bytes();
  }
  if (impl_->device) s.device_bytes = impl_->device->device_bytes();
  return s;
}

std::shared_ptr<const VoxelMap> TiledVoxelMap::map() {
  if (!impl_->joined) impl_->joined = impl_->join();
  return impl_->joined;
}

TiledVoxelMapPublish TiledVoxelMap::publish() {
  Impl& m = *impl_;
  TiledVoxelMapPublish out;
  if (m.on_gpu) {
    out = m.publish_device();
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const VoxelMap> joined = map();
    out.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    out.voxels = joined->size();
    std::lock_guard<std::mutex> lock(m.published_mutex);
    m.published_host = std::move(joined);
    out.version = m.published_version + 1;
  }
  std::lock_guard<std::mutex> lock(m.published_mutex);
  m.published_version = out.version;
  return out;
}

std::uint64_t TiledVoxelMap::published_version() const {
  std::lock_guard<std::mutex> lock(impl_->published_mutex);
  return impl_->published_version;
}

bool TiledVoxelMap::publishes_on_device() const noexcept { return impl_->on_gpu; }

bool tiled_map_on_device(const VoxelMapOptions& options) { return detail::build_on_gpu(options); }

std::shared_ptr<const VoxelMap> detail::TiledVoxelMapAccess::published_host(const TiledVoxelMap& tiles) {
  std::lock_guard<std::mutex> lock(tiles.impl_->published_mutex);
  return tiles.impl_->published_host;
}

detail::DeviceTiledMap* detail::TiledVoxelMapAccess::device(TiledVoxelMap& tiles) {
  std::lock_guard<std::mutex> lock(tiles.impl_->published_mutex);
  return tiles.impl_->device.get();
}

const VoxelMapOptions& TiledVoxelMap::options() const noexcept { return impl_->options; }
const Eigen::Vector3d& TiledVoxelMap::origin() const noexcept { return impl_->origin; }

}  // namespace ndtcu
