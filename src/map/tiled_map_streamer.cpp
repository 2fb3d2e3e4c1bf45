// TiledMapStreamer: the tiles of a map folder around a moving pose, read and joined on a
// worker thread (std::async), handed out as immutable VoxelMaps.
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/tiled_map.hpp>
#include <ndtcu/tiled_voxel_map.hpp>

#include "../log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>

namespace ndtcu {

namespace fs = std::filesystem;

namespace {

// Most host bytes a joined map holds per cell of its tiles: a voxel's arrays (means,
// inverse covariances, covariances, centroid, cell, count: 148 bytes) and its share of a
// hash table at most four times the voxel count (48 bytes). Every voxel comes from at
// least one tile cell, so this bounds the join before it runs.
constexpr std::size_t kJoinedBytesPerCell = 196;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string megabytes(std::size_t bytes) { return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6); }

}  // namespace

struct TiledMapStreamer::Impl {
  std::string dir;
  fs::path base;
  TiledMapMetadata meta;
  TiledMapStreamOptions options;
  ReadOptions read;
  std::shared_ptr<TiledVoxelMap> shared_tiles;  // what followers keep alive
  TiledVoxelMap& tiles;
  std::vector<std::size_t> last_wanted;  // per metadata tile: the update that last wanted it (0: none)
  std::vector<char> skipped;             // per metadata tile: its file could not be read
  // Per metadata tile: in the map of the last finished update or unreadable (written by
  // the update, which the future's completion orders before take()), and the same for
  // the map handed out last (the caller's thread only).
  std::vector<char> finished_held, handed_held;
  mutable std::mutex stats_mutex;
  TiledMapStreamStats stats;
  std::optional<Eigen::Vector2d> last_centre;
  std::future<std::shared_ptr<const VoxelMap>> job;
  bool warned_off_map = false;

  Impl(const std::string& d, const TiledMapMetadata& m, const VoxelMapOptions& vo, const TiledMapStreamOptions& o,
       const ReadOptions& r)
      : dir(d),
        meta(m),
        options(o),
        read(tiled_map_read_options(m, r)),
        shared_tiles(std::make_shared<TiledVoxelMap>(
            vo, read.origin_policy == OriginPolicy::Fixed ? read.origin : Eigen::Vector3d::Zero())),
        tiles(*shared_tiles),
        last_wanted(m.tiles.size(), 0),
        skipped(m.tiles.size(), 0),
        finished_held(m.tiles.size(), 0) {
    stats.listed = m.tiles.size();
    base = fs::path(dir);
    if (!fs::is_directory(base)) base = base.parent_path();
  }

