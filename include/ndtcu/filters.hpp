#pragma once
/// \file
/// Point-cloud filters used before alignment.

#include <ndtcu/point_cloud.hpp>

namespace ndtcu {

/// Voxel-grid downsampling with pcl::VoxelGrid's semantics (PCL 1.13): each point goes to
/// the cell floor(p * (1/leaf)) (inverse leaf in float; coordinates relative to the
/// cloud's origin), each occupied cell becomes the float32 centroid of its points (and
/// mean intensity), and cells come out in order of their linear index over the cloud's
/// bounding lattice (x fastest). Points within a cell are summed in the order PCL's
/// spreadsort leaves them, so the output equals pcl::VoxelGrid's bit for bit (when built
/// with Boost). Where PCL gives up (more than 2^31 lattice cells: it returns the input
/// unfiltered) this filters with 64-bit indices. Throws Error for a leaf that is not
/// positive and finite, or a lattice too large to index in 64 bits.
PointCloud voxel_downsample(const PointCloud& cloud, double leaf);
/// The same for points read where they lie (no intensities: the output has none).
PointCloud voxel_downsample(PointCloudView cloud, double leaf);

/// Keeps points whose distance from the cloud's frame origin (world coordinates, so the
/// sensor for a scan) lies in [min_range, max_range]. Throws Error for negative or
/// inverted ranges.
PointCloud crop_range(const PointCloud& cloud, double min_range, double max_range);
/// The same for points read where they lie, relative to the view's origin (no
/// intensities: the output has none).
PointCloud crop_range(PointCloudView cloud, double min_range, double max_range);

}  // namespace ndtcu
