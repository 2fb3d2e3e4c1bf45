// Tiled maps in Autoware's layout (see include/ndtcu/tiled_map.hpp).
#include <ndtcu/error.hpp>
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
  return m;
}

TiledMapMetadata write_tiled_map(const PointCloud& map, double tile_size, const std::string& dir,
                                 const WriteOptions& options) {
  if (!(tile_size > 0.0) || !std::isfinite(tile_size)) {
    throw Error(fmt::format("tile size must be a positive finite number (m), got {}", tile_size));
  }
  // The tile of every point, by its world x-y (in double: a UTM map keeps its corners).
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::uint32_t>> members;
  for (std::size_t i = 0; i < map.size(); ++i) {
    const Eigen::Vector3d w = map.world(i);
    const double fx = std::floor(w.x() / tile_size), fy = std::floor(w.y() / tile_size);
    if (!(std::abs(fx) < 9e15 && std::abs(fy) < 9e15)) {
      throw Error(fmt::format("tiling: point {} at ({}, {}) is too far out for tiles of {} m", i, w.x(), w.y(), tile_size));
    }
    auto& m = members[{static_cast<std::int64_t>(fx), static_cast<std::int64_t>(fy)}];
    if (m.empty() && members.size() > 1000000) {
      throw Error(fmt::format("tiling: more than 1,000,000 tiles of {} m; use a larger tile size", tile_size));
    }
    m.push_back(static_cast<std::uint32_t>(i));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw IoError(dir, "cannot create folder" + (ec ? ": " + ec.message() : ""));
  TiledMapMetadata meta;
  meta.x_resolution = meta.y_resolution = tile_size;
  std::string yaml = fmt::format("x_resolution: {}\ny_resolution: {}\n", tile_size, tile_size);
  for (const auto& [index, points] : members) {
    MapTile t;
    t.x_min = static_cast<double>(index.first) * tile_size;
    t.y_min = static_cast<double>(index.second) * tile_size;
    t.file = corner_text(t.x_min) + "_" + corner_text(t.y_min) + ".pcd";
    PointCloud tile;
    tile.origin = map.origin;
    tile.points.reserve(points.size());
    for (std::uint32_t i : points) tile.points.push_back(map.points[i]);
    if (map.has_intensity()) {
      tile.intensity.reserve(points.size());
      for (std::uint32_t i : points) tile.intensity.push_back(map.intensity[i]);
    }
    write_pcd((fs::path(dir) / t.file).string(), tile, options);
    yaml += fmt::format("{}: [{}, {}]\n", t.file, corner_text(t.x_min), corner_text(t.y_min));
    meta.tiles.push_back(std::move(t));
  }
  const fs::path meta_file = fs::path(dir) / kTiledMapMetadataFile;
  std::ofstream out(meta_file, std::ios::binary);
  out << yaml;
  out.close();
  if (!out) throw IoError(meta_file.string(), "write error");
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
    // One origin for every tile: zero, or the first tile's corner for a map far out (UTM).
    ro.origin_policy = OriginPolicy::Fixed;
    ro.origin = Eigen::Vector3d::Zero();
    for (const MapTile& t : meta.tiles) {
      if (std::abs(t.x_min) > ro.auto_origin_threshold || std::abs(t.y_min) > ro.auto_origin_threshold) {
        ro.origin = Eigen::Vector3d(meta.tiles.front().x_min, meta.tiles.front().y_min, 0.0);
        break;
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
