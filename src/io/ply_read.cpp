// PLY reader: ascii (one record a line, exactly its values), binary_little_endian and
// binary_big_endian; the `vertex` element's x y z (any numeric type) and intensity; every
// other property and element is skipped, list properties included.
#include "bytes.hpp"
#include "cloud_builder.hpp"
#include "point_time.hpp"

#include <ndtcu/io.hpp>
#include <ndtcu/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>

namespace ndtcu {
namespace {

using detail::ScalarKind;

struct PlyProperty {
  std::string name;
  bool is_list = false;
  ScalarKind count_kind = ScalarKind::U8;  // list length type
  ScalarKind kind = ScalarKind::F32;       // value type (items for a list)
};

struct PlyElement {
  std::string name;
  std::uint64_t count = 0;
  std::vector<PlyProperty> properties;
};

enum class PlyFormat { Ascii, BinaryLittle, BinaryBig };

[[noreturn]] void fail(const std::string& name, const std::string& why) { throw IoError(name, why); }

ScalarKind ply_kind(std::string_view t) {
  if (t == "char" || t == "int8") return ScalarKind::I8;
  if (t == "uchar" || t == "uint8") return ScalarKind::U8;
  if (t == "short" || t == "int16") return ScalarKind::I16;
  if (t == "ushort" || t == "uint16") return ScalarKind::U16;
  if (t == "int" || t == "int32") return ScalarKind::I32;
  if (t == "uint" || t == "uint32") return ScalarKind::U32;
  if (t == "float" || t == "float32") return ScalarKind::F32;
  if (t == "double" || t == "float64") return ScalarKind::F64;
  return ScalarKind::Invalid;
}

std::uint64_t kind_size(ScalarKind k) {
  switch (k) {
    case ScalarKind::I8: case ScalarKind::U8: return 1;
    case ScalarKind::I16: case ScalarKind::U16: return 2;
    case ScalarKind::I32: case ScalarKind::U32: case ScalarKind::F32: return 4;
    default: return 8;
  }
}

char kind_letter(ScalarKind k) {
  if (k == ScalarKind::F32 || k == ScalarKind::F64) return 'F';
  if (k == ScalarKind::I8 || k == ScalarKind::I16 || k == ScalarKind::I32 || k == ScalarKind::I64) return 'I';
  return 'U';
}

ScalarKind checked_kind(const std::string& name, std::string_view type, std::string_view prop) {
  ScalarKind k = ply_kind(type);
  if (k == ScalarKind::Invalid) {
    fail(name, "property '" + std::string(prop) + "' has unknown PLY type '" + std::string(type.substr(0, 40)) + "'");
  }
  return k;
}

// Cursor over the body: binary reads with bounds checks, or ascii records, one a line.
class Body {
 public:
  /// `first_line`: the file's line number of the body's first line (for ascii messages).
  Body(std::string_view bytes, PlyFormat format, const std::string& name, std::size_t first_line)
      : bytes_(bytes), format_(format), name_(name), line_no_(first_line - 1) {}

  std::size_t remaining() const { return bytes_.size() - pos_; }

  /// Ascii: moves to the next record's line (blank lines are passed over), `record`
  /// naming it for the messages ("vertex 12"); nothing for binary.
  void begin_record(const std::string& record) {
    if (format_ != PlyFormat::Ascii) return;
    record_ = record;
    std::string_view line;
    do {
      if (pos_ >= bytes_.size()) fail(name_, "truncated: the ascii body ends before " + record_);
      std::size_t end = bytes_.find('\n', pos_);
      if (end == std::string_view::npos) end = bytes_.size();
      line = bytes_.substr(pos_, end - pos_);
      pos_ = std::min(bytes_.size(), end + 1);
      ++line_no_;
      detail::split_tokens(line, tokens_);
    } while (tokens_.empty());
    next_token_ = 0;
  }

  /// Ascii: the record's line must hold no value beyond its properties'.
  void end_record() {
    if (format_ != PlyFormat::Ascii || next_token_ == tokens_.size()) return;
    fail(name_, where() + " has " + std::to_string(tokens_.size()) +
                    " values, more than its properties take (" + std::to_string(next_token_) +
                    "); an ascii PLY holds one record a line");
  }

