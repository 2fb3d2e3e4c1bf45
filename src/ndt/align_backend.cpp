#include "align_backend.hpp"

#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>

#include "../cuda/cuda_backend.hpp"
#include "../cuda/cuda_voxel_build.hpp"
#include "../cuda/device_scope.hpp"
#include "../cuda/device_tiled_map.hpp"
#include "../log.hpp"
#include "../nvtx.hpp"
#include "../thread_pool.hpp"
#include "../map/voxel_cells.hpp"
#include "../map/dense_voxel_index.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>

namespace ndtcu::detail {

std::shared_ptr<const VoxelMap> AlignBackend::build_map(PointCloudView target, const VoxelMapOptions& options) {
  VoxelMapOptions o = options;
  o.backend = kind();
  auto map = std::make_shared<const VoxelMap>(VoxelMap::build(target, o));
  set_map(map);
  return map;
}

std::size_t AlignBackend::use_device_tiled_map(DeviceTiledMap&, bool) {
  throw Error(std::string("tiled map: a map that publishes on the GPU is followed by a CUDA aligner, not by the ") +
              name() + " backend");
}

namespace {

// Hypotheses or poses per CUDA launch: a grid dimension holds at most 65535 blocks, and
// a batch larger than this runs in parts of this size.
constexpr std::size_t kBatchPart = 32768;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The CPU backend: the multi-threaded reference. A batch runs its hypotheses on the
// workers, each evaluating on its own thread, when there are at least as many hypotheses
// as threads; otherwise one after the other, each evaluation spread over the workers.
// Either way every hypothesis gets the bits of a single alignment: a CPU evaluation's
// bits do not depend on its thread count (CpuEvaluator's fixed chunks).
class CpuAlignBackend final : public AlignBackend {
 public:
  explicit CpuAlignBackend(const AlignSettings& s) : settings_(s), pool_(s.threads) {}

  const char* name() const noexcept override { return "cpu"; }
  Backend kind() const noexcept override { return Backend::Cpu; }

  void set_map(const std::shared_ptr<const VoxelMap>& map) override {
    if (map == map_) return;
    // The dense voxel index of the map (empty: the map's hash is used) when its box fits.
    // Built before anything is replaced: when its allocation fails, the backend keeps the
    // previous map with its own index (taking the new map first left it paired with the
    // previous map's index, and the next call on the new map looked voxels up in that).
    const LatticeBox box = occupied_box(*map);
    DenseVoxelIndex index =
        box.bytes() <= double(kCpuDenseIndexBudget) ? DenseVoxelIndex::build(*map, box) : DenseVoxelIndex{};
    index_ = std::move(index);
    map_ = map;
  }

  void set_sources(const std::vector<PointCloudView>& sources) override { sources_ = sources; }

  std::vector<OptimizerOutput> align_batch(const std::vector<Hypothesis>& hypotheses, const AlignSettings& s,
                                           bool keep_trace) override {
    std::vector<OptimizerOutput> out(hypotheses.size());
    if (hypotheses.size() >= static_cast<std::size_t>(pool_.size()) && hypotheses.size() > 1) {
      pool_.parallel_for(hypotheses.size(), [&](std::size_t k) {
        CpuEvaluator e = evaluator(hypotheses[k].source, nullptr);
        out[k] = optimize(e, hypotheses[k].start, s, keep_trace, hypotheses[k].prior_center);
      });
    } else {
      for (std::size_t k = 0; k < hypotheses.size(); ++k) {
        CpuEvaluator e = evaluator(hypotheses[k].source, &pool_);
        out[k] = optimize(e, hypotheses[k].start, s, keep_trace, hypotheses[k].prior_center);
      }
    }
    return out;
  }

  math::DerivativeSums evaluate(int source, const Pose6& pose, bool with_hessian) override {
    return evaluator(source, &pool_).evaluate_sums(pose, with_hessian);
  }

  std::vector<math::DerivativeSums> evaluate_batch(int source, const std::vector<Pose6>& poses,
                                                   bool with_hessian) override {
    std::vector<math::DerivativeSums> out(poses.size());
    if (poses.size() >= static_cast<std::size_t>(pool_.size()) && poses.size() > 1) {
      pool_.parallel_for(poses.size(), [&](std::size_t k) {
        out[k] = evaluator(source, nullptr).evaluate_sums(poses[k], with_hessian);
      });
    } else {
      CpuEvaluator e = evaluator(source, &pool_);
      for (std::size_t k = 0; k < poses.size(); ++k) out[k] = e.evaluate_sums(poses[k], with_hessian);
    }
    return out;
  }

