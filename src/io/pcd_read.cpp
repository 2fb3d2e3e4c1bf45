// PCD reader: ascii (one point a line, exactly its values), binary and binary_compressed
// (LZF) bodies, any field order, F/I/U fields of 1, 2, 4 or 8 bytes, COUNT > 1, '_'
// padding, organized clouds. Format as PCL writes it (PCD v0.7); binary_compressed stores each field's values for all points
// contiguously (field after field), preceded by two uint32: compressed and uncompressed
// sizes.
#include "bytes.hpp"
#include "cloud_builder.hpp"
#include "point_time.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/text.hpp>

#include <lzf.h>

#include <algorithm>
#include <limits>
#include <string>

namespace ndtcu {
namespace {

using detail::ScalarKind;

struct PcdField {
  std::string name;
  char type = 'F';
  int size = 4;
  std::uint64_t count = 1;
  std::uint64_t offset = 0;  // bytes from the start of a point (binary layout)
  std::uint64_t first_value = 0;  // index of its first value in an ascii line
  ScalarKind kind = ScalarKind::F32;
};

struct PcdHeader {
  std::vector<PcdField> fields;
  std::uint64_t width = 0, height = 0, points = 0;
  bool has_width = false, has_height = false, has_points = false;
  std::string data;
  std::size_t body_offset = 0;
  std::uint64_t point_step = 0;  // bytes per point
  std::uint64_t values_per_point = 0;
};

// Fields count up to 2^20 values per point: far beyond any real descriptor (FPFH has 33,
// SHOT 352) and small enough that per-point arithmetic cannot overflow.
constexpr std::uint64_t kMaxCount = 1u << 20;

[[noreturn]] void fail(const std::string& name, const std::string& why) { throw IoError(name, why); }

std::uint64_t header_number(const std::string& name, std::string_view key, std::string_view token) {
  std::uint64_t v = 0;
  if (!detail::parse_u64(token, v)) {
    fail(name, std::string(key) + " value '" + std::string(token) + "' is not a non-negative integer");
  }
  return v;
}

void expect_field_tokens(const std::string& name, std::string_view key, std::size_t got, std::size_t fields) {
  if (fields == 0) fail(name, std::string(key) + " comes before FIELDS in the header");
  if (got != fields) {
    fail(name, std::string(key) + " lists " + std::to_string(got) + " values but FIELDS names " +
                   std::to_string(fields) + " fields");
  }
}

PcdHeader parse_header(std::string_view bytes, const std::string& name) {
  PcdHeader h;
  detail::LineReader lines(bytes);
  std::string_view line;
  std::vector<std::string_view> tok;
  bool have_size = false, have_type = false;
  std::vector<int> sizes;
  std::vector<char> types;
  while (lines.next(line)) {
    detail::split_tokens(line, tok);
    if (tok.empty() || tok[0].front() == '#') continue;
    std::string_view key = tok[0];
    std::size_t nvals = tok.size() - 1;
    if (key == "VERSION") continue;
    if (key == "FIELDS" || key == "COLUMNS") {
      if (nvals == 0) fail(name, "FIELDS line names no field");
      h.fields.assign(nvals, PcdField{});
      for (std::size_t i = 0; i < nvals; ++i) {
        h.fields[i].name = std::string(tok[i + 1]);
        // A name twice: which one is x? ('_' is PCL's padding, as often as it pads.)
        for (std::size_t j = 0; j < i; ++j) {
          if (h.fields[j].name == h.fields[i].name && h.fields[i].name != "_") {
            fail(name, "FIELDS names '" + h.fields[i].name + "' twice (fields " + std::to_string(j + 1) + " and " +
                           std::to_string(i + 1) + ")");
          }
        }
      }
    } else if (key == "SIZE") {
      expect_field_tokens(name, key, nvals, h.fields.size());
      for (std::size_t i = 0; i < nvals; ++i) {
        std::uint64_t s = header_number(name, "SIZE", tok[i + 1]);
        if (s != 1 && s != 2 && s != 4 && s != 8) {
          fail(name, "field '" + h.fields[i].name + "' has SIZE " + std::string(tok[i + 1]) +
                         "; PCD sizes are 1, 2, 4 or 8");
        }
        h.fields[i].size = static_cast<int>(s);
      }
      have_size = true;
    } else if (key == "TYPE") {
      expect_field_tokens(name, key, nvals, h.fields.size());
      for (std::size_t i = 0; i < nvals; ++i) {
        std::string_view t = tok[i + 1];
        if (t.size() != 1 || (t[0] != 'F' && t[0] != 'I' && t[0] != 'U')) {
          fail(name, "field '" + h.fields[i].name + "' has TYPE '" + std::string(t) + "'; PCD types are F, I or U");
        }
        h.fields[i].type = t[0];
      }
      have_type = true;
    } else if (key == "COUNT") {
      expect_field_tokens(name, key, nvals, h.fields.size());
      for (std::size_t i = 0; i < nvals; ++i) {
        std::uint64_t c = header_number(name, "COUNT", tok[i + 1]);
        if (c == 0 || c > kMaxCount) {
          fail(name, "field '" + h.fields[i].name + "' has COUNT " + std::string(tok[i + 1]) + " (must be 1 to " +
                         std::to_string(kMaxCount) + ")");
        }
        h.fields[i].count = c;
      }
    } else if (key == "WIDTH") {
      if (nvals != 1) fail(name, "WIDTH needs one value");
      h.width = header_number(name, "WIDTH", tok[1]);
      h.has_width = true;
    } else if (key == "HEIGHT") {
      if (nvals != 1) fail(name, "HEIGHT needs one value");
      h.height = header_number(name, "HEIGHT", tok[1]);
      h.has_height = true;
    } else if (key == "VIEWPOINT") {
      if (nvals != 7) fail(name, "VIEWPOINT needs 7 values (tx ty tz qw qx qy qz), found " + std::to_string(nvals));
    } else if (key == "POINTS") {
      if (nvals != 1) fail(name, "POINTS needs one value");
      h.points = header_number(name, "POINTS", tok[1]);
      h.has_points = true;
    } else if (key == "DATA") {
      if (nvals != 1) fail(name, "DATA needs one value (ascii, binary or binary_compressed)");
      h.data = std::string(tok[1]);
      if (h.data != "ascii" && h.data != "binary" && h.data != "binary_compressed") {
        fail(name, "DATA '" + h.data + "' is not ascii, binary or binary_compressed");
      }
      h.body_offset = lines.position();
      break;
    } else if (lines.position() >= bytes.size()) {
      fail(name, "truncated: the PCD header ends before its DATA line");
    } else {
      std::string shown(key.substr(0, 40));
      fail(name, "not a PCD file: unexpected header line starting with '" + shown + "'");
    }
  }
  if (h.data.empty()) fail(name, "truncated: the PCD header ends before its DATA line");
  if (h.fields.empty()) fail(name, "PCD header has no FIELDS line");
  (void)have_size;
  (void)have_type;
  // Sizes and counts default to 4 bytes F and 1, as PCL does for old files.
  std::uint64_t offset = 0, values = 0;
  for (auto& f : h.fields) {
    f.kind = detail::scalar_kind(f.type, f.size);
    if (f.kind == ScalarKind::Invalid) {
      fail(name, "field '" + f.name + "' has TYPE " + std::string(1, f.type) + " with SIZE " + std::to_string(f.size) +
                     "; F needs SIZE 4 or 8");
    }
    f.offset = offset;
    f.first_value = values;
    offset += f.count * static_cast<std::uint64_t>(f.size);
    values += f.count;
  }
  h.point_step = offset;
  h.values_per_point = values;

  if (!h.has_width && !h.has_points) fail(name, "PCD header has neither WIDTH nor POINTS");
  if (!h.has_width) h.width = h.points;
  if (!h.has_height) h.height = 1;
  if (h.height == 0 && h.width != 0) fail(name, "HEIGHT is 0 but WIDTH is " + std::to_string(h.width));
  // WIDTH and HEIGHT are each below 2^32 in any sane file; guard the product anyway.
  if (h.height != 0 && h.width > std::numeric_limits<std::uint64_t>::max() / h.height) {
    fail(name, "WIDTH x HEIGHT overflows");
  }
  std::uint64_t wh = h.width * h.height;
  if (!h.has_points) h.points = wh;
  if (h.points != wh) {
    fail(name, "POINTS (" + std::to_string(h.points) + ") disagrees with WIDTH x HEIGHT (" + std::to_string(h.width) +
                   " x " + std::to_string(h.height) + " = " + std::to_string(wh) + ")");
  }
  return h;
}

struct Channels {
  const PcdField* xyz[3] = {nullptr, nullptr, nullptr};
  const PcdField* intensity = nullptr;
  const PcdField* time = nullptr;  // the per-point time, when read
};

Channels find_channels(const PcdHeader& h, const std::string& name, const ReadOptions& options) {
  Channels c;
  const char* axis[3] = {"x", "y", "z"};
  int best = 1 << 30;
  for (const auto& f : h.fields) {
    for (int a = 0; a < 3; ++a) {
      if (f.name == axis[a] && !c.xyz[a]) c.xyz[a] = &f;
    }
    int rank = detail::intensity_rank(f.name);
    if (options.read_intensity && rank >= 0 && rank < best) {
      best = rank;
      c.intensity = &f;
    }
  }
  std::string missing;
  for (int a = 0; a < 3; ++a) {
    if (!c.xyz[a]) missing += missing.empty() ? axis[a] : std::string(", ") + axis[a];
  }
  if (!missing.empty()) {
    std::string have;
    for (const auto& f : h.fields) have += (have.empty() ? "" : " ") + f.name;
    fail(name, "PCD has no field " + missing + " (fields: " + have + ")");
  }
  std::vector<detail::TimeFieldCandidate> candidates;
  for (const auto& f : h.fields) candidates.push_back({f.name, f.kind, f.count});
  const int time = detail::choose_time_field(candidates, options, name);
  if (time >= 0) c.time = &h.fields[static_cast<std::size_t>(time)];
  // A coordinate is one value: of x with COUNT 3, which would be the point's x?
  for (int a = 0; a < 3; ++a) {
    if (c.xyz[a]->count != 1) {
      fail(name, std::string("field '") + axis[a] + "' has COUNT " + std::to_string(c.xyz[a]->count) +
                     "; x, y and z hold one value each (COUNT 1)");
    }
  }
  return c;
}

void fill_info(CloudInfo* info, const PcdHeader& h, const Channels& c) {
  if (!info) return;
  info->format = FileFormat::Pcd;
  info->encoding = h.data;
  info->fields.clear();
  for (const auto& f : h.fields) info->fields.push_back({f.name, f.type, f.size, static_cast<int>(f.count)});
  info->width = h.width;
  info->height = h.height;
  info->points_in_file = h.points;
  info->intensity_field = c.intensity ? c.intensity->name : "";
}

bool is_double(const Channels& c) {
  return c.xyz[0]->kind == ScalarKind::F64 || c.xyz[1]->kind == ScalarKind::F64 || c.xyz[2]->kind == ScalarKind::F64;
}

// Point-interleaved bytes (binary) or field-major bytes (decompressed binary_compressed):
// value of field f for point k lives at base(f) + k * stride(f). Fields x, y, z, intensity,
// time.
struct Layout {
  const char* base[5];
  std::uint64_t stride[5];
  ScalarKind kind[5];
};

void read_values(const Layout& l, std::uint64_t n, bool with_intensity, bool with_time, detail::CloudBuilder& out) {
  // The common case (float32 x y z) gets its own loop so the type switch stays out of it.
  bool all_f32 = l.kind[0] == ScalarKind::F32 && l.kind[1] == ScalarKind::F32 && l.kind[2] == ScalarKind::F32;
  for (std::uint64_t k = 0; k < n; ++k) {
    double v[3];
    if (all_f32) {
      for (int a = 0; a < 3; ++a) v[a] = detail::load_raw<float>(l.base[a] + k * l.stride[a], false);
    } else {
      for (int a = 0; a < 3; ++a) v[a] = detail::load_scalar(l.base[a] + k * l.stride[a], l.kind[a]);
    }
    double intensity = with_intensity ? detail::load_scalar(l.base[3] + k * l.stride[3], l.kind[3]) : 0.0;
    double time = with_time ? detail::load_scalar(l.base[4] + k * l.stride[4], l.kind[4]) : 0.0;
    out.add(v[0], v[1], v[2], intensity, time);
  }
}

// One point a line, each line holding exactly the values the fields declare (a short or a
// long line is an error naming it: values are never carried over from one line to the
// next). `first_line` is the file's line number of the body's first line.
void read_ascii(const PcdHeader& h, const Channels& c, std::string_view body, std::size_t first_line,
                const std::string& name, detail::CloudBuilder& out) {
  detail::LineReader lines(body);
  std::string_view line;
  std::vector<std::string_view> tok;
  std::uint64_t want[5] = {c.xyz[0]->first_value, c.xyz[1]->first_value, c.xyz[2]->first_value,
                           c.intensity ? c.intensity->first_value : 0, c.time ? c.time->first_value : 0};
  std::uint64_t done = 0;
  std::size_t line_no = first_line - 1;
  while (done < h.points && lines.next(line)) {
    ++line_no;
    // One more than the fields need is enough to tell a long line.
    detail::split_tokens(line, tok, h.values_per_point + 1);
    if (tok.empty()) continue;
    if (tok.size() != h.values_per_point) {
      if (tok.size() < h.values_per_point && lines.position() >= body.size() &&
          (body.empty() || body.back() != '\n')) {
        fail(name, "truncated: the ascii body ends inside point " + std::to_string(done) + " of " +
                       std::to_string(h.points) + " (line " + std::to_string(line_no) + ")");
      }
      fail(name, "line " + std::to_string(line_no) + ": ascii point " + std::to_string(done) + " has " +
                     (tok.size() > h.values_per_point ? "more than " + std::to_string(h.values_per_point)
                                                      : std::to_string(tok.size())) +
                     " values; the fields need " + std::to_string(h.values_per_point) + " on each line");
    }
    double v[5] = {0, 0, 0, 0, 0};
    const PcdField* read[5] = {c.xyz[0], c.xyz[1], c.xyz[2], c.intensity, c.time};
    for (int a = 0; a < 5; ++a) {
      if (!read[a]) continue;
      if (!detail::parse_double(tok[want[a]], v[a])) {
        fail(name, "line " + std::to_string(line_no) + ": ascii point " + std::to_string(done) + ": '" +
                       std::string(tok[want[a]].substr(0, 40)) + "' is not a number");
      }
      if (!detail::fits_kind(v[a], read[a]->kind)) {
        fail(name, "line " + std::to_string(line_no) + ": ascii point " + std::to_string(done) + ": field '" +
                       read[a]->name + "': " + detail::kind_refusal(tok[want[a]], read[a]->kind));
      }
    }
    out.add(v[0], v[1], v[2], v[3], v[4]);
    ++done;
  }
  if (done < h.points) {
    fail(name, "truncated: the ascii body holds " + std::to_string(done) + " of the " + std::to_string(h.points) +
                   " points the header declares");
  }
  // Nothing but blank lines after the last point: a row more than POINTS says is a file
  // whose header and body disagree (which of them is right?).
  while (lines.next(line)) {
    ++line_no;
    detail::split_tokens(line, tok, 1);
    if (!tok.empty()) {
      fail(name, "line " + std::to_string(line_no) + ": a row after the " + std::to_string(h.points) +
                     " points the header declares (POINTS and WIDTH x HEIGHT must count every row)");
    }
  }
}

}  // namespace

PointCloud parse_pcd(std::string_view bytes, const std::string& name, const ReadOptions& options, CloudInfo* info) {
  if (bytes.empty()) throw IoError(name, "empty file (0 bytes)");
  // A byte-order mark before the header (a header written with a text editor) is skipped.
  bytes = without_bom(bytes);
  PcdHeader h = parse_header(bytes, name);
  Channels c = find_channels(h, name, options);
  fill_info(info, h, c);
  std::string_view body = bytes.substr(h.body_offset);
  bool with_intensity = c.intensity != nullptr;
  const bool with_time = c.time != nullptr;
  // The builder for `expected` points, keeping the time when it is read.
  const auto builder = [&](std::uint64_t expected) {
    detail::CloudBuilder b(options, with_intensity, expected);
    if (with_time) b.keep_time(c.time->name, c.time->kind);
    return b;
  };

  if (h.data == "ascii") {
    // Each ascii point takes at least two bytes per value ("0 "), so the body bounds the
    // reservation whatever POINTS claims.
    std::uint64_t can_hold = body.size() / std::max<std::uint64_t>(1, 2 * h.values_per_point - 1) + 1;
    detail::CloudBuilder out = builder(std::min(h.points, can_hold));
    read_ascii(h, c, body, detail::line_number(bytes, h.body_offset), name, out);
    return out.finish(name, is_double(c), info);
  }

  // Bytes the body must hold: checked against the file before anything is allocated.
  if (h.point_step != 0 && h.points > std::numeric_limits<std::uint64_t>::max() / h.point_step) {
    fail(name, "POINTS x point size overflows");
  }
  std::uint64_t payload = h.points * h.point_step;

  if (h.data == "binary") {
    if (payload > body.size()) {
      fail(name, "truncated: the header declares " + std::to_string(h.points) + " points of " +
                     std::to_string(h.point_step) + " bytes (" + std::to_string(payload) +
                     " bytes) but only " + std::to_string(body.size()) + " bytes follow the header");
    }
    if (body.size() > payload) {
      fail(name, std::to_string(body.size() - payload) + " bytes follow the " + std::to_string(h.points) + " points of " +
                     std::to_string(h.point_step) + " bytes the header declares (a binary body holds exactly " +
                     std::to_string(payload) + " bytes)");
    }
    Layout l{};
    for (int a = 0; a < 5; ++a) {
      const PcdField* f = a < 3 ? c.xyz[a] : a == 3 ? (c.intensity ? c.intensity : c.xyz[0]) : (c.time ? c.time : c.xyz[0]);
      l.base[a] = body.data() + f->offset;
      l.stride[a] = h.point_step;
      l.kind[a] = f->kind;
    }
    detail::CloudBuilder out = builder(h.points);
    read_values(l, h.points, with_intensity, with_time, out);
    return out.finish(name, is_double(c), info);
  }

  // binary_compressed
  if (body.size() < 8) fail(name, "truncated: binary_compressed body is shorter than its 8-byte size header");
  std::uint32_t compressed = detail::load_raw<std::uint32_t>(body.data(), false);
  std::uint32_t uncompressed = detail::load_raw<std::uint32_t>(body.data() + 4, false);
  if (compressed > body.size() - 8) {
    fail(name, "truncated: the LZF block declares " + std::to_string(compressed) + " compressed bytes but only " +
                   std::to_string(body.size() - 8) + " follow");
  }
  // Bytes after the LZF block are read past, as PCL's reader does: files PCL wrote carry
  // them (the room_scan pair of PCL's own tutorial data: 3911 bytes after its block), so
  // refusing them would refuse real scans. A plain binary body must end with its points.
  if (uncompressed != payload) {
    fail(name, "corrupt binary_compressed header: uncompressed size " + std::to_string(uncompressed) +
                   " disagrees with " + std::to_string(h.points) + " points x " + std::to_string(h.point_step) +
                   " bytes = " + std::to_string(payload));
  }
  // An LZF back-reference expands 3 bytes into at most 264, so no valid block grows more
  // than 88-fold: a larger claim is corrupt and is refused before allocating.
  constexpr std::uint64_t kLzfMaxExpansion = 88;
  if (payload > static_cast<std::uint64_t>(compressed) * kLzfMaxExpansion + 8) {
    fail(name, "corrupt LZF block: " + std::to_string(compressed) + " compressed bytes cannot hold the " +
                   std::to_string(payload) + " bytes the header declares");
  }
  std::vector<char> raw(payload);
  if (payload > 0) {
    unsigned got = lzf_decompress(body.data() + 8, compressed, raw.data(), static_cast<unsigned>(payload));
    if (got != payload) {
      fail(name, "corrupt LZF block: decompressed " + std::to_string(got) + " of " + std::to_string(payload) +
                     " bytes");
    }
  }
  // Field-major layout: field i occupies points * (size * count) bytes after the fields
  // before it.
  Layout l{};
  for (int a = 0; a < 5; ++a) {
    const PcdField* f = a < 3 ? c.xyz[a] : a == 3 ? (c.intensity ? c.intensity : c.xyz[0]) : (c.time ? c.time : c.xyz[0]);
    l.base[a] = raw.data() + f->offset * h.points;
    l.stride[a] = f->count * static_cast<std::uint64_t>(f->size);
    l.kind[a] = f->kind;
  }
  detail::CloudBuilder out = builder(h.points);
  read_values(l, h.points, with_intensity, with_time, out);
  return out.finish(name, is_double(c), info);
}

}  // namespace ndtcu
