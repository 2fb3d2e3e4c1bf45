#pragma once
// NVTX ranges, so `nsys profile ndtcu align ...` shows ndtcu's phases (align, upload,
// iteration, derivatives, reduce, solve). NVTX3 is header-only and costs a few
// nanoseconds per range when no profiler is attached; without CUDA the macro is empty.
#if defined(NDTCU_HAS_CUDA)
#include <nvtx3/nvToolsExt.h>

namespace ndtcu::detail {

/// Pushes an NVTX range for its lifetime.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) noexcept { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace ndtcu::detail

#define NDTCU_NVTX_CONCAT2(a, b) a##b
#define NDTCU_NVTX_CONCAT(a, b) NDTCU_NVTX_CONCAT2(a, b)
/// Names the enclosing scope in a profile.
#define NDTCU_NVTX_RANGE(name) ::ndtcu::detail::NvtxRange NDTCU_NVTX_CONCAT(ndtcu_nvtx_, __LINE__)(name)
#else
#define NDTCU_NVTX_RANGE(name) ((void)0)
#endif
