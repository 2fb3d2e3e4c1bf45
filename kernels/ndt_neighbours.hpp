#pragma once
/// \file
/// Which voxels a transformed point meets, written once for the CPU backend and the CUDA
/// kernels: the lattice, the voxel lookup (hash or dense index), the cell table of each
/// search mode, the radius test, and the neighbour walk. The search runs in float, as
/// FLANN's L2 distance on PCL's float centroids does.

#include "ndt_hd.hpp"

#include <cstddef>
#include <cstdint>
#include <math.h>

namespace ndtcu::math {

/// How the voxels around a transformed point are chosen.
enum class Search : int {
  Radius = 0,    ///< every voxel centroid closer than the resolution (PCL, Autoware)
  Direct27 = 1,  ///< the 3x3x3 lattice block around the point's voxel
  Direct7 = 2,   ///< the point's voxel and its 6 face neighbours
  Direct1 = 3,   ///< the point's voxel only
};

/// Most neighbours any search returns.
constexpr int kMaxNeighbours = 27;

/// Lattice coordinates are packed into 21 bits each, offset by 2^20.
constexpr std::int32_t kKeyOffset = 1 << 20;
/// Key of an empty hash-table slot.
constexpr std::uint64_t kEmptyKey = ~std::uint64_t(0);

/// Packs lattice coordinates (each in [-2^20, 2^20)) into one 64-bit key.
NDTCU_HD inline std::uint64_t pack_key(std::int32_t i, std::int32_t j, std::int32_t k) {
  return static_cast<std::uint64_t>(i + kKeyOffset) | (static_cast<std::uint64_t>(j + kKeyOffset) << 21) |
         (static_cast<std::uint64_t>(k + kKeyOffset) << 42);
}

/// The lattice coordinate `axis` (0 x, 1 y, 2 z) of a packed key (pack_key's inverse).
NDTCU_HD inline std::int32_t unpack_key(std::uint64_t key, int axis) {
  return static_cast<std::int32_t>((key >> (21 * axis)) & ((std::uint64_t(1) << 21) - 1)) - kKeyOffset;
}

/// True when lattice coordinates fit pack_key.
NDTCU_HD inline bool key_in_range(std::int64_t i, std::int64_t j, std::int64_t k) {
  return i >= -kKeyOffset && i < kKeyOffset && j >= -kKeyOffset && j < kKeyOffset && k >= -kKeyOffset &&
         k < kKeyOffset;
}

/// Hash of a packed key (the splitmix64 finalizer: every input bit reaches every output bit).
NDTCU_HD inline std::uint64_t hash_key(std::uint64_t k) {
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ULL;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebULL;
  k ^= k >> 31;
  return k;
}

/// Slots of the hash table of `voxels` voxels: a power of two at least twice their number
/// (load at most 0.5), 16 at least.
NDTCU_HD inline std::uint64_t hash_capacity(std::uint64_t voxels) {
  std::uint64_t capacity = 16;
  while (capacity < 2 * voxels) capacity *= 2;
  return capacity;
}

/// Read-only view of a voxel map for the per-point math: structure-of-arrays, plain
/// pointers (host or device memory), plus an open-addressing hash from lattice key to
/// voxel index (linear probing, capacity a power of two).
struct VoxelGridView {
  std::int32_t size;                ///< number of voxels
  const double* mean[3];            ///< voxel means, map-relative metres
  const double* icov[6];            ///< inverse covariances: xx xy xz yy yz zz
  const float* centroid[3];         ///< float centroids used by the radius search
  const std::uint64_t* table_keys;  ///< hash slots: packed key or kEmptyKey
  const std::int32_t* table_values; ///< hash slots: voxel index
  std::uint64_t table_mask;         ///< capacity - 1
  float inv_resolution;             ///< 1 / resolution in float, as PCL's inverse leaf size
  float radius_sq;                  ///< squared search radius in float, as FLANN compares it
  /// Optional dense index over the occupied lattice box (voxel index or -1 per cell, x
  /// fastest): one load per lookup instead of a probe sequence. Null: the hash is used.
  const std::int32_t* dense;
  std::int64_t dense_min[3];   ///< lattice cell of dense[0]
  std::int64_t dense_dims[3];  ///< box size in cells along x, y, z
};

/// The view of a map's voxel arrays (structure of arrays, `size` voxels, device or host
/// memory alike): the one place a VoxelGridView is put together, for the CPU backend's
/// maps, the device's and a tiled map's versions. Its lookups are attached after it:
/// attach_hash, and a dense index (DenseVoxelIndex::attach).
inline VoxelGridView voxel_grid_view(std::size_t size, const double* const* mean, const double* const* icov,
                                     const float* const* centroid, float inv_resolution, float radius_sq) {
  VoxelGridView g{};
  g.size = static_cast<std::int32_t>(size);
  for (int a = 0; a < 3; ++a) {
    g.mean[a] = mean[a];
    g.centroid[a] = centroid[a];
  }
  for (int e = 0; e < 6; ++e) g.icov[e] = icov[e];
  g.inv_resolution = inv_resolution;
  g.radius_sq = radius_sq;
  return g;
}

/// Attaches a hash table of `capacity` slots (a power of two; 0: none) to `g`.
inline void attach_hash(VoxelGridView& g, const std::uint64_t* keys, const std::int32_t* values,
                        std::size_t capacity) {
  g.table_keys = keys;
  g.table_values = values;
  g.table_mask = capacity == 0 ? 0 : capacity - 1;
}

/// Entry of box cell (a, b, c) (cells from the box's lowest corner) in a dense index over
/// a box of `dims` cells: x fastest, then y, then z.
NDTCU_HD inline std::int64_t dense_offset(std::int64_t a, std::int64_t b, std::int64_t c, const std::int64_t* dims) {
  return (c * dims[1] + b) * dims[0] + a;
}

/// Voxel index for lattice cell (i, j, k), or -1.
NDTCU_HD inline std::int32_t find_voxel(const VoxelGridView& g, std::int64_t i, std::int64_t j, std::int64_t k) {
  if (g.dense) {
    const std::int64_t a = i - g.dense_min[0], b = j - g.dense_min[1], c = k - g.dense_min[2];
    // One unsigned comparison per axis rejects both sides of the box.
    if (static_cast<std::uint64_t>(a) >= static_cast<std::uint64_t>(g.dense_dims[0]) ||
        static_cast<std::uint64_t>(b) >= static_cast<std::uint64_t>(g.dense_dims[1]) ||
        static_cast<std::uint64_t>(c) >= static_cast<std::uint64_t>(g.dense_dims[2])) {
      return -1;
    }
    return g.dense[dense_offset(a, b, c, g.dense_dims)];
  }
  if (!key_in_range(i, j, k)) return -1;
  const std::uint64_t key = pack_key(static_cast<std::int32_t>(i), static_cast<std::int32_t>(j),
                                     static_cast<std::int32_t>(k));
  std::uint64_t slot = hash_key(key) & g.table_mask;
  for (;;) {
    const std::uint64_t stored = g.table_keys[slot];
    if (stored == key) return g.table_values[slot];
    if (stored == kEmptyKey) return -1;
    slot = (slot + 1) & g.table_mask;
  }
}

/// Lattice cell of a map-relative float coordinate: floor(p * (1/r)) with the inverse in
/// float, as pcl::VoxelGridCovariance computes it.
/// Non-finite or huge coordinates give an index outside key_in_range (never a cast of
/// NaN or infinity, which would be undefined).
NDTCU_HD inline std::int64_t lattice_index(float p, float inv_resolution) {
  const float scaled = ::floorf(mul_rn(p, inv_resolution));
  if (!(scaled > -1.0e9f && scaled < 1.0e9f)) return std::int64_t(1) << 40;
  return static_cast<std::int64_t>(scaled);
}

/// Where lattice cell (i, j, k) and its 26 neighbours all lie in g's dense box: the dense
/// entry of (i, j, k), from which neighbour (i + di, j + dj, k + dk) is the entry
/// di + dj * dims[0] + dk * dims[0] * dims[1] on, one load with no bounds test. Null
/// without a dense index or near the box's faces (the caller then takes find_voxel).
NDTCU_HD inline const std::int32_t* dense_block_centre(const VoxelGridView& g, std::int64_t i, std::int64_t j,
                                                       std::int64_t k) {
  if (!g.dense) return nullptr;
  const std::int64_t a = i - g.dense_min[0], b = j - g.dense_min[1], c = k - g.dense_min[2];
  if (a < 1 || a > g.dense_dims[0] - 2 || b < 1 || b > g.dense_dims[1] - 2 || c < 1 || c > g.dense_dims[2] - 2) {
    return nullptr;
  }
  return g.dense + dense_offset(a, b, c, g.dense_dims);
}

/// Number of lattice cells a search visits around a point (the length of its cell table).
NDTCU_HD inline constexpr int search_cells(Search search) {
  return search == Search::Direct7 ? 7 : search == Search::Direct1 ? 1 : 27;
}

/// The cell table of each search: cell m as a lattice offset (di, dj, dk) from the point's
/// cell. Both backends walk it, the CPU from m = 0 one by one, a GPU thread every stride-th
/// cell, so they visit the same cells.
///  - Radius: the 3x3x3 block, z, y, x ascending. The found voxels are sorted afterwards by
///    distance (find_neighbours), so the walk order does not decide PCL's order.
///  - Direct27: the point's cell, then the other 26 in the block's z, y, x order (ndt_omp's
///    DIRECT26 with the centre first).
///  - Direct7: the point's cell, then +x -x +y -y +z -z (PCL's getFaceNeighborsAtPoint).
///  - Direct1: the point's cell.
NDTCU_HD inline void search_cell(Search search, int m, int& di, int& dj, int& dk) {
  if (search == Search::Radius || search == Search::Direct27) {
    // Direct27 puts block cell 13 (the centre) first and shifts cells 0-12 up by one.
    const int b = search == Search::Radius ? m : (m == 0 ? 13 : (m <= 13 ? m - 1 : m));
    di = b % 3 - 1;
    dj = (b / 3) % 3 - 1;
    dk = b / 9 - 1;
    return;
  }
  di = dj = dk = 0;
  if (search == Search::Direct7 && m > 0) {
    const int d = (m % 2 == 1) ? 1 : -1;
    if (m <= 2) di = d;
    else if (m <= 4) dj = d;
    else dk = d;
  }
}

/// The lattice cell of a transformed point, with the dense index's block around it when
/// the whole 3x3x3 block lies inside the dense box (then every cell is one load).
struct PointCell {
  std::int64_t i, j, k;         ///< lattice cell of the point
  const std::int32_t* block;    ///< dense entry of (i, j, k), or null (find_voxel)
};

/// The cell of map-relative float point p.
NDTCU_HD inline PointCell point_cell(const VoxelGridView& g, const float* p) {
  PointCell c;
  c.i = lattice_index(p[0], g.inv_resolution);
  c.j = lattice_index(p[1], g.inv_resolution);
  c.k = lattice_index(p[2], g.inv_resolution);
  c.block = dense_block_centre(g, c.i, c.j, c.k);
  return c;
}

/// Voxel index of the cell at offset (di, dj, dk) from c, or -1.
NDTCU_HD inline std::int32_t cell_voxel(const VoxelGridView& g, const PointCell& c, int di, int dj, int dk) {
  if (c.block) return c.block[dense_offset(di, dj, dk, g.dense_dims)];
  return find_voxel(g, c.i + di, c.j + dj, c.k + dk);
}

/// The radius search's distance: the float squared distance from p to voxel v's float
/// centroid, as FLANN's L2_Simple<float> sums it (result = 0; result += diff * diff, axis
/// by axis).
NDTCU_HD inline float centroid_distance_sq(const VoxelGridView& g, std::int32_t v, const float* p) {
  const float dx = p[0] - g.centroid[0][v];
  const float dy = p[1] - g.centroid[1][v];
  const float dz = p[2] - g.centroid[2][v];
  return add_rn(add_rn(mul_rn(dx, dx), mul_rn(dy, dy)), mul_rn(dz, dz));
}

/// The radius test: strictly closer than the radius (FLANN's RadiusResultSet).
NDTCU_HD inline bool within_radius(const VoxelGridView& g, float distance_sq) { return distance_sq < g.radius_sq; }

/// A search's cell table as the neighbour walk reads it: each cell's lattice offset and,
/// with a dense index, its step in that index from the point's cell (di + dj dims[0] +
/// dk dims[0] dims[1]). Made once per map and search (a GPU block makes it in shared memory
/// per evaluation), so a cell of the walk is one table read and one load, where computing
/// it from the cell's number took the walk's divisions by 3 and 9 and three 64-bit products
/// per cell (measured on an H200: the walk was 65% of the derivative kernel's instructions).
struct CellTable {
  int cells;                                ///< search_cells(search)
  std::int64_t step[kMaxNeighbours];        ///< step in the dense index (0 without one)
  std::int8_t delta[kMaxNeighbours][3];     ///< (di, dj, dk)
};

/// Fills entry m (< kMaxNeighbours) of g's cell table for `search`, and the count; entries
/// past the search's cells are left unused. Entries can be filled by separate threads.
NDTCU_HD inline void cell_table_entry(const VoxelGridView& g, Search search, int m, CellTable& t) {
  if (m == 0) t.cells = search_cells(search);
  int di = 0, dj = 0, dk = 0;
  if (m < search_cells(search)) search_cell(search, m, di, dj, dk);
  t.delta[m][0] = static_cast<std::int8_t>(di);
  t.delta[m][1] = static_cast<std::int8_t>(dj);
  t.delta[m][2] = static_cast<std::int8_t>(dk);
  t.step[m] = g.dense ? dense_offset(di, dj, dk, g.dense_dims) : 0;
}

/// g's whole cell table for `search`.
NDTCU_HD inline CellTable cell_table(const VoxelGridView& g, Search search) {
  CellTable t;
  for (int m = 0; m < kMaxNeighbours; ++m) cell_table_entry(g, search, m, t);
  return t;
}

/// Voxel index of cell m of table t around c, or -1.
NDTCU_HD inline std::int32_t table_voxel(const VoxelGridView& g, const CellTable& t, const PointCell& c, int m) {
  if (c.block) return c.block[t.step[m]];
  return find_voxel(g, c.i + t.delta[m][0], c.j + t.delta[m][1], c.k + t.delta[m][2]);
}

/// Cells a thread of the neighbour walk looks up per round (walk_neighbours). Measured on
/// an H200 (ndtcu_bench --batch, one run): rounds of 3 took 5-6% less time than the walk
/// cell by cell for one alignment of 30 iterations (KITTI 5k 0.921 -> 0.867 ms, BALM 0.688
/// -> 0.652, hdl32 1.231 -> 1.157) and batches of 200 and 1024 within 1.5% either way;
/// rounds of 9 spilled the batch instance of the derivative kernel (700 bytes against 372)
/// and took 30-50% longer per hypothesis-iteration in batches.
constexpr int kWalkRound = 3;

/// The neighbour walk: visits cells first, first + stride, ... of cell table t (cell_table
/// of g and the search) around p and calls visit(v, m) for each voxel v found (that passes
/// the radius test under Search::Radius) at table entry m, in table order. With first 0
/// and stride 1 it finds find_neighbours' set; `stride` threads with first = 0 .. stride - 1
/// find it together.
/// It walks in rounds of kWalkRound cells: the round's cells are looked up first, then the
/// centroids of the voxels found, then tested, so the loads of a round do not wait on one
/// another and a GPU thread waits for two loads per round instead of two per cell (its
/// walk was a chain of up to 54 dependent loads).
template <typename Visit>
NDTCU_HD inline void walk_neighbours(const VoxelGridView& g, Search search, const CellTable& t, const float* p,
                                     int first, int stride, Visit&& visit) {
  if (g.size == 0) return;
  const PointCell c = point_cell(g, p);
  const int cells = t.cells;
  for (int round = first; round < cells; round += kWalkRound * stride) {
    std::int32_t v[kWalkRound];
NDTCU_UNROLL
    for (int u = 0; u < kWalkRound; ++u) {
      const int m = round + u * stride;
      v[u] = m < cells ? table_voxel(g, t, c, m) : -1;
    }
    if (search == Search::Radius) {
      float d[kWalkRound];
NDTCU_UNROLL
      for (int u = 0; u < kWalkRound; ++u) d[u] = v[u] >= 0 ? centroid_distance_sq(g, v[u], p) : 0.0f;
NDTCU_UNROLL
      for (int u = 0; u < kWalkRound; ++u) {
        if (v[u] >= 0 && within_radius(g, d[u])) visit(v[u], round + u * stride);
      }
    } else {
NDTCU_UNROLL
      for (int u = 0; u < kWalkRound; ++u) {
        if (v[u] >= 0) visit(v[u], round + u * stride);
      }
    }
  }
}

/// find_neighbours for one search mode, with the cell table's loop unrolled for it. Cells
/// are appended without a branch (written, then counted when occupied): whether a cell
/// holds a voxel is data the branch predictor cannot learn.
template <Search S>
NDTCU_HD inline int gather_neighbours(const VoxelGridView& g, const float* p, std::int32_t* out) {
  const PointCell c = point_cell(g, p);
  float dist[search_cells(S)];
  int n = 0;
  for (int m = 0; m < search_cells(S); ++m) {
    int di, dj, dk;
    search_cell(S, m, di, dj, dk);
    const std::int32_t v = cell_voxel(g, c, di, dj, dk);
    out[n] = v;
    if (S == Search::Radius) {
      const float d = centroid_distance_sq(g, v < 0 ? 0 : v, p);  // an empty cell measures to voxel 0, then is dropped
      dist[n] = d;
      n += (v >= 0) & within_radius(g, d);
    } else {
      n += v >= 0;
    }
  }
  if (S == Search::Radius) {
    // Sorted by (distance, index): FLANN sorts DistanceIndex pairs that way.
    for (int k = 1; k < n; ++k) {
      const float d = dist[k];
      const std::int32_t v = out[k];
      int at = k;
      while (at > 0 && (dist[at - 1] > d || (dist[at - 1] == d && out[at - 1] > v))) {
        dist[at] = dist[at - 1];
        out[at] = out[at - 1];
        --at;
      }
      dist[at] = d;
      out[at] = v;
    }
  }
  return n;
}

/// The voxels around transformed point p (map-relative float), in a fixed order: the cell
/// table's (search_cell), except under Radius, where the voxels whose float centroid
/// passes the radius test (exact for a radius up to the resolution: the 3x3x3 block holds
/// them all) are sorted by (float squared distance, voxel index) as PCL's sorted FLANN
/// radius search returns them; voxel indices follow PCL's centroid order. Returns the
/// count; `out` needs kMaxNeighbours slots.
NDTCU_HD inline int find_neighbours(const VoxelGridView& g, Search search, const float* p, std::int32_t* out) {
  if (g.size == 0) return 0;
  switch (search) {
    case Search::Radius: return gather_neighbours<Search::Radius>(g, p, out);
    case Search::Direct27: return gather_neighbours<Search::Direct27>(g, p, out);
    case Search::Direct7: return gather_neighbours<Search::Direct7>(g, p, out);
    case Search::Direct1:
    default: return gather_neighbours<Search::Direct1>(g, p, out);
  }
}

}  // namespace ndtcu::math
