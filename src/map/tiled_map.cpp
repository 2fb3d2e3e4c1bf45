// Tiled maps in Autoware's layout (see include/ndtcu/tiled_map.hpp).
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/output_file.hpp>
#include <ndtcu/tiled_map.hpp>

#include "../log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace ndtcu {

namespace {

namespace fs = std::filesystem;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A finite number filling all of `s` (trimmed), else nothing.
bool parse_number(std::string_view s, double& out) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(out);
}

// A YAML scalar key, quoted or not.
std::string_view unquote(std::string_view s) {
  s = trim(s);
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) {
    s = s.substr(1, s.size() - 2);
  }
  return s;
}

fs::path metadata_path(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? fs::path(path) / kTiledMapMetadataFile : fs::path(path);
}

// A tile corner as the file name writes it: the shortest decimal that reads back the same.
std::string corner_text(double v) {
  if (v == 0.0) v = 0.0;  // no "-0"
  return fmt::format("{}", v);
}

// A tile's file lies in the map's folder or below it: a path relative to the folder that
// no ".." leads out of. An absolute path or one climbing out would read a file the map does
// not hold (the metadata of a map handed over with its folder names only its own tiles).
template <typename Fail>
void check_tile_path(const std::string& tile, const fs::path& folder, const Fail& fail) {
  const fs::path path(tile);
  if (path.has_root_name() || path.has_root_directory()) {
    fail(fmt::format("tile '{}' is an absolute path; a tile is named relative to the map folder ({})", tile,
                     folder.empty() ? std::string(".") : folder.string()));
  }
  const fs::path normal = path.lexically_normal();
  if (!normal.empty() && *normal.begin() == "..") {
    fail(fmt::format("tile '{}' lies outside the map folder ({}: the path leads to {}); a tile is named relative to "
                     "the folder, without '..' leaving it",
                     tile, folder.empty() ? std::string(".") : folder.string(),
                     (folder / path).lexically_normal().string()));
  }
}

// Autoware's layout is a grid of equal squares, each tile keyed by its lower corner: two
// squares that overlap (by more than a millionth of the tile size, for corners written
// with rounding) are two tiles claiming one place. The tiled voxel map joins the cells of
// every tile loaded, so a place held by both would count its points twice, or mix two
// versions of it. Squares overlap only when their corners lie within one tile size along
// both axes, so each tile is compared with those in the 3 x 3 grid cells about its own.
void check_overlaps(const TiledMapMetadata& m, const std::string& name) {
  const double tol_x = 1e-6 * m.x_resolution, tol_y = 1e-6 * m.y_resolution;
  std::map<std::pair<double, double>, std::vector<std::size_t>> grid;
  const auto cell = [&](const MapTile& t) {
    return std::make_pair(std::floor(t.x_min / m.x_resolution), std::floor(t.y_min / m.y_resolution));
  };
  for (std::size_t i = 0; i < m.tiles.size(); ++i) {
    const MapTile& a = m.tiles[i];
    const auto [cx, cy] = cell(a);
    for (double dx = -1.0; dx <= 1.0; dx += 1.0) {
      for (double dy = -1.0; dy <= 1.0; dy += 1.0) {
        const auto it = grid.find({cx + dx, cy + dy});
        if (it == grid.end()) continue;
        for (const std::size_t j : it->second) {
          const MapTile& b = m.tiles[j];
          if (std::abs(a.x_min - b.x_min) < m.x_resolution - tol_x &&
              std::abs(a.y_min - b.y_min) < m.y_resolution - tol_y) {
            throw Error(fmt::format("{}: lines {} and {}: tiles '{}' at [{}, {}] and '{}' at [{}, {}] overlap (squares "
                                    "of {} x {} m); Autoware's layout is a grid of equal squares keyed by their lower "
                                    "corner, each place in one tile",
                                    name, b.line, a.line, b.file, b.x_min, b.y_min, a.file, a.x_min, a.y_min,
                                    m.x_resolution, m.y_resolution));
          }
        }
      }
    }
    grid[{cx, cy}].push_back(i);
  }
}

}  // namespace

