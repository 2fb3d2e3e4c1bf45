#pragma once
/// \file
/// How an alignment runs, apart from what it computes (AlignSettings, ndtcu/settings.hpp):
/// the backend, the CPU worker threads, the CUDA device and stream, and where the CUDA
/// backend runs its Newton loop. Given to the object that runs the work (Aligner,
/// Localizer) and to the free functions that build maps; no field changes a result's bits
/// beyond what the backend itself does (the CPU and CUDA backends agree within the GPU
/// tests' tolerances, and a CPU result does not depend on its thread count).

#include <string>

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace ndtcu {

/// Which backend runs the derivative evaluations.
enum class Backend {
  Cpu,   ///< the multi-threaded CPU reference
  Cuda,  ///< the CUDA pipeline; an error (CudaError) without a CUDA build or device
  Auto,  ///< CUDA when this build has it and a device is present, else the CPU (logged once)
};

/// Where the CUDA backend runs the Newton loop of the fixed step (LineSearch::Fixed).
enum class GpuNewtonLoop {
  /// On the device: one CUDA graph per batch (a single alignment is a batch of one),
  /// whose conditional loop runs the derivative kernel and the step kernel (the shared
  /// fixed step of kernels/ndt_step.hpp: 6x6 LU solve, step, stopping rule, per
  /// hypothesis) until every hypothesis has stopped, with one read-back at the end. Falls
  /// back to Host where the driver lacks conditional graph nodes (CUDA 12.4).
  Device,
  /// On the host: one launch, read-back and synchronization per iteration, the same fixed
  /// step computed on the host (as the CPU backend does), hypothesis after hypothesis.
  Host,
};

/// Most worker threads a `threads` setting may ask for. A CPU backend gains nothing past
/// the cores it has (the largest servers have a few hundred hardware threads), while a
/// mistyped 100000 would exhaust the system's thread limit before any work starts.
inline constexpr int kMaxThreads = 1024;

/// How the work of an Aligner or a Localizer runs: which backend, how many CPU threads,
/// which CUDA device and stream, and where the CUDA Newton loop runs.
///
///     ndtcu::ExecutionOptions exec;
///     exec.backend = ndtcu::Backend::Cuda;
///     exec.device = 1;
///     ndtcu::Aligner aligner(ndtcu::autoware_preset(), exec);
struct ExecutionOptions {
  Backend backend = Backend::Auto;  ///< which backend evaluates the derivatives
  /// Worker threads, at most kMaxThreads; 0 = std::thread::hardware_concurrency(). The CPU
  /// backend evaluates on them; on either backend, Aligner::align_batch makes the results of
  /// a batch of 64 hypotheses or more on them.
  int threads = 0;
  /// The CUDA device the CUDA backend (and the GPU map build and scan filter that follow
  /// it) runs on, as the CUDA runtime numbers them (within CUDA_VISIBLE_DEVICES);
  /// -1 = the calling thread's current device (device 0 unless the caller chose another).
  /// One process per GPU is then `device = k` in each. An index with no device is an
  /// Error when the backend is made (naming the index and how many devices there are);
  /// the CPU backend ignores it.
  int device = -1;
  /// CUDA backend with the fixed step: where the Newton loop runs (More-Thuente and
  /// NewtonDirection::SaddleFree always run on the host).
  GpuNewtonLoop gpu_loop = GpuNewtonLoop::Device;
  /// With the CUDA backend every device operation runs on this stream (a cudaStream_t;
  /// null: the default stream), which the aligner uses but never owns. The CPU backend
  /// ignores it.
  CUstream_st* cuda_stream = nullptr;
};

/// "cpu", "cuda", "auto".
const char* to_string(Backend b);
/// "device", "host".
const char* to_string(GpuNewtonLoop l);
/// Parses a Backend name; throws Error otherwise.
Backend backend_from_string(const std::string& name);
/// Parses a GpuNewtonLoop name; throws Error otherwise.
GpuNewtonLoop gpu_loop_from_string(const std::string& name);

/// The backend `requested` runs on, the one rule every part of ndtcu (aligner, voxel map
/// build, tiled map, localizer) follows: Cpu as asked; Cuda when a CUDA device is usable,
/// else CudaError saying why; Auto: Cuda when a device is usable, else Cpu (which one is
/// logged once per process). `device` (ExecutionOptions::device) only names the device in
/// that log line. Never returns Backend::Auto.
Backend resolve_backend(Backend requested, int device = -1);

/// Throws Error naming the first option out of range ("invalid setting threads: ..." for
/// threads outside [0, kMaxThreads], "invalid setting device: ..." below -1). Whether the
/// device exists is checked when the backend is made.
void validate(const ExecutionOptions& execution);

}  // namespace ndtcu
