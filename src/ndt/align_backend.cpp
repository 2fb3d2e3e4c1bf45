#include "align_backend.hpp"

#include <ndtcu/error.hpp>

#include "../cuda/cuda_backend.hpp"
#include "../thread_pool.hpp"
#include "../map/voxel_cells.hpp"
#include "../map/dense_voxel_index.hpp"

#include <algorithm>
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
              to_string(kind()) + " backend");
}

namespace {

// The CPU backend: the multi-threaded reference. A batch runs its hypotheses on the
// workers, each evaluating on its own thread, when that keeps at least as many threads
// busy as spreading each evaluation over its scan's chunks of points does; otherwise one
// after the other, each evaluation spread over the workers. Either way every hypothesis
// gets the bits of a single alignment: a CPU evaluation's bits do not depend on its
// thread count (CpuEvaluator's fixed chunks).
class CpuAlignBackend final : public AlignBackend {
 public:
  CpuAlignBackend(const AlignSettings& s, int threads) : settings_(s), pool_(threads) {}

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
    std::size_t points = 0;  // the largest scan among them
    for (const Hypothesis& h : hypotheses) points = std::max(points, sources_.at(static_cast<std::size_t>(h.source)).size());
    if (across_hypotheses(hypotheses.size(), points)) {
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
    if (across_hypotheses(poses.size(), sources_.at(static_cast<std::size_t>(source)).size())) {
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
  // Whether `count` hypotheses of scans of up to `points` run one per thread rather than one after the
  // other, each spread over the workers: when the first keeps at least as many threads
  // busy. A small scan has few chunks (a 500-point Livox scan after the 1 m filter has
  // 2): with 16 threads, spreading each of a search's 12-18 refinements over its 2 chunks
  // left 14 threads idle and paid a wake-up of all 16 per evaluation; the Livox set ran at
  // 9 frames per second on 16 threads against 23 on 2 (the same machine).
  bool across_hypotheses(std::size_t count, std::size_t points) const {
    if (count < 2) return false;
    const std::size_t threads = static_cast<std::size_t>(pool_.size());
    const std::size_t chunks = (points + CpuEvaluator::kChunkPoints - 1) / CpuEvaluator::kChunkPoints;
    return std::min(count, threads) >= std::min(chunks, threads);
  }

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

}  // namespace

std::unique_ptr<AlignBackend> make_align_backend(const AlignSettings& settings, const ExecutionOptions& execution) {
  if (resolve_backend(execution.backend, execution.device) == Backend::Cuda) {
    auto cuda = std::make_unique<CudaBackend>(execution.cuda_stream, execution.device);
    cuda->configure(settings.search, settings.outlier_ratio);
    cuda->set_gpu_loop(execution.gpu_loop);
    return cuda;
  }
  return std::make_unique<CpuAlignBackend>(settings, execution.threads);
}

}  // namespace ndtcu::detail