bool is_tiled_map(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kTiledMapMetadataFile, ec);
}

TiledMapMetadata read_tiled_map_metadata(const std::string& path, bool check_files) {
  const fs::path file = metadata_path(path);
  const std::string name = file.string();
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::error_code ec;
    throw IoError(name, fs::exists(file, ec) ? std::string("cannot read: ") + std::strerror(errno) : "no such file");
  }
  TiledMapMetadata m;
  bool have_x = false, have_y = false;
  std::set<std::string> seen;
  std::string raw;
  int line = 0;
  const auto fail = [&](const std::string& what) {
    throw Error(fmt::format("{}: line {}: {}", name, line, what));
  };
  while (std::getline(in, raw)) {
    ++line;
    if (raw.size() > 4096) fail("line longer than 4096 bytes");
    std::string_view s = raw;
    // A comment runs from a '#' at the start or after a blank to the end of the line.
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
        s = s.substr(0, i);
        break;
      }
    }
    s = trim(s);
    if (s.empty() || s == "---") continue;
    // The key ends at the last ": " before the value (a file name may hold ':').
    const std::size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) fail(fmt::format("expected 'key: value', got '{}'", s));
    const std::string key(unquote(s.substr(0, colon)));
    const std::string_view value = trim(s.substr(colon + 1));
    if (key == "x_resolution" || key == "y_resolution") {
      if (key == "x_resolution" ? have_x : have_y) fail(fmt::format("{} is given twice", key));
      double r = 0.0;
      if (!parse_number(value, r) || !(r > 0.0)) {
        fail(fmt::format("{} must be a positive finite number (m), got '{}'", key, value));
      }
      (key == "x_resolution" ? m.x_resolution : m.y_resolution) = r;
      (key == "x_resolution" ? have_x : have_y) = true;
      continue;
    }
    if (key.empty()) fail("a tile entry needs a file name before ':'");
    if (value.size() < 2 || value.front() != '[' || value.back() != ']') {
      fail(fmt::format("expected '{}: [x_min, y_min]', got '{}'", key, value));
    }
    const std::string_view inner = value.substr(1, value.size() - 2);
    const std::size_t comma = inner.find(',');
    MapTile t;
    if (comma == std::string_view::npos || inner.find(',', comma + 1) != std::string_view::npos ||
        !parse_number(inner.substr(0, comma), t.x_min) || !parse_number(inner.substr(comma + 1), t.y_min)) {
      fail(fmt::format("expected two finite numbers [x_min, y_min] for '{}', got '{}'", key, value));
    }
    if (!seen.insert(key).second) fail(fmt::format("tile '{}' is named twice", key));
    check_tile_path(key, file.parent_path(), fail);
    t.file = key;
    t.line = line;
    if (check_files) {
      std::error_code ec;
      if (!fs::is_regular_file(file.parent_path() / t.file, ec)) {
        fail(fmt::format("tile '{}' does not exist ({})", t.file, (file.parent_path() / t.file).string()));
      }
    }
    m.tiles.push_back(std::move(t));
  }
  if (in.bad()) throw IoError(name, "read error");
  line = 0;
  if (!have_x || !have_y) {
    throw Error(fmt::format("{}: no {} (Autoware's metadata names the tile size as x_resolution and y_resolution)",
                            name, !have_x ? "x_resolution" : "y_resolution"));
  }
  check_overlaps(m, name);
  return m;
}

TiledMapMetadata write_tiled_map(const PointCloud& map, double tile_size, const std::string& dir,
                                 const WriteOptions& options) {
  TiledMapWriterOptions o;
  o.write = options;
  o.buffer_points = std::max<std::size_t>(map.size(), 1);  // one add, held whole: no spill
  TiledMapWriter writer(dir, tile_size, o);
  writer.add(map);
  return writer.finish();
}

struct TiledMapWriter::Buffer {
  std::vector<Eigen::Vector3f> points;
  std::vector<float> intensity;
  std::size_t spilled = 0;  // points already in the tile's spill file
};