 private:
  CpuEvaluator evaluator(int source, ThreadPool* pool) {
    return CpuEvaluator(*map_, sources_.at(static_cast<std::size_t>(source)), settings_.search,
                        settings_.outlier_ratio, pool, &index_);
  }

  AlignSettings settings_;
  ThreadPool pool_;
  std::shared_ptr<const VoxelMap> map_;
  DenseVoxelIndex index_;
  std::vector<PointCloudView> sources_;  // the caller's points, not copied
};

// The CUDA backend: the map uploaded once per map, the sources once per call. The fixed
// step with PCL's direction runs as one device batch (CudaBackend::run_fixed_step);
// More-Thuente, the saddle-free direction and GpuNewtonLoop::Host run the host loop over
// device evaluations, one hypothesis after the other.
class CudaAlignBackend final : public AlignBackend {
 public:
  // Every call into the device runs on the settings' device (DeviceScope), whichever
  // thread makes it; the backend is made and destroyed there too.
  CudaAlignBackend(const AlignSettings& s, CUstream_st* stream) : device_(resolve_device(s.device)) {
    DeviceScope scope(device_);
    cuda_ = std::make_unique<CudaBackend>(stream);
    cuda_->configure(s.search, s.outlier_ratio);
  }
  ~CudaAlignBackend() override {
    try {
      DeviceScope scope(device_);
      cuda_.reset();
    } catch (...) {
      cuda_.reset();  // the device could not be made current: freed where it is
    }
  }
  CudaAlignBackend(const CudaAlignBackend&) = delete;
  CudaAlignBackend& operator=(const CudaAlignBackend&) = delete;

  const char* name() const noexcept override { return "cuda"; }
  Backend kind() const noexcept override { return Backend::Cuda; }

  void set_map(const std::shared_ptr<const VoxelMap>& map) override {
    DeviceScope scope(device_);
    if (map == map_) return;
    NDTCU_NVTX_RANGE("upload");
    const auto t0 = std::chrono::steady_clock::now();
    map_.reset();  // a failed upload leaves no map behind
    cuda_->set_map(*map);
    map_ = map;
    upload_ms_ += ms_since(t0);
  }

  std::shared_ptr<const VoxelMap> build_map(PointCloudView target, const VoxelMapOptions& options) override {
    DeviceScope scope(device_);
    VoxelMapOptions o = options;
    o.backend = Backend::Cuda;
    o.device = device_;
    // A voxelizer for this build only: its buffers (the points, their keys, the sort) go
    // with it, and the map's arrays are copied out of them on the device.
    CudaVoxelizer voxelizer(false);
    DeviceVoxelCells cells;
    auto map = std::make_shared<const VoxelMap>(build_voxel_map(target, o, &voxelizer, &cells));
    map_.reset();  // a failed set leaves no map behind
    cuda_->set_map_from_device(*map, cells);
    map_ = map;
    return map;
  }

  void stage_map(const std::shared_ptr<const VoxelMap>& map) override {
    DeviceScope scope(device_);
    cuda_->stage_map(map);
  }

  std::size_t use_device_tiled_map(DeviceTiledMap& map, bool take_newer) override {
    DeviceScope scope(device_);
    map_.reset();  // a later set_map of any map sets it again (and leaves the tiled map)
    return cuda_->use_tiled_map(map, take_newer);
  }

  void set_sources(const std::vector<PointCloudView>& sources) override {
    DeviceScope scope(device_);
    NDTCU_NVTX_RANGE("upload");
    const auto t0 = std::chrono::steady_clock::now();
    cuda_->set_sources(sources);
    upload_ms_ += ms_since(t0);
  }

