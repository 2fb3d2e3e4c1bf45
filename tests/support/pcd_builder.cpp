#include "pcd_builder.hpp"

#include <lzf.h>

#include <cstring>
#include <sstream>
#include <stdexcept>

namespace ndtcu::test {
namespace {

void put_value(std::string& out, const FieldInfo& f, double v) {
  char buf[8];
  auto store = [&](auto x) {
    std::memcpy(buf, &x, sizeof(x));
    out.append(buf, sizeof(x));
  };
  switch (f.type) {
    case 'F': f.size == 4 ? store(static_cast<float>(v)) : store(v); break;
    case 'I':
      if (f.size == 1) store(static_cast<std::int8_t>(v));
      else if (f.size == 2) store(static_cast<std::int16_t>(v));
      else if (f.size == 4) store(static_cast<std::int32_t>(v));
      else store(static_cast<std::int64_t>(v));
      break;
    default:
      if (f.size == 1) store(static_cast<std::uint8_t>(v));
      else if (f.size == 2) store(static_cast<std::uint16_t>(v));
      else if (f.size == 4) store(static_cast<std::uint32_t>(v));
      else store(static_cast<std::uint64_t>(v));
  }
}

}  // namespace

std::string make_pcd(const PcdSpec& spec) {
  std::ostringstream h;
  h.precision(17);
  h << "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS";
  for (const auto& f : spec.fields) h << ' ' << f.name;
  h << "\nSIZE";
  for (const auto& f : spec.fields) h << ' ' << f.size;
  h << "\nTYPE";
  for (const auto& f : spec.fields) h << ' ' << f.type;
  h << "\nCOUNT";
  for (const auto& f : spec.fields) h << ' ' << f.count;
  const std::uint64_t n = spec.rows.size();
  h << "\nWIDTH " << spec.width.value_or(n) << "\nHEIGHT " << spec.height.value_or(1)
    << "\nVIEWPOINT 0 0 0 1 0 0 0\n";
  if (spec.write_points_line) h << "POINTS " << spec.points.value_or(n) << "\n";
  h << "DATA " << spec.encoding << "\n";
  std::string out = h.str();
  if (spec.encoding == "ascii") {
    std::ostringstream body;
    body.precision(17);
    for (const auto& row : spec.rows) {
      for (std::size_t i = 0; i < row.size(); ++i) body << (i ? " " : "") << row[i];
      body << "\n";
    }
    return out + body.str();
  }
  if (spec.encoding == "binary") {
    for (const auto& row : spec.rows) {
      std::size_t v = 0;
      for (const auto& f : spec.fields) {
        for (int c = 0; c < f.count; ++c) put_value(out, f, row.at(v++));
      }
    }
    return out;
  }
  // binary_compressed: each field's values for all points, field after field.
  std::string raw;
  std::size_t first = 0;
  for (const auto& f : spec.fields) {
    for (const auto& row : spec.rows) {
      for (int c = 0; c < f.count; ++c) put_value(raw, f, row.at(first + c));
    }
    first += f.count;
  }
  std::string packed(raw.size() * 2 + 64, '\0');
  unsigned got = raw.empty() ? 0 : lzf_compress(raw.data(), raw.size(), packed.data(), packed.size());
  if (!raw.empty() && got == 0) throw std::runtime_error("lzf_compress failed");
  std::uint32_t sizes[2] = {got, static_cast<std::uint32_t>(raw.size())};
  out.append(reinterpret_cast<const char*>(sizes), 8);
  out.append(packed.data(), got);
  return out;
}

std::size_t pcd_body_offset(const std::string& pcd) {
  std::size_t data = pcd.find("\nDATA ");
  return pcd.find('\n', data + 1) + 1;
}

}  // namespace ndtcu::test