namespace {

constexpr const char* kSpillFolder = ".ndtcu_spill";
constexpr std::size_t kMaxTiles = 1000000;

fs::path spill_path(const std::string& dir, const std::pair<std::int64_t, std::int64_t>& index) {
  return fs::path(dir) / kSpillFolder / fmt::format("{}_{}.bin", index.first, index.second);
}

}  // namespace

TiledMapWriter::TiledMapWriter(std::string dir, double tile_size, TiledMapWriterOptions options)
    : dir_(std::move(dir)), tile_size_(tile_size), options_(std::move(options)) {
  if (!(tile_size > 0.0) || !std::isfinite(tile_size)) {
    throw Error(fmt::format("tile size must be a positive finite number (m), got {}", tile_size));
  }
  if (!(options_.voxel >= 0.0) || !std::isfinite(options_.voxel)) {
    throw Error(fmt::format("tiled map voxel must be 0 or a positive finite leaf (m), got {}", options_.voxel));
  }
  options_.buffer_points = std::max<std::size_t>(options_.buffer_points, 1);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) throw IoError(dir_, "cannot create folder" + (ec ? ": " + ec.message() : ""));
  // An earlier map's metadata goes before the first tile is written (finish() writes the
  // new one last): a folder never lists another map's tiles beside new ones. Spill files
  // of a writer killed before its finish() would be appended to: they go too.
  const fs::path meta_file = fs::path(dir_) / kTiledMapMetadataFile;
  fs::remove(meta_file, ec);
  if (ec) throw IoError(meta_file.string(), "cannot remove an earlier map's metadata: " + ec.message());
  fs::remove_all(fs::path(dir_) / kSpillFolder, ec);
  if (ec) throw IoError((fs::path(dir_) / kSpillFolder).string(), "cannot remove old spill files: " + ec.message());
}

TiledMapWriter::~TiledMapWriter() {
  std::error_code ec;
  if (stats_.spills > 0) fs::remove_all(fs::path(dir_) / kSpillFolder, ec);
}

void TiledMapWriter::add(const PointCloud& cloud) {
  if (finished_) throw Error("tiled map writer: add() after finish()");
  if (cloud.empty()) return;
  if (!started_) {
    started_ = true;
    origin_ = cloud.origin;
    with_intensity_ = cloud.has_intensity();
  } else if (cloud.origin != origin_) {
    throw Error(fmt::format("tiled map writer: a cloud with origin ({}, {}, {}) after clouds with origin ({}, {}, {})",
                            cloud.origin.x(), cloud.origin.y(), cloud.origin.z(), origin_.x(), origin_.y(), origin_.z()));
  } else if (cloud.has_intensity() != with_intensity_) {
    throw Error(std::string("tiled map writer: a cloud ") + (with_intensity_ ? "without" : "with") +
                " intensity after clouds " + (with_intensity_ ? "with" : "without") + " it");
  }
  for (std::size_t i = 0; i < cloud.size(); ++i) {
    // The tile of every point, by its world x-y (in double: a UTM map keeps its corners).
    const Eigen::Vector3d w = cloud.world(i);
    const double fx = std::floor(w.x() / tile_size_), fy = std::floor(w.y() / tile_size_);
    if (!(std::abs(fx) < 9e15 && std::abs(fy) < 9e15)) {
      throw Error(fmt::format("tiling: point {} at ({}, {}) is too far out for tiles of {} m", stats_.points_in + i,
                              w.x(), w.y(), tile_size_));
    }
    const std::pair<std::int64_t, std::int64_t> index{static_cast<std::int64_t>(fx), static_cast<std::int64_t>(fy)};
    auto it = tiles_.find(index);
    if (it == tiles_.end()) {
      if (tiles_.size() >= kMaxTiles) {
        throw Error(fmt::format("tiling: more than 1,000,000 tiles of {} m; use a larger tile size", tile_size_));
      }
      it = tiles_.emplace(index, Buffer{}).first;
    }
    it->second.points.push_back(cloud.points[i]);
    if (with_intensity_) it->second.intensity.push_back(cloud.intensity[i]);
    stats_.peak_buffered = std::max(stats_.peak_buffered, ++buffered_);
    if (buffered_ >= options_.buffer_points) spill();
  }
  stats_.points_in += cloud.size();
}

