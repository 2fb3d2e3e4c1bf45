#pragma once
// The CUDA device a piece of work runs on (ExecutionOptions::device, VoxelMapOptions::device).
// The CUDA runtime's current device is per host thread, and the library's work is called
// from the caller's threads, its reader threads and the tile streamer's: each entry into
// the GPU path makes its object's device current for its scope, whichever thread calls.
// Host-compiler header: implemented in cuda_device.cu (no-ops in no_cuda.cpp).

namespace ndtcu::detail {

/// The device `requested` names, checked: -1 gives the calling thread's current device;
/// an index with no device is an Error naming it and how many devices there are.
int resolve_device(int requested);

/// Makes `device` current on the calling thread until the scope ends, then restores the
/// device that was current before (only when it differs). -1 changes nothing. Throws
/// CudaError when the device cannot be made current; the destructor never throws.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace ndtcu::detail
