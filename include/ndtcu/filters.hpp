#pragma once
/// \file
/// Point-cloud filters used before alignment.

#include <ndtcu/point_cloud.hpp>

namespace ndtcu {

/// Voxel-grid downsampling with pcl::VoxelGrid's semantics: each point goes to the cell
/// floor(p / leaf) (of its coordinates relative to the cloud's origin), each occupied
/// cell becomes the float32 centroid of its points (and mean intensity), and cells come
/// out in order of their linear index over the cloud's bounding lattice (x fastest).
/// Throws Error for a leaf that is not positive and finite, or a lattice too large to
/// index in 64 bits.
PointCloud voxel_downsample(const PointCloud& cloud, double leaf);

/// Keeps points whose distance from the cloud's frame origin (world coordinates, so the
/// sensor for a scan) lies in [min_range, max_range]. Throws Error for negative or
/// inverted ranges.
PointCloud crop_range(const PointCloud& cloud, double min_range, double max_range);

}  // namespace ndtcu