void TiledMapWriter::spill() {
  const fs::path folder = fs::path(dir_) / kSpillFolder;
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw IoError(folder.string(), "cannot create folder: " + ec.message());
  std::vector<float> row;
  for (auto& [index, b] : tiles_) {
    if (b.points.empty()) continue;
    const fs::path file = spill_path(dir_, index);
    std::ofstream out(file, std::ios::binary | std::ios::app);
    const std::size_t stride = with_intensity_ ? 4 : 3;
    row.resize(b.points.size() * stride);
    for (std::size_t k = 0; k < b.points.size(); ++k) {
      for (int a = 0; a < 3; ++a) row[k * stride + static_cast<std::size_t>(a)] = b.points[k][a];
      if (with_intensity_) row[k * stride + 3] = b.intensity[k];
    }
    out.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * sizeof(float)));
    out.close();
    if (!out) throw IoError(file.string(), "write error while spilling tile points");
    b.spilled += b.points.size();
    std::vector<Eigen::Vector3f>().swap(b.points);
    std::vector<float>().swap(b.intensity);
  }
  buffered_ = 0;
  ++stats_.spills;
}

TiledMapMetadata TiledMapWriter::finish() {
  if (finished_) throw Error("tiled map writer: finish() called twice");
  finished_ = true;
  TiledMapMetadata meta;
  meta.x_resolution = meta.y_resolution = tile_size_;
  std::string yaml = fmt::format("x_resolution: {}\ny_resolution: {}\n", tile_size_, tile_size_);
  const std::size_t stride = with_intensity_ ? 4 : 3;
  std::vector<float> row;
  for (auto& [index, b] : tiles_) {
    MapTile t;
    t.x_min = static_cast<double>(index.first) * tile_size_;
    t.y_min = static_cast<double>(index.second) * tile_size_;
    t.file = corner_text(t.x_min) + "_" + corner_text(t.y_min) + ".pcd";
    PointCloud tile;
    tile.origin = origin_;
    tile.points.reserve(b.spilled + b.points.size());
    if (with_intensity_) tile.intensity.reserve(b.spilled + b.points.size());
    if (b.spilled > 0) {
      // The tile's points spilled so far, in order, then the ones still buffered.
      const fs::path file = spill_path(dir_, index);
      std::ifstream in(file, std::ios::binary);
      row.resize(b.spilled * stride);
      in.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(row.size() * sizeof(float)));
      if (!in) throw IoError(file.string(), "cannot read back the tile's spilled points");
      for (std::size_t k = 0; k < b.spilled; ++k) {
        tile.points.emplace_back(row[k * stride], row[k * stride + 1], row[k * stride + 2]);
        if (with_intensity_) tile.intensity.push_back(row[k * stride + 3]);
      }
    }
    tile.points.insert(tile.points.end(), b.points.begin(), b.points.end());
    tile.intensity.insert(tile.intensity.end(), b.intensity.begin(), b.intensity.end());
    std::vector<Eigen::Vector3f>().swap(b.points);
    std::vector<float>().swap(b.intensity);
    if (options_.voxel > 0.0) tile = voxel_downsample(tile, options_.voxel);
    write_pcd((fs::path(dir_) / t.file).string(), tile, options_.write);
    stats_.points_written += tile.size();
    yaml += fmt::format("{}: [{}, {}]\n", t.file, corner_text(t.x_min), corner_text(t.y_min));
    meta.tiles.push_back(std::move(t));
  }
  stats_.tiles = meta.tiles.size();
  tiles_.clear();
  buffered_ = 0;
  write_file_whole((fs::path(dir_) / kTiledMapMetadataFile).string(), yaml);
  std::error_code ec;
  fs::remove_all(fs::path(dir_) / kSpillFolder, ec);
  return meta;
}