  /// One value: `what` names it for the messages, `property` (when not null) the
  /// property it belongs to.
  double value(ScalarKind k, const char* what, const std::string* property = nullptr) {
    if (format_ == PlyFormat::Ascii) {
      const auto shown = [&] { return property ? "property '" + *property + "'" : std::string(what); };
      if (next_token_ == tokens_.size()) {
        fail(name_, where() + " ends after " + std::to_string(tokens_.size()) +
                        " values, before " + shown() + "; an ascii PLY holds one record a line");
      }
      std::string_view t = tokens_[next_token_++];
      double v = 0;
      if (!detail::parse_double(t, v)) {
        fail(name_, where() + ": " + shown() + " '" +
                        std::string(t.substr(0, 40)) + "' is not a number");
      }
      if (!detail::fits_kind(v, k)) fail(name_, where() + ": " + shown() + " " + detail::kind_refusal(t, k));
      return v;
    }
    std::uint64_t n = kind_size(k);
    if (remaining() < n) fail(name_, std::string("truncated: the binary body ends inside ") + what);
    double v = detail::load_scalar(bytes_.data() + pos_, k, format_ == PlyFormat::BinaryBig);
    pos_ += n;
    return v;
  }

  /// Ascii: "line N: RECORD", where the current record is, for a message.
  std::string where() const { return "line " + std::to_string(line_no_) + ": " + record_; }

  /// Ascii: values left on the record's line.
  std::size_t values_left() const { return tokens_.size() - next_token_; }

  void skip_binary(std::uint64_t n, const char* what) {
    if (remaining() < n) fail(name_, std::string("truncated: the binary body ends inside ") + what);
    pos_ += n;
  }

  /// After the last element: nothing may follow but blank lines (ascii) or nothing at all
  /// (binary); a record more than the header counts is a file at odds with itself.
  void expect_end() {
    if (format_ != PlyFormat::Ascii) {
      if (remaining() > 0) {
        fail(name_, std::to_string(remaining()) + " bytes follow the last element the header declares (a binary "
                                                  "body holds exactly its records)");
      }
      return;
    }
    while (pos_ < bytes_.size()) {
      std::size_t end = bytes_.find('\n', pos_);
      if (end == std::string_view::npos) end = bytes_.size();
      const std::string_view line = bytes_.substr(pos_, end - pos_);
      pos_ = std::min(bytes_.size(), end + 1);
      ++line_no_;
      detail::split_tokens(line, tokens_, 1);
      if (!tokens_.empty()) {
        fail(name_, "line " + std::to_string(line_no_) + ": a record after the last element the header declares "
                                                          "(each element's count must count its records)");
      }
    }
  }

  const char* data() const { return bytes_.data() + pos_; }
  bool big_endian() const { return format_ == PlyFormat::BinaryBig; }
  bool ascii() const { return format_ == PlyFormat::Ascii; }

