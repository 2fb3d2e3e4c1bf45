#include "dense_voxel_index.hpp"

#include <algorithm>

namespace ndtcu::detail {

LatticeBox occupied_box(const VoxelMap& map) {
  LatticeBox box;
  if (map.empty()) return box;
  std::int64_t lo[3], hi[3];
  for (int a = 0; a < 3; ++a) lo[a] = hi[a] = map.cells()[0][static_cast<std::size_t>(a)];
  for (const auto& c : map.cells()) {
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min<std::int64_t>(lo[a], c[static_cast<std::size_t>(a)]);
      hi[a] = std::max<std::int64_t>(hi[a], c[static_cast<std::size_t>(a)]);
    }
  }
  for (int a = 0; a < 3; ++a) {
    box.min[a] = lo[a];
    box.dims[a] = hi[a] - lo[a] + 1;
  }
  return box;
}

DenseVoxelIndex DenseVoxelIndex::build(const VoxelMap& map, const LatticeBox& box) {
  DenseVoxelIndex index;
  index.box = box;
  index.cells.assign(static_cast<std::size_t>(box.cells()), -1);
  for (std::size_t v = 0; v < map.size(); ++v) {
    const auto& c = map.cells()[v];
    const std::int64_t a = c[0] - box.min[0], b = c[1] - box.min[1], k = c[2] - box.min[2];
    index.cells[static_cast<std::size_t>(math::dense_offset(a, b, k, box.dims))] = static_cast<std::int32_t>(v);
  }
  return index;
}

void DenseVoxelIndex::attach(math::VoxelGridView& g, const std::int32_t* cells, const LatticeBox& box) {
  g.dense = cells;
  for (int a = 0; a < 3; ++a) {
    g.dense_min[a] = box.min[a];
    g.dense_dims[a] = box.dims[a];
  }
}

}  // namespace ndtcu::detail
