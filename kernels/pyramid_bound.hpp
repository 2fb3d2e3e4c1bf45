#pragma once
/// \file
/// The bound of the global pose search (src/ndt/score_pyramid.hpp builds it), written once for the
/// CPU and the CUDA kernel.
///
/// Level 0 of the pyramid is a grid of cells (the search's leaf step, 1 m by default) over
/// the map, each holding the NDT likelihood of a point at its centre, quantized to 0-255.
/// Level k holds, at cell a, the largest level-0 value of the cells a .. a + 2^k - 1 along
/// each axis (a sliding-window maximum, the grid's size at every level). A search node of
/// level k is a yaw and a lattice translation (i, j, l) that stands for the 2^k x 2^k x 2^k
/// leaf translations (i .. i + 2^k - 1, ...): under any of them a scan point whose leaf-0
/// cell is o lands in a cell of o + (i..i+2^k-1, ...), so level k's value at o + (i, j, l)
/// is at least its value under each leaf, and the node's sum over the points bounds every
/// leaf below it (Olson's multi-resolution correlative matching; 3D-BBS on the GPU).
#include "ndt_hd.hpp"

#include <cstddef>
#include <cmath>
#include <cstdint>

namespace ndtcu::math {

/// A pyramid as the scorers read it: `levels` holds level 0, 1, ... one after the other,
/// each nx * ny * nz bytes, x fastest.
struct PyramidView {
  const std::uint8_t* levels = nullptr;
  int nx = 0, ny = 0, nz = 0;
  int level_count = 0;
  std::size_t level_stride = 0;  ///< nx * ny * nz
};

/// One node of the search: the lattice translation of its first leaf, the yaw's index and
/// the level (0: a leaf). 16 bytes, as the device reads them.
struct SearchNode {
  std::int32_t i = 0, j = 0, l = 0;
  std::uint16_t yaw = 0;
  std::uint16_t level = 0;
};

/// The value of level `level` for a point whose window of cells starts at lattice cell
/// (a, b, c): 0 when the window lies outside the grid; a window that starts below the grid
/// reads the window at 0, which holds what of it lies inside.
NDTCU_HD inline std::uint32_t window_value(const PyramidView& p, int level, int a, int b, int c) {
  const int w = 1 << level;
  if (a >= p.nx || b >= p.ny || c >= p.nz || a + w <= 0 || b + w <= 0 || c + w <= 0) return 0;
  a = a < 0 ? 0 : a;
  b = b < 0 ? 0 : b;
  c = c < 0 ? 0 : c;
  const std::size_t at = static_cast<std::size_t>(level) * p.level_stride +
                         (static_cast<std::size_t>(c) * static_cast<std::size_t>(p.ny) + static_cast<std::size_t>(b)) *
                             static_cast<std::size_t>(p.nx) +
                         static_cast<std::size_t>(a);
  return p.levels[at];
}

/// The node's bound: the sum over the points of their window values. `offsets` holds the
/// points' leaf-0 cells under the node's yaw (x, y, z of each point, 3 * count values):
/// floor(R_yaw p / cell), the grid's origin taken into the lattice translation.
NDTCU_HD inline std::uint32_t node_bound(const PyramidView& p, const std::int32_t* offsets, int first, int count,
                                         int stride, const SearchNode& n) {
  std::uint32_t sum = 0;
  for (int k = first; k < count; k += stride) {
    const std::int32_t* o = offsets + 3 * k;
    sum += window_value(p, n.level, o[0] + n.i, o[1] + n.j, o[2] + n.l);
  }
  return sum;
}

/// What a query admits of the map, beyond the grid: a disc about a rough position (a node
/// whose block of leaf translations comes no nearer than `radius` to it is out) and, with
/// `standing_bits`, the heights above a floor a sensor may stand at (a node whose window of
/// the standing pyramid holds none of those bits is out).
struct SearchLimits {
  std::uint8_t standing_bits = 0;  ///< 0: every height
  bool region = false;
  double cx = 0.0, cy = 0.0;  ///< the disc's centre in the pyramid's frame (m)
  double radius = 0.0;        ///< (m)
  double cell = 1.0;          ///< the leaf step (m)
};

/// Whether a node may hold the query's pose (`standing`: the standing pyramid; read only
/// with standing_bits).
NDTCU_HD inline bool node_admitted(const PyramidView& standing, const SearchLimits& s, const SearchNode& n) {
  if (s.standing_bits && !(window_value(standing, n.level, n.i, n.j, n.l) & s.standing_bits)) return false;
  if (s.region) {
    const double w = static_cast<double>(1 << n.level) * s.cell;
    // The nearest point of the block of leaf translations [i, i + 2^k - 1] * cell.
    const double x0 = n.i * s.cell, y0 = n.j * s.cell;
    const double dx = fmax(fmax(x0 - s.cx, 0.0), s.cx - (x0 + w - s.cell));
    const double dy = fmax(fmax(y0 - s.cy, 0.0), s.cy - (y0 + w - s.cell));
    if (dx * dx + dy * dy > s.radius * s.radius) return false;
  }
  return true;
}

/// Child `d` (0-7) of a node of level >= 1: one level down, its first leaf moved by half the
/// node's window along x (bit 0 of d), y (bit 1) and z (bit 2). The eight children tile
/// their parent's leaves.
NDTCU_HD inline SearchNode child_node(const SearchNode& n, int d) {
  SearchNode c = n;
  c.level = static_cast<std::uint16_t>(n.level - 1);
  const int w = 1 << c.level;
  c.i += (d & 1) * w;
  c.j += ((d >> 1) & 1) * w;
  c.l += ((d >> 2) & 1) * w;
  return c;
}

/// Whether a child is searched: its first leaf inside the grid (its parent's first leaf
/// always is) and admitted by the query's limits.
NDTCU_HD inline bool child_searched(const PyramidView& p, const PyramidView& standing, const SearchLimits& s,
                                    const SearchNode& c) {
  return c.i < p.nx && c.j < p.ny && c.l < p.nz && node_admitted(standing, s, c);
}

}  // namespace ndtcu::math
