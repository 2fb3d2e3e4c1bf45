#pragma once
/// \file
/// What makes a function shared by the host compiler and nvcc: the NDTCU_HD marker, and
/// float/double arithmetic that nvcc must not contract into FMA, so that the CPU and the
/// GPU round every shared expression alike.

#if defined(__CUDACC__)
#define NDTCU_HD __host__ __device__
#else
#define NDTCU_HD
#endif

// Inlining the host compiler must not decline. Out of line, accumulate_pair read its
// caller's scalar stores with packed loads, which store forwarding cannot serve: measured
// about 10% of a CPU evaluation. The device compiler inlines these functions on its own.
#if defined(__GNUC__) && !defined(__CUDACC__)
#define NDTCU_FORCE_INLINE __attribute__((always_inline))
#else
#define NDTCU_FORCE_INLINE
#endif

// A loop the device compiler unrolls (a fixed trip count whose loads it may then issue
// together); the host compiler decides for itself.
#if defined(__CUDACC__)
#define NDTCU_UNROLL _Pragma("unroll")
#else
#define NDTCU_UNROLL
#endif

#include <math.h>

namespace ndtcu::math {

/// Float arithmetic that nvcc must not fuse, so the CPU and the GPU round alike: PCL's
/// float transform and FLANN's float distance are evaluated without FMA on x86.
NDTCU_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
NDTCU_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// The same for doubles (subtraction, division and the square root too: the voxel
/// statistics), and float subtraction and division (the voxel filter's cell index).
NDTCU_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
NDTCU_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
NDTCU_HD inline double sub_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
NDTCU_HD inline double div_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
NDTCU_HD inline double sqrt_rn(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return sqrt(a);
#endif
}
NDTCU_HD inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
NDTCU_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace ndtcu::math