  // One update: the tiles within the radius of `centre` read and added, those beyond it
  // dropped (or, with a budget, evicted as the budget needs), the rest joined.
  std::shared_ptr<const VoxelMap> update(const Eigen::Vector2d& centre, bool first) {
    std::size_t now;
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      now = ++stats.updates;
    }
    std::vector<std::size_t> wanted;
    for (std::size_t i = 0; i < meta.tiles.size(); ++i) {
      if (!skipped[i] && tile_distance(meta, meta.tiles[i], centre) <= options.radius) wanted.push_back(i);
    }
    auto t0 = std::chrono::steady_clock::now();
    std::size_t read_now = 0;
    std::vector<std::string> skipped_now;
    for (const std::size_t i : wanted) {
      last_wanted[i] = now;
      const MapTile& t = meta.tiles[i];
      if (tiles.contains(t.file)) continue;
      PointCloud cloud;
      try {
        cloud = read_point_cloud((base / t.file).string(), read);
      } catch (const Error& e) {
        detail::log().warn("tiled map: tile {} (line {} of {}) skipped: {}", t.file, t.line, kTiledMapMetadataFile,
                           e.what());
        skipped[i] = 1;
        skipped_now.push_back(t.file);
        continue;
      }
      if (options.map_voxel > 0.0) cloud = voxel_downsample(cloud, options.map_voxel);
      tiles.add_tile(t.file, cloud);
      ++read_now;
    }
    const double read_ms = ms_since(t0);
    const std::size_t wanted_loaded = static_cast<std::size_t>(
        std::count_if(wanted.begin(), wanted.end(), [&](std::size_t i) { return !skipped[i]; }));
    if (wanted_loaded == 0) {
      if (first) {
        throw Error(fmt::format("{}: none of its {} tiles lies within {} m of ({:.3f}, {:.3f}){}", dir,
                                meta.tiles.size(), options.radius, centre.x(), centre.y(),
                                skipped_now.empty() ? "" : fmt::format(" that could be read ({} skipped)", skipped_now.size())));
      }
      // Off the map: keep what is loaded rather than align on nothing.
      if (!warned_off_map) {
        detail::log().warn("tiled map: no tile of {} within {} m of ({:.3f}, {:.3f}); keeping the {} tiles loaded", dir,
                           options.radius, centre.x(), centre.y(), tiles.stats().tiles);
        warned_off_map = true;
      }
    } else {
      warned_off_map = false;
      drop(now, centre);
    }
    t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const VoxelMap> map;
    std::size_t voxels = 0;
    if (options.publish) {
      voxels = tiles.publish().voxels;
    } else {
      map = tiles.map();
      voxels = map->size();
      if (options.on_map) options.on_map(map);
    }
    const double join_ms = ms_since(t0);
    for (std::size_t i = 0; i < meta.tiles.size(); ++i) {
      finished_held[i] = skipped[i] || tiles.contains(meta.tiles[i].file) ? 1 : 0;
    }
    const TiledVoxelMapStats ts = tiles.stats();
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.loaded = ts.tiles;
    stats.tiles_read += read_now;
    stats.skipped.insert(stats.skipped.end(), skipped_now.begin(), skipped_now.end());
    stats.peak_loaded = std::max(stats.peak_loaded, ts.tiles);
    stats.bytes = ts.memory_bytes + (map ? map->memory_bytes() : 0);
    stats.voxels = voxels;
    stats.device_bytes = ts.device_bytes;
    stats.peak_device_bytes = std::max(stats.peak_device_bytes, ts.device_bytes);
    stats.peak_bytes = std::max(stats.peak_bytes, stats.bytes);
    stats.read_ms += read_ms;
    stats.join_ms += join_ms;
    return map;
  }

  // Tiles beyond the radius: all of them without a budget; with one, the least recently
  // wanted until the tiles and their join fit.
  void drop(std::size_t now, const Eigen::Vector2d& centre) {
    std::vector<std::size_t> beyond;  // loaded, not wanted now
    for (std::size_t i = 0; i < meta.tiles.size(); ++i) {
      if (last_wanted[i] != now && tiles.contains(meta.tiles[i].file)) beyond.push_back(i);
    }
    const auto estimate = [this] {
      const TiledVoxelMapStats s = tiles.stats();
      return s.memory_bytes + s.cells * kJoinedBytesPerCell;
    };
    std::vector<std::string> remove;
    if (options.memory_budget == 0) {
      for (const std::size_t i : beyond) remove.push_back(meta.tiles[i].file);
      tiles.remove_tiles(remove);
    } else {
      std::stable_sort(beyond.begin(), beyond.end(),
                       [this](std::size_t a, std::size_t b) { return last_wanted[a] < last_wanted[b]; });
      for (const std::size_t i : beyond) {
        if (estimate() <= options.memory_budget) break;
        tiles.remove_tiles({meta.tiles[i].file});
        remove.push_back(meta.tiles[i].file);
      }
      const std::size_t need = estimate();
      if (need > options.memory_budget) {
        throw Error(fmt::format("{}: the {} tiles within {} m of ({:.3f}, {:.3f}) need {} ({} of tiles, at most {} "
                                "joined), more than the map memory budget of {}; raise the budget or lower the radius",
                                dir, tiles.stats().tiles, options.radius, centre.x(), centre.y(), megabytes(need),
                                megabytes(tiles.stats().memory_bytes), megabytes(need - tiles.stats().memory_bytes),
                                megabytes(options.memory_budget)));
      }
    }
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.tiles_dropped += remove.size();
  }
};