 private:
  std::string_view bytes_;
  std::size_t pos_ = 0;
  PlyFormat format_;
  const std::string& name_;
  std::size_t line_no_;                  // ascii: the line of the current record
  std::vector<std::string_view> tokens_;  // ascii: the current record's values
  std::size_t next_token_ = 0;
  std::string record_;
};

// Skips one list property of one record (its length, then its items).
void skip_list(Body& body, const PlyProperty& p, const std::string& name) {
  double len = body.value(p.count_kind, "a list length");
  if (!(len >= 0) || len > static_cast<double>(std::numeric_limits<std::uint32_t>::max())) {
    fail(name, "list property '" + p.name + "' has invalid length " + fmt::format("{}", len));
  }
  auto n = static_cast<std::uint64_t>(len);
  // Lengths are bounded by the remaining bytes (ascii: values on the line), so a bogus
  // length cannot loop for long.
  if (body.ascii() && n > body.values_left()) {
    fail(name, body.where() + ": list property '" + p.name + "' claims " + std::to_string(n) + " items, the line holds " +
                   std::to_string(body.values_left()) + " more values");
  }
  if (!body.ascii() && n > body.remaining()) {
    fail(name, "truncated: list property '" + p.name + "' claims " + std::to_string(n) + " items");
  }
  for (std::uint64_t i = 0; i < n; ++i) body.value(p.kind, "a list item");
}

bool fixed_size(const PlyElement& e, std::uint64_t& record) {
  record = 0;
  for (const auto& p : e.properties) {
    if (p.is_list) return false;
    record += kind_size(p.kind);
  }
  return true;
}

/// The header: the body's format and the elements in the order they are stored.
struct PlyHeader {
  PlyFormat format = PlyFormat::Ascii;
  std::vector<PlyElement> elements;
  std::size_t body_offset = 0;  ///< the byte after the end_header line
};

PlyProperty parse_property(const std::vector<std::string_view>& tok, std::string_view line, const std::string& name) {
  PlyProperty p;
  if (tok.size() == 5 && tok[1] == "list") {
    p.is_list = true;
    p.name = std::string(tok[4]);
    p.count_kind = checked_kind(name, tok[2], p.name);
    p.kind = checked_kind(name, tok[3], p.name);
    if (p.count_kind == ScalarKind::F32 || p.count_kind == ScalarKind::F64) {
      fail(name, "list property '" + p.name + "' has a floating-point length type");
    }
  } else if (tok.size() == 3) {
    p.name = std::string(tok[2]);
    p.kind = checked_kind(name, tok[1], p.name);
  } else {
    fail(name, "malformed PLY property line '" + std::string(line.substr(0, 80)) + "'");
  }
  return p;
}

PlyHeader read_header(std::string_view bytes, const std::string& name) {
  detail::LineReader lines(bytes);
  std::string_view line;
  if (!lines.next(line) || line != "ply") fail(name, "not a PLY file: the first line is not 'ply'");
  std::vector<std::string_view> tok;
  PlyHeader h;
  bool have_format = false, ended = false;
  while (lines.next(line)) {
    detail::split_tokens(line, tok);
    if (tok.empty()) continue;
    std::string_view key = tok[0];
    if (key == "comment" || key == "obj_info") continue;
    if (key == "format") {
      if (tok.size() < 2) fail(name, "PLY format line has no format");
      if (tok[1] == "ascii") h.format = PlyFormat::Ascii;
      else if (tok[1] == "binary_little_endian") h.format = PlyFormat::BinaryLittle;
      else if (tok[1] == "binary_big_endian") h.format = PlyFormat::BinaryBig;
      else fail(name, "unknown PLY format '" + std::string(tok[1].substr(0, 40)) + "'");
      have_format = true;
    } else if (key == "element") {
      if (tok.size() != 3) fail(name, "PLY element line needs a name and a count");
      PlyElement e;
      e.name = std::string(tok[1]);
      if (!detail::parse_u64(tok[2], e.count)) {
        fail(name, "element '" + e.name + "' count '" + std::string(tok[2].substr(0, 40)) + "' is not a non-negative integer");
      }
      h.elements.push_back(std::move(e));
    } else if (key == "property") {
      if (h.elements.empty()) fail(name, "PLY property line before any element");
      h.elements.back().properties.push_back(parse_property(tok, line, name));
    } else if (key == "end_header") {
      ended = true;
      break;
    } else {
      fail(name, "unexpected PLY header line '" + std::string(line.substr(0, 80)) + "'");
    }
  }
  if (!ended) fail(name, "PLY header has no end_header line (truncated?)");
  if (!have_format) fail(name, "PLY header has no format line");
  h.body_offset = lines.position();
  return h;
}

/// Which vertex properties are x, y, z, the intensity and the time (-1: none read).
struct VertexFields {
  int xyz[3] = {-1, -1, -1};
  int intensity = -1;
  int time = -1;
};

VertexFields vertex_fields(const PlyElement& vertex, const std::string& name, const ReadOptions& options) {
  VertexFields f;
  int best_rank = 1 << 30;
  const char* axis[3] = {"x", "y", "z"};
  for (int i = 0; i < static_cast<int>(vertex.properties.size()); ++i) {
    const auto& p = vertex.properties[i];
    // A name twice: which one is x?
    for (int j = 0; j < i; ++j) {
      if (vertex.properties[j].name == p.name) {
        fail(name, "vertex element names property '" + p.name + "' twice (properties " + std::to_string(j + 1) +
                       " and " + std::to_string(i + 1) + ")");
      }
    }
    for (int a = 0; a < 3; ++a) {
      if (p.name == axis[a] && f.xyz[a] < 0) {
        if (p.is_list) fail(name, std::string("vertex property ") + axis[a] + " is a list");
        f.xyz[a] = i;
      }
    }
    int rank = detail::intensity_rank(p.name);
    if (options.read_intensity && !p.is_list && rank >= 0 && rank < best_rank) {
      best_rank = rank;
      f.intensity = i;
    }
  }
  for (int a = 0; a < 3; ++a) {
    if (f.xyz[a] < 0) fail(name, std::string("PLY vertex element has no property ") + axis[a]);
  }
  std::vector<detail::TimeFieldCandidate> candidates;
  for (const auto& p : vertex.properties) candidates.push_back({p.name, p.kind, p.is_list ? 0u : 1u});
  f.time = detail::choose_time_field(candidates, options, name);
  return f;
}

void describe(CloudInfo& info, PlyFormat format, const PlyElement& vertex, int intensity) {
  info.format = FileFormat::Ply;
  info.encoding = format == PlyFormat::Ascii          ? "ascii"
                  : format == PlyFormat::BinaryLittle ? "binary_little_endian"
                                                      : "binary_big_endian";
  info.fields.clear();
  for (const auto& p : vertex.properties) {
    info.fields.push_back({p.name, kind_letter(p.kind), static_cast<int>(kind_size(p.kind)), 1});
  }
  info.width = vertex.count;
  info.height = 1;
  info.points_in_file = vertex.count;
  info.intensity_field = intensity >= 0 ? vertex.properties[intensity].name : "";
}

/// Reads past an element other than the vertices (those before them, and after them the
/// faces of a mesh).
void skip_element(Body& body, const PlyElement& e, PlyFormat format, const std::string& name) {
  // An element without properties has empty records, whatever its count: looping over
  // a count of 10^18 of them would hang.
  if (e.properties.empty()) return;
  std::uint64_t record = 0;
  if (format != PlyFormat::Ascii && fixed_size(e, record)) {
    if (record != 0 && e.count > body.remaining() / record) {
      fail(name, "truncated: element '" + e.name + "' declares " + std::to_string(e.count) + " records");
    }
    body.skip_binary(record * e.count, "an element other than the vertices");
    return;
  }
  for (std::uint64_t r = 0; r < e.count; ++r) {
    if (body.ascii()) body.begin_record("element '" + e.name + "' record " + std::to_string(r));
    for (const auto& p : e.properties) {
      if (p.is_list) skip_list(body, p, name);
      else body.value(p.kind, "an element other than the vertices", &p.name);
    }
    body.end_record();
  }
}

/// Fixed-size binary records: the wanted properties read straight from their offsets.
void read_fixed_vertices(Body& body, const PlyElement& vertex, std::uint64_t record, const VertexFields& f,
                         const std::string& name, detail::CloudBuilder& out) {
  std::uint64_t offsets[5] = {0, 0, 0, 0, 0};
  ScalarKind kinds[5] = {ScalarKind::F32, ScalarKind::F32, ScalarKind::F32, ScalarKind::F32, ScalarKind::F32};
  const int wanted[5] = {f.xyz[0], f.xyz[1], f.xyz[2], f.intensity, f.time};
  for (int w = 0; w < 5; ++w) {
    std::uint64_t off = 0;
    for (int i = 0; i < static_cast<int>(vertex.properties.size()); ++i) {
      if (i == wanted[w]) {
        offsets[w] = off;
        kinds[w] = vertex.properties[i].kind;
      }
      off += kind_size(vertex.properties[i].kind);
    }
  }
  if (vertex.count > body.remaining() / record) {
    fail(name, "truncated: the header declares " + std::to_string(vertex.count) + " vertices of " +
                   std::to_string(record) + " bytes but only " + std::to_string(body.remaining()) +
                   " bytes follow the header");
  }
  const char* base = body.data();
  bool swap = body.big_endian();
  for (std::uint64_t k = 0; k < vertex.count; ++k) {
    const char* r = base + k * record;
    double value = f.intensity >= 0 ? detail::load_scalar(r + offsets[3], kinds[3], swap) : 0.0;
    double time = f.time >= 0 ? detail::load_scalar(r + offsets[4], kinds[4], swap) : 0.0;
    out.add(detail::load_scalar(r + offsets[0], kinds[0], swap), detail::load_scalar(r + offsets[1], kinds[1], swap),
            detail::load_scalar(r + offsets[2], kinds[2], swap), value, time);
  }
  body.skip_binary(vertex.count * record, "a vertex");  // past them: what follows is checked
}

/// Ascii records, or binary ones with lists: every property read in turn.
void read_vertices_in_turn(Body& body, const PlyElement& vertex, const VertexFields& f, const std::string& name,
                           detail::CloudBuilder& out) {
  std::vector<double> values(vertex.properties.size());
  for (std::uint64_t k = 0; k < vertex.count; ++k) {
    if (body.ascii()) body.begin_record("vertex " + std::to_string(k));
    for (std::size_t i = 0; i < vertex.properties.size(); ++i) {
      const auto& p = vertex.properties[i];
      if (p.is_list) skip_list(body, p, name);
      else values[i] = body.value(p.kind, "a vertex", &p.name);
    }
    body.end_record();
    out.add(values[f.xyz[0]], values[f.xyz[1]], values[f.xyz[2]], f.intensity >= 0 ? values[f.intensity] : 0.0,
            f.time >= 0 ? values[f.time] : 0.0);
  }
}

}  // namespace

PointCloud parse_ply(std::string_view bytes, const std::string& name, const ReadOptions& options, CloudInfo* info) {
  if (bytes.empty()) throw IoError(name, "empty file (0 bytes)");
  bytes = without_bom(bytes);  // a header written with a text editor
  const PlyHeader header = read_header(bytes, name);
  const PlyFormat format = header.format;
  auto vertex_it = std::find_if(header.elements.begin(), header.elements.end(),
                                [](const PlyElement& e) { return e.name == "vertex"; });
  if (vertex_it == header.elements.end()) fail(name, "PLY file has no 'vertex' element");
  const PlyElement& vertex = *vertex_it;
  const VertexFields fields = vertex_fields(vertex, name, options);
  bool xyz_double = false;
  for (int a = 0; a < 3; ++a) xyz_double |= vertex.properties[fields.xyz[a]].kind == ScalarKind::F64;
  if (info) describe(*info, format, vertex, fields.intensity);

  Body body(bytes.substr(header.body_offset), format, name, detail::line_number(bytes, header.body_offset));
  for (auto it = header.elements.begin(); it != vertex_it; ++it) skip_element(body, *it, format, name);

  // Every record takes at least one byte per property (binary) or two (ascii "0 "), so
  // the remaining bytes bound what a claimed count may allocate.
  std::uint64_t min_record = 0;
  for (const auto& p : vertex.properties) min_record += p.is_list ? kind_size(p.count_kind) : kind_size(p.kind);
  if (format == PlyFormat::Ascii) min_record = 2 * vertex.properties.size() - 1;
  std::uint64_t can_hold = body.remaining() / std::max<std::uint64_t>(1, min_record) + 1;
  if (format != PlyFormat::Ascii && vertex.count > can_hold) {
    fail(name, "truncated: the header declares " + std::to_string(vertex.count) + " vertices of at least " +
                   std::to_string(min_record) + " bytes but only " + std::to_string(body.remaining()) +
                   " bytes follow the header");
  }
  detail::CloudBuilder out(options, fields.intensity >= 0, std::min(vertex.count, can_hold));
  if (fields.time >= 0) {
    out.keep_time(vertex.properties[fields.time].name, vertex.properties[fields.time].kind);
  }
  std::uint64_t record = 0;
  if (format != PlyFormat::Ascii && fixed_size(vertex, record)) {
    read_fixed_vertices(body, vertex, record, fields, name, out);
  } else {
    read_vertices_in_turn(body, vertex, fields, name, out);
  }
  // The elements after the vertices (faces of a mesh) are read past, so that what follows
  // them is known to be nothing.
  for (auto it = std::next(vertex_it); it != header.elements.end(); ++it) skip_element(body, *it, format, name);
  body.expect_end();
  return out.finish(name, xyz_double, info);
}

}  // namespace ndtcu
