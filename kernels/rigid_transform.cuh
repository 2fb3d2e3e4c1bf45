#pragma once
// The rigid transform of a point array on the device (cuda_transform_points in
// src/cuda/cuda_device.cu launches it).
#include <cuda_runtime.h>

namespace ndtcu::detail {
// Internal to the translation unit that launches it (no separable compilation).
namespace {

struct Rigid {
  float r[9];
  float t[3];
};

__global__ void transform_points_kernel(const float3* in, float3* out, int n, Rigid T) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float3 p = in[i];
  out[i] = make_float3(T.r[0] * p.x + T.r[1] * p.y + T.r[2] * p.z + T.t[0],
                       T.r[3] * p.x + T.r[4] * p.y + T.r[5] * p.z + T.t[1],
                       T.r[6] * p.x + T.r[7] * p.y + T.r[8] * p.z + T.t[2]);
}

}  // namespace
}  // namespace ndtcu::detail