TiledMapStreamer::TiledMapStreamer(const std::string& dir, const VoxelMapOptions& voxel_options,
                                   const TiledMapStreamOptions& options, const ReadOptions& read) {
  const auto check = [](double v, const char* name) {
    if (!(v >= 0.0) || !std::isfinite(v)) throw Error(fmt::format("tiled map: {} must be >= 0 and finite, got {}", name, v));
  };
  check(options.radius, "radius");
  check(options.update_distance, "update distance");
  check(options.map_voxel, "map voxel");
  VoxelMapOptions vo = voxel_options;
  vo.threads = options.threads;
  impl_ = std::make_unique<Impl>(dir, read_tiled_map_metadata(dir, false), vo, options, read);
}

TiledMapStreamer::~TiledMapStreamer() {
  if (impl_ && impl_->job.valid()) impl_->job.wait();
}

std::shared_ptr<const VoxelMap> TiledMapStreamer::load(const Eigen::Vector2d& centre) {
  if (!centre.allFinite()) throw Error("tiled map: the centre must be finite");
  Impl& m = *impl_;
  if (m.job.valid()) m.job.wait();  // its map is superseded (its error too: this load reports its own)
  m.job = {};
  m.last_centre = centre;
  std::shared_ptr<const VoxelMap> map = m.update(centre, true);
  m.handed_held = m.finished_held;
  return map;
}

void TiledMapStreamer::request(const Eigen::Vector2d& centre) {
  Impl& m = *impl_;
  if (m.job.valid() || !centre.allFinite()) return;
  if (m.last_centre && (centre - *m.last_centre).norm() < m.options.update_distance) return;
  m.last_centre = centre;
  m.job = std::async(std::launch::async, [&m, centre] { return m.update(centre, false); });
}

std::shared_ptr<const VoxelMap> TiledMapStreamer::take(bool wait) {
  Impl& m = *impl_;
  if (m.options.publish || !m.job.valid()) return nullptr;
  if (!wait && m.job.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return nullptr;
  std::shared_ptr<const VoxelMap> map = m.job.get();
  m.handed_held = m.finished_held;
  return map;
}

bool TiledMapStreamer::take_published(bool wait) {
  Impl& m = *impl_;
  if (!m.options.publish || !m.job.valid()) return false;
  if (!wait && m.job.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  m.job.get();  // rethrows the update's error
  m.handed_held = m.finished_held;
  return true;
}

bool TiledMapStreamer::covers(const Eigen::Vector2d& position, double reach) const {
  const Impl& m = *impl_;
  if (m.handed_held.empty() || !position.allFinite() || !(reach >= 0.0)) return false;
  for (std::size_t i = 0; i < m.meta.tiles.size(); ++i) {
    if (!m.handed_held[i] && tile_distance(m.meta, m.meta.tiles[i], position) <= reach) return false;
  }
  return true;
}

std::shared_ptr<TiledVoxelMap> TiledMapStreamer::tiled_map() const noexcept { return impl_->shared_tiles; }

bool TiledMapStreamer::busy() const noexcept {
  return impl_->job.valid() && impl_->job.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

void TiledMapStreamer::wait_idle() const noexcept {
  if (impl_->job.valid()) impl_->job.wait();
}

const TiledMapMetadata& TiledMapStreamer::metadata() const noexcept { return impl_->meta; }
const Eigen::Vector3d& TiledMapStreamer::origin() const noexcept { return impl_->tiles.origin(); }

TiledMapStreamStats TiledMapStreamer::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->stats;
}

}  // namespace ndtcu
