#pragma once
// Rigid transform of a cloud on the GPU: the smallest end-to-end use of the device path
// (upload, kernel, download), used by the GPU smoke test and `ndtcu info --devices`.
#include <Eigen/Core>

#include <vector>

namespace ndtcu::detail {

/// Returns T * p for every point, computed by a CUDA kernel on device 0. Throws
/// CudaError when there is no device or a CUDA call fails.
std::vector<Eigen::Vector3f> cuda_transform_points(const std::vector<Eigen::Vector3f>& points,
                                                   const Eigen::Matrix4f& transform);

}  // namespace ndtcu::detail