double tile_distance(const TiledMapMetadata& meta, const MapTile& t, const Eigen::Vector2d& centre) {
  const double dx = std::max({t.x_min - centre.x(), 0.0, centre.x() - (t.x_min + meta.x_resolution)});
  const double dy = std::max({t.y_min - centre.y(), 0.0, centre.y() - (t.y_min + meta.y_resolution)});
  return std::hypot(dx, dy);
}

ReadOptions tiled_map_read_options(const TiledMapMetadata& meta, const ReadOptions& options) {
  ReadOptions ro = options;
  if (ro.origin_policy == OriginPolicy::Auto) {
    // One origin for every tile: zero, or for a map far out (UTM) a middle tile's corner,
    // the per-axis median of the corners (the lower one for an even count): a corner, so
    // tile borders stay on the points' lattice, and the same whatever the order of the
    // metadata's lines (as a cloud's own origin is the same whatever its points' order).
    ro.origin_policy = OriginPolicy::Fixed;
    ro.origin = Eigen::Vector3d::Zero();
    std::vector<double> xs, ys;
    for (const MapTile& t : meta.tiles) {
      xs.push_back(t.x_min);
      ys.push_back(t.y_min);
    }
    if (!xs.empty()) {
      const auto middle = static_cast<std::ptrdiff_t>((xs.size() - 1) / 2);
      std::nth_element(xs.begin(), xs.begin() + middle, xs.end());
      std::nth_element(ys.begin(), ys.begin() + middle, ys.end());
      const double x = xs[static_cast<std::size_t>(middle)], y = ys[static_cast<std::size_t>(middle)];
      if (std::abs(x) > ro.auto_origin_threshold || std::abs(y) > ro.auto_origin_threshold) {
        ro.origin = Eigen::Vector3d(x, y, 0.0);
      }
    }
  }
  return ro;
}

TiledMapRead read_tiled_map(const std::string& dir, const Eigen::Vector2d& centre, double radius,
                            const ReadOptions& options) {
  if (!(radius >= 0.0) || std::isnan(radius)) throw Error(fmt::format("tiled map: radius must be >= 0, got {}", radius));
  if (!centre.allFinite()) throw Error("tiled map: the centre must be finite");
  const TiledMapMetadata meta = read_tiled_map_metadata(dir, false);
  const ReadOptions ro = tiled_map_read_options(meta, options);
  TiledMapRead out;
  out.cloud.origin = ro.origin_policy == OriginPolicy::Fixed ? ro.origin : Eigen::Vector3d::Zero();
  const fs::path base = metadata_path(dir).parent_path();
  for (const MapTile& t : meta.tiles) {
    if (tile_distance(meta, t, centre) > radius) continue;
    const std::string path = (base / t.file).string();
    PointCloud tile;
    try {
      tile = read_point_cloud(path, ro);
    } catch (const Error& e) {
      detail::log().warn("tiled map: tile {} (line {} of {}) skipped: {}", t.file, t.line, kTiledMapMetadataFile,
                         e.what());
      out.skipped.push_back(t.file);
      continue;
    }
    if (ro.origin_policy != OriginPolicy::Fixed && out.loaded.empty()) out.cloud.origin = tile.origin;
    if (tile.origin != out.cloud.origin) {
      // A caller's own non-Fixed policy gave this tile another origin: bring it onto the first's.
      for (auto& p : tile.points) p = ((tile.origin - out.cloud.origin) + p.cast<double>()).cast<float>();
    }
    const bool with_intensity = tile.has_intensity() && (out.loaded.empty() || out.cloud.has_intensity());
    if (!with_intensity && out.cloud.has_intensity()) out.cloud.intensity.clear();
    out.cloud.points.insert(out.cloud.points.end(), tile.points.begin(), tile.points.end());
    if (with_intensity) out.cloud.intensity.insert(out.cloud.intensity.end(), tile.intensity.begin(), tile.intensity.end());
    out.loaded.push_back(t.file);
  }
  return out;
}

}  // namespace ndtcu