  std::vector<OptimizerOutput> align_batch(const std::vector<Hypothesis>& hypotheses, const AlignSettings& s,
                                           bool keep_trace) override {
    DeviceScope scope(device_);
    std::vector<OptimizerOutput> out(hypotheses.size());
    if (wants_device_loop(s) && cuda_->device_loop_supported()) {
      // The grid holds at most 65535 running hypotheses; larger batches run in parts, which
      // changes no bit (a hypothesis's result does not depend on the others).
      for (std::size_t first = 0; first < hypotheses.size(); first += kBatchPart) {
        const std::size_t count = std::min(kBatchPart, hypotheses.size() - first);
        std::vector<DeviceHypothesis> device(count);
        for (std::size_t k = 0; k < count; ++k) {
          const Hypothesis& h = hypotheses[first + k];
          device[k] = {h.start, h.source, h.prior_center};
        }
        std::vector<DeviceLoopOutput> r = cuda_->run_fixed_step(device, step_rules(s), keep_trace);
        for (std::size_t k = 0; k < r.size(); ++k) {
          OptimizerOutput& o = out[first + k];
          o.pose = r[k].pose;
          o.iterations = r[k].iterations;
          o.reason = r[k].reason;
          o.final = to_evaluation(r[k].final_sums);
          o.trace = std::move(r[k].trace);
          o.evaluations = r[k].evaluations;
        }
      }
      return out;
    }
    for (std::size_t k = 0; k < hypotheses.size(); ++k) {
      CudaEvaluator e(*cuda_, hypotheses[k].source);
      out[k] = optimize(e, hypotheses[k].start, s, keep_trace, hypotheses[k].prior_center);
    }
    return out;
  }

  math::DerivativeSums evaluate(int source, const Pose6& pose, bool with_hessian) override {
    DeviceScope scope(device_);
    return cuda_->evaluate(pose, with_hessian, source);
  }

  std::vector<math::DerivativeSums> evaluate_batch(int source, const std::vector<Pose6>& poses,
                                                   bool with_hessian) override {
    DeviceScope scope(device_);
    // As align_batch: the grid holds at most 65535 poses, so a larger batch (a wide
    // recovery search screens about 87,000) runs in parts; each pose's sums do not depend
    // on the others, so the parts change no bit.
    if (poses.size() <= kBatchPart) return cuda_->evaluate_batch(poses, with_hessian, source);
    std::vector<math::DerivativeSums> out;
    out.reserve(poses.size());
    std::vector<Pose6> part;
    for (std::size_t first = 0; first < poses.size(); first += kBatchPart) {
      const std::size_t count = std::min(kBatchPart, poses.size() - first);
      part.assign(poses.begin() + static_cast<std::ptrdiff_t>(first),
                  poses.begin() + static_cast<std::ptrdiff_t>(first + count));
      std::vector<math::DerivativeSums> r = cuda_->evaluate_batch(part, with_hessian, source);
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }

  void reset_telemetry() noexcept override {
    cuda_->reset_telemetry();
    upload_ms_ = 0.0;
  }
  BackendTelemetry telemetry() const override {
    const CudaTelemetry& t = cuda_->telemetry();
    BackendTelemetry b;
    b.upload_ms = upload_ms_;
    b.gpu_ms = t.gpu_ms;
    b.bytes_up = t.bytes_up;
    b.bytes_down = t.bytes_down;
    b.setup_bytes_up = t.setup_bytes_up;
    return b;
  }

 private:
  int device_;
  std::unique_ptr<CudaBackend> cuda_;
  std::shared_ptr<const VoxelMap> map_;
  double upload_ms_ = 0.0;
};

// Backend::Auto resolved: CUDA when a device is usable, else the CPU (logged once).
Backend resolve(Backend requested, int device) {
  if (requested == Backend::Cpu) return Backend::Cpu;
  const std::string why = cuda_unavailable_reason();
  if (requested == Backend::Cuda) {
    if (!why.empty()) throw CudaError("backend cuda requested, but " + why);
    return Backend::Cuda;
  }
  static std::once_flag once;
  std::call_once(once, [&why, device] {
    if (why.empty()) {
      const auto devices = cuda_devices();
      const std::size_t k = device < 0 ? 0 : static_cast<std::size_t>(device);
      log().info("backend auto: using CUDA on {}",
                 k < devices.size() ? fmt::format("device {} ({})", k, devices[k].name) : fmt::format("device {}", k));
    } else {
      log().info("backend auto: using the CPU backend ({})", why);
    }
  });
  return why.empty() ? Backend::Cuda : Backend::Cpu;
}

}  // namespace

std::unique_ptr<AlignBackend> make_align_backend(const AlignSettings& settings, CUstream_st* stream) {
  if (resolve(settings.backend, settings.device) == Backend::Cuda) return std::make_unique<CudaAlignBackend>(settings, stream);
  return std::make_unique<CpuAlignBackend>(settings);
}

}  // namespace ndtcu::detail
