#pragma once
// Writes PCD bytes from a field spec and raw values, in any encoding, so tests can
// produce every layout the reader must take (padding, COUNT > 1, odd types, organized
// clouds, compressed bodies) and break them on purpose.
#include <ndtcu/io.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ndtcu::test {

struct PcdSpec {
  std::vector<FieldInfo> fields;
  /// One row per point: sum of the fields' counts values, in field order.
  std::vector<std::vector<double>> rows;
  std::string encoding = "binary";
  std::optional<std::uint64_t> width, height, points;  ///< header overrides
  bool write_points_line = true;
};

/// The PCD file's bytes.
std::string make_pcd(const PcdSpec& spec);

/// Offset of the first body byte in a PCD produced by make_pcd.
std::size_t pcd_body_offset(const std::string& pcd);

}  // namespace ndtcu::test
