#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/text.hpp>

#include "../log.hpp"
#include "../nvtx.hpp"
#include "../map/tiled_voxel_map_access.hpp"
#include "align_backend.hpp"
#include "evaluator.hpp"
#include "optimizer.hpp"
#include "../thread_pool.hpp"

#include <Eigen/Geometry>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>

namespace ndtcu {

Eigen::Matrix4d pose_to_matrix(const Pose6& p) {
  const Eigen::Affine3d t = Eigen::Translation3d(p.head<3>()) * Eigen::AngleAxisd(p(3), Eigen::Vector3d::UnitX()) *
                            Eigen::AngleAxisd(p(4), Eigen::Vector3d::UnitY()) *
                            Eigen::AngleAxisd(p(5), Eigen::Vector3d::UnitZ());
  return t.matrix();
}

Pose6 matrix_to_pose(const Eigen::Matrix4d& m) {
  if (!m.allFinite()) throw Error("transform has a non-finite entry");
  const Eigen::Matrix3d r = m.topLeftCorner<3, 3>();
  const double ortho = (r.transpose() * r - Eigen::Matrix3d::Identity()).cwiseAbs().maxCoeff();
  if (ortho > 1e-4 || std::fabs(r.determinant() - 1.0) > 1e-4 || m(3, 0) != 0.0 || m(3, 1) != 0.0 ||
      m(3, 2) != 0.0 || m(3, 3) != 1.0) {
    throw Error("transform is not rigid (rotation not orthonormal within 1e-4, or bottom row not 0 0 0 1)");
  }
  // R = Rx(a) Ry(b) Rz(c): r02 = sin b, r12 = -sin a cos b, r22 = cos a cos b,
  // r01 = -cos b sin c, r00 = cos b cos c.
  Pose6 p;
  p.head<3>() = m.topRightCorner<3, 1>();
  const double sb = std::max(-1.0, std::min(1.0, r(0, 2)));
  p(4) = std::asin(sb);
  if (std::fabs(sb) < 1.0 - 1e-12) {
    p(3) = std::atan2(-r(1, 2), r(2, 2));
    p(5) = std::atan2(-r(0, 1), r(0, 0));
  } else {  // gimbal lock: only roll +- yaw is defined; put it all in roll
    p(3) = std::atan2(r(2, 1), r(1, 1));
    p(5) = 0.0;
  }
  return p;
}

VoxelMapOptions voxel_map_options(const AlignSettings& s, const ExecutionOptions& e) {
  VoxelMapOptions o;
  o.resolution = s.resolution;
  o.covariance = s.covariance;
  o.min_points = s.min_points_per_voxel;
  o.eigenvalue_ratio = s.eigenvalue_ratio;
  o.threads = e.threads;
  o.backend = e.backend;
  o.device = e.device;
  return o;
}

// The target of a call: where its map's zero lies in the world, and its voxels.
struct TargetNow {
  Eigen::Vector3d origin;
  std::size_t voxels;
};

struct Aligner::Impl {
  AlignSettings settings;
  ExecutionOptions execution;
  std::shared_ptr<const VoxelMap> map;
  std::shared_ptr<TiledVoxelMap> tiled;  // before the backend: it outlives the backend's binding
  std::unique_ptr<detail::AlignBackend> backend;  // the one dispatch point
  int version_holds = 0;  // live VersionHolds: while any, a tiled target's version is kept
  std::unique_ptr<detail::ThreadPool> results_pool;  // a large batch's results, made on first use
  Impl(const AlignSettings& s, const ExecutionOptions& e)
      : settings(s), execution(e), backend(detail::make_align_backend(s, e)) {}

  // The map of this call, set on the backend: a tiled map's newest published version
  // (unless held), else the map set.
  TargetNow take_target() {
    if (tiled) {
      const bool newer = version_holds == 0;
      if (detail::DeviceTiledMap* device = detail::TiledVoxelMapAccess::device(*tiled)) {
        return {tiled->origin(), backend->use_device_tiled_map(*device, newer)};
      }
      if (newer || !map) map = detail::TiledVoxelMapAccess::published_host(*tiled);
    }
    if (!map) throw Error("align: no target set (call set_target first)");
    backend->set_map(map);
    return {map->origin(), map->size()};
  }

  // The backend's sums of `source` at `poses` (world frame) on this call's target
  // (take_target), as one batch; none when nothing is scored (an empty source, a map
  // without voxels).
  std::vector<math::DerivativeSums> sums_at(PointCloudView source, const std::vector<Pose6>& poses,
                                            const TargetNow& target, bool with_hessian);

  // Runs task(h) for h in [0, count): inline for a small batch, else on results_pool
  // (ExecutionOptions::threads). Each task writes its own result, so the order they run in
  // changes nothing.
  void for_each_result(std::size_t count, const std::function<void(std::size_t)>& task) {
    // Below this many hypotheses the pool's hand-off costs more than the work it spreads
    // (a result's localizability takes about 2 us); above it a worker takes a run of
    // kResultRun results per hand-off (two lock acquisitions each), not one. With one a
    // hand-off, a KITTI batch of 1,024 spent 0.9 ms on its results on 16 threads of an
    // H200's host, 6% of the batch.
    constexpr std::size_t kParallelResults = 64;
    constexpr std::size_t kResultRun = 16;
    if (count >= kParallelResults && detail::resolve_thread_count(execution.threads) > 1) {
      if (!results_pool) {
        try {
          results_pool = std::make_unique<detail::ThreadPool>(execution.threads);
        } catch (const Error&) {
          // No threads to be had (the system's limit): the results are made here instead.
        }
      }
      if (results_pool) {
        results_pool->parallel_for((count + kResultRun - 1) / kResultRun, [&](std::size_t run) {
          for (std::size_t h = run * kResultRun; h < std::min(count, (run + 1) * kResultRun); ++h) task(h);
        });
        return;
      }
    }
    for (std::size_t h = 0; h < count; ++h) task(h);
  }
};

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Internal (map-relative) pose of a world pose: t_int = R o_s + t - o_m (see aligner.hpp).
// A source at the origin (R o_s = 0) needs no rotation: computing it took 4.7 ms of a
// 30,168-pose screen (H200 host), where the GPU's evaluation took 0.9.
Pose6 to_internal(const Pose6& world, const Eigen::Vector3d& source_origin, const Eigen::Vector3d& map_origin) {
  Pose6 p = world;
  if (source_origin.isZero()) {
    p.head<3>() = world.head<3>() - map_origin;
    return p;
  }
  const Eigen::Matrix3d r = pose_to_matrix(world).topLeftCorner<3, 3>();
  p.head<3>() = r * source_origin + world.head<3>() - map_origin;
  return p;
}

Pose6 to_world(const Pose6& internal, const Eigen::Vector3d& source_origin, const Eigen::Vector3d& map_origin) {
  Pose6 p = internal;
  if (source_origin.isZero()) {  // as to_internal
    p.head<3>() = internal.head<3>() + map_origin;
    return p;
  }
  const Eigen::Matrix3d r = pose_to_matrix(internal).topLeftCorner<3, 3>();
  p.head<3>() = internal.head<3>() - r * source_origin + map_origin;
  return p;
}

// NVTL: the mean best term over the matched points, 0 when none matched.
double nvtl_of(double nvtl_sum, std::size_t matched_points) {
  return matched_points ? nvtl_sum / static_cast<double>(matched_points) : 0.0;
}

void fill_from_evaluation(AlignResult& r, const detail::Evaluation& e) {
  r.score = e.score;
  r.tp = r.source_points ? e.score / static_cast<double>(r.source_points) : 0.0;
  r.nvtl = nvtl_of(e.nvtl_sum, e.matched_points);
  r.hessian = e.hessian;
  r.correspondences = e.correspondences;
  r.matched_points = e.matched_points;
}

}  // namespace

Aligner::Aligner(const AlignSettings& settings, const ExecutionOptions& execution) {
  validate(settings);
  validate(execution);
  impl_ = std::make_unique<Impl>(settings, execution);
}
Aligner::~Aligner() = default;
Aligner::Aligner(Aligner&&) noexcept = default;
Aligner& Aligner::operator=(Aligner&&) noexcept = default;

const AlignSettings& Aligner::settings() const noexcept { return impl_->settings; }
const ExecutionOptions& Aligner::execution() const noexcept { return impl_->execution; }

void Aligner::set_prior(const PosePrior& prior) {
  validate(prior);
  impl_->settings.prior = prior;
}
Backend Aligner::backend() const noexcept { return impl_->backend->kind(); }
const std::shared_ptr<const VoxelMap>& Aligner::target() const noexcept { return impl_->map; }
const std::shared_ptr<TiledVoxelMap>& Aligner::tiled_target() const noexcept { return impl_->tiled; }
bool Aligner::has_target() const noexcept { return impl_->map || impl_->tiled; }

void Aligner::set_target(PointCloudView target) {
  // On the backend the aligner runs on: a CUDA aligner builds its map on the GPU (the same
  // voxels, bit for bit, as the CPU build) and keeps its device arrays from there.
  impl_->map = impl_->backend->build_map(target, voxel_map_options(impl_->settings, impl_->execution));
  impl_->tiled.reset();
}

namespace {

// Throws Error unless `map` was built for `settings` (resolution and covariance mode).
void check_target(const VoxelMap* map, const AlignSettings& settings, const char* what) {
  if (!map) throw Error(std::string(what) + ": null voxel map");
  if (map->resolution() != static_cast<double>(static_cast<float>(settings.resolution))) {
    throw Error(std::string(what) + ": voxel map resolution " + ndtcu::number_text(map->resolution()) +
                " differs from the settings' " + ndtcu::number_text(settings.resolution));
  }
  if (map->options().covariance != settings.covariance) {
    throw Error(std::string(what) + ": voxel map covariance mode '" + to_string(map->options().covariance) +
                "' differs from the settings' '" + to_string(settings.covariance) + "'");
  }
}

}  // namespace

void Aligner::set_target(std::shared_ptr<const VoxelMap> map) {
  check_target(map.get(), impl_->settings, "set_target");
  impl_->map = std::move(map);
  if (impl_->tiled) {
    // Leaves the tiled map now (not at the next call), so another aligner may follow it.
    impl_->tiled.reset();
    impl_->backend->set_map(impl_->map);
  }
}

void Aligner::set_target(std::shared_ptr<TiledVoxelMap> tiles) {
  Impl& m = *impl_;
  if (!tiles) throw Error("set_target: null tiled map");
  const VoxelMapOptions& o = tiles->options();
  if (static_cast<float>(o.resolution) != static_cast<float>(m.settings.resolution)) {
    throw Error("set_target: tiled map resolution " + ndtcu::number_text(o.resolution) + " differs from the settings' " +
                ndtcu::number_text(m.settings.resolution));
  }
  if (o.covariance != m.settings.covariance) {
    throw Error(std::string("set_target: tiled map covariance mode '") + to_string(o.covariance) +
                "' differs from the settings' '" +
                to_string(m.settings.covariance) + "'");
  }
  if (tiles->published_version() == 0) {
    throw Error("set_target: the tiled map has published nothing yet (call its publish() after adding tiles)");
  }
  if (tiles->publishes_on_device() && m.backend->kind() != Backend::Cuda) {
    throw Error("set_target: the tiled map publishes on the GPU (its tiles are voxelized there); a CPU aligner follows "
                "a tiled map built with Backend::Cpu");
  }
  // Bound now, so that a map another CUDA aligner follows is refused here.
  std::shared_ptr<const VoxelMap> previous_map = std::move(m.map);
  std::shared_ptr<TiledVoxelMap> previous_tiled = std::move(m.tiled);
  m.tiled = std::move(tiles);
  m.map.reset();
  try {
    (void)m.take_target();
  } catch (...) {
    m.tiled = std::move(previous_tiled);
    m.map = std::move(previous_map);
    throw;
  }
}

void Aligner::stage_target(std::shared_ptr<const VoxelMap> map) {
  check_target(map.get(), impl_->settings, "stage_target");
  impl_->backend->stage_map(map);
}

namespace {

void check_inputs(bool has_target, PointCloudView source, const Eigen::Matrix4d& guess) {
  if (!has_target) throw Error("align: no target set (call set_target first)");
  if (!guess.allFinite()) throw Error("align: the initial guess has a non-finite entry");
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (!source[i].allFinite()) throw Error("align: source point " + std::to_string(i) + " is not finite");
  }
}

}  // namespace

namespace {

// Throws Error naming the first hypothesis with a non-finite entry.
void check_guesses(const std::vector<Pose6>& guesses, const std::string& what) {
  if (guesses.empty()) throw Error(what + ": the guess list is empty");
  for (std::size_t k = 0; k < guesses.size(); ++k) {
    for (int i = 0; i < 6; ++i) {
      if (!std::isfinite(guesses[k](i))) {
        throw Error(what + ": hypothesis " + std::to_string(k) + " has a non-finite " + kPoseEntryNames[i] + " (" +
                    ndtcu::number_text(guesses[k](i)) + ")");
      }
    }
  }
}

}  // namespace

AlignResult Aligner::align(PointCloudView source, const Eigen::Matrix4d& guess) {
  if (!guess.allFinite()) throw Error("align: the initial guess has a non-finite entry");
  return align_from_pose(source, matrix_to_pose(guess));
}

Aligner::VersionHold::VersionHold(int* holds) noexcept : holds_(holds) { ++*holds_; }
Aligner::VersionHold::VersionHold(VersionHold&& other) noexcept : holds_(other.holds_) { other.holds_ = nullptr; }
Aligner::VersionHold::~VersionHold() {
  if (holds_) --*holds_;
}
Aligner::VersionHold Aligner::hold_target_version() noexcept { return VersionHold(&impl_->version_holds); }

AlignResult Aligner::align_from_pose(PointCloudView source, const Pose6& guess_pose) {
  NDTCU_NVTX_RANGE("align");
  if (!guess_pose.allFinite()) throw Error("align: the initial guess has a non-finite entry");
  const std::vector<Pose6> guesses{guess_pose};
  BatchOptions options;
  options.trace = true;
  AlignResult r = std::move(run_batch({source}, {&guesses}, options).front().front());
  if (r.reason == StopReason::EmptySource || r.reason == StopReason::NoVoxels) {
    detail::log().warn("align: {}", to_string(r.reason));
  } else if (r.reason == StopReason::NoCorrespondence || r.reason == StopReason::SingularHessian) {
    detail::log().warn("align: stopped after {} iterations: {}", r.iterations, to_string(r.reason));
  }
  return r;
}

// Every alignment goes through here: B sources, each with its guesses, as one backend
// batch; a single align() is a batch of one.
std::vector<std::vector<AlignResult>> Aligner::run_batch(const std::vector<PointCloudView>& sources,
                                                         const std::vector<const std::vector<Pose6>*>& guesses,
                                                         const BatchOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& m = *impl_;
  if (!has_target()) throw Error("align: no target set (call set_target first)");
  if (options.max_iterations < 0 || options.max_iterations > kMaxIterations) {
    throw Error("align_batch: BatchOptions::max_iterations = " + std::to_string(options.max_iterations) +
                " (0: the aligner's own, else in [1, " + std::to_string(kMaxIterations) + "])");
  }
  if (!(options.step_size >= 0.0) || !std::isfinite(options.step_size) ||
      (options.step_size > 0.0 && 2.0 * options.step_size < m.settings.epsilon)) {
    throw Error(fmt::format("align_batch: BatchOptions::step_size = {} (0: the aligner's own, else a step length of at "
                            "least half the aligner's epsilon, {})",
                            options.step_size, 0.5 * m.settings.epsilon));
  }
  const bool keep_trace = options.trace;
  AlignSettings call_settings = m.settings;
  if (options.max_iterations > 0) call_settings.max_iterations = options.max_iterations;
  if (options.step_size > 0.0) call_settings.step_size = options.step_size;
  if (!options.prior) call_settings.prior = PosePrior{};
  for (const PointCloudView& source : sources) check_inputs(true, source, Eigen::Matrix4d::Identity());
  m.backend->reset_telemetry();
  const TargetNow map = m.take_target();

  std::vector<std::vector<AlignResult>> results(sources.size());
  std::vector<PointCloudView> points;  // the sources with points, for the backend (read where they lie)
  std::vector<detail::Hypothesis> hypotheses;
  std::vector<std::pair<std::size_t, std::size_t>> slot;  // (source, guess) of each hypothesis
  for (std::size_t b = 0; b < sources.size(); ++b) {
    const PointCloudView& source = sources[b];
    const bool runs = !source.empty() && map.voxels != 0;
    if (runs) points.push_back(source);
    const Pose6 prior = to_internal(call_settings.prior.pose, source.origin, map.origin);
    results[b].resize(guesses[b]->size());
    for (std::size_t k = 0; k < guesses[b]->size(); ++k) {
      const Pose6& guess = (*guesses[b])[k];
      AlignResult& r = results[b][k];
      r.backend = m.backend->kind();
      r.source_points = source.size();
      r.target_voxels = map.voxels;
      r.pose = guess;
      if (runs) {
        // Its pose and transform are the alignment's (below).
        hypotheses.push_back({to_internal(guess, source.origin, map.origin), static_cast<int>(points.size() - 1), prior});
        slot.emplace_back(b, k);
      } else {
        r.transform = pose_to_matrix(guess);
        r.reason = source.empty() ? StopReason::EmptySource : StopReason::NoVoxels;
      }
    }
  }
  if (!hypotheses.empty()) {
    // Each source's point moments, from which a pose's displacement metric follows (the
    // localizability's yardstick; one pass over the points per source, not per hypothesis).
    std::vector<PointMoments> moments(sources.size());
    if (options.localizability) {
      for (std::size_t b = 0; b < sources.size(); ++b) moments[b] = point_moments(sources[b].points, sources[b].size());
    }
    m.backend->set_sources(points);
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<detail::OptimizerOutput> outs = m.backend->align_batch(hypotheses, call_settings, keep_trace);
    const double optimize_ms = ms_since(t1);
    const detail::BackendTelemetry tel = m.backend->telemetry();
    int total_iterations = 0;
    for (const auto& o : outs) total_iterations += o.iterations;
    // Each hypothesis's result (its localizability is an eigen-decomposition: about 2 ms for
    // 1,024 hypotheses on one core, a tenth of a KITTI batch's time on the GPU), spread over
    // the execution's threads.
    m.for_each_result(outs.size(), [&](std::size_t h) {
      detail::OptimizerOutput& out = outs[h];
      const PointCloudView& source = sources[slot[h].first];
      const Pose6& guess = (*guesses[slot[h].first])[slot[h].second];
      AlignResult& r = results[slot[h].first][slot[h].second];
      r.iterations = out.iterations;
      r.reason = out.reason;
      r.converged = out.reason == StopReason::Converged;
      r.pose = to_world(out.pose, source.origin, map.origin);
      r.transform = pose_to_matrix(r.pose);
      fill_from_evaluation(r, out.final);
      if (options.localizability) {
        r.localizability = analyze_localizability(r.hessian, displacement_metric(out.pose, moments[slot[h].first]));
      }
      if (keep_trace) {
        std::vector<Eigen::Vector3d> positions{guess.head<3>()};
        for (auto& it : out.trace) {
          it.pose = to_world(it.pose, source.origin, map.origin);
          positions.push_back(it.pose.head<3>());
        }
        r.trace = std::move(out.trace);
        r.oscillation_count = detail::count_oscillation(positions);
      }
      r.timings.evaluations = out.evaluations;
      r.timings.optimize_ms = optimize_ms;
      r.timings.per_iteration_ms = total_iterations ? optimize_ms / total_iterations : 0.0;
      r.timings.upload_ms = tel.upload_ms;
      r.timings.gpu_ms = tel.gpu_ms;
      r.timings.bytes_up = tel.bytes_up;
      r.timings.bytes_down = tel.bytes_down;
      r.timings.setup_bytes_up = tel.setup_bytes_up;
    });
  }
  const double total_ms = ms_since(t0);
  for (auto& list : results) {
    for (AlignResult& r : list) r.timings.total_ms = total_ms;
  }
  return results;
}

AlignResult Aligner::evaluate(PointCloudView source, const Eigen::Matrix4d& transform) {
  check_inputs(has_target(), source, transform);
  AlignResult r = evaluate_poses(source, {matrix_to_pose(transform)}).front();
  if (r.matched_points > 0) {
    r.localizability =
        analyze_localizability(r.hessian, displacement_metric(r.pose, point_moments(source.points, source.size())));
  }
  return r;
}

std::vector<math::DerivativeSums> Aligner::Impl::sums_at(PointCloudView source, const std::vector<Pose6>& poses,
                                                         const TargetNow& target, bool with_hessian) {
  if (source.empty() || target.voxels == 0) return {};
  backend->set_sources({source});
  std::vector<Pose6> internal;
  internal.reserve(poses.size());
  for (const Pose6& p : poses) internal.push_back(to_internal(p, source.origin, target.origin));
  return backend->evaluate_batch(0, internal, with_hessian);
}

std::vector<AlignResult> Aligner::evaluate_batch(PointCloudView source, const std::vector<Pose6>& poses) {
  check_guesses(poses, "evaluate_batch");
  return evaluate_poses(source, poses);
}

std::vector<PoseScore> Aligner::score_batch(PointCloudView source, const std::vector<Pose6>& poses) {
  check_guesses(poses, "score_batch");
  Impl& m = *impl_;
  check_inputs(has_target(), source, Eigen::Matrix4d::Identity());
  m.backend->reset_telemetry();
  const TargetNow map = m.take_target();
  // Without the Hessian: the score, the NVTL sum and the counts do not depend on it.
  const std::vector<math::DerivativeSums> sums = m.sums_at(source, poses, map, false);
  std::vector<PoseScore> out(poses.size());
  for (std::size_t k = 0; k < sums.size(); ++k) {
    const math::DerivativeSums& s = sums[k];
    PoseScore& r = out[k];
    r.score = s.v[math::kScore];
    r.correspondences = static_cast<std::size_t>(s.v[math::kCorrespondences]);
    r.matched_points = static_cast<std::size_t>(s.v[math::kPointsMatched]);
    r.nvtl = nvtl_of(s.v[math::kNvtlSum], r.matched_points);
  }
  return out;
}

bool Aligner::score_scatter(PointCloudView source, const Eigen::Matrix4d& transform, Eigen::Matrix<double, 6, 6>& hessian,
                            Eigen::Matrix<double, 6, 6>& scatter) {
  check_inputs(has_target(), source, transform);
  Impl& m = *impl_;
  hessian.setZero();
  scatter.setZero();
  const TargetNow target = m.take_target();  // a tiled map on the device leaves no host map
  if (!m.map || source.empty()) return false;
  detail::CpuEvaluator evaluator(*m.map, source, m.settings.search, m.settings.outlier_ratio, nullptr);
  evaluator.gradient_scatter(to_internal(matrix_to_pose(transform), source.origin, target.origin), hessian, scatter);
  return true;
}

// Every evaluation goes through here, as one backend batch.
std::vector<AlignResult> Aligner::evaluate_poses(PointCloudView source, const std::vector<Pose6>& poses) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& m = *impl_;
  check_inputs(has_target(), source, Eigen::Matrix4d::Identity());
  m.backend->reset_telemetry();
  const TargetNow map = m.take_target();
  const StopReason degenerate = source.empty() ? StopReason::EmptySource : StopReason::NoVoxels;
  const bool runs = !source.empty() && map.voxels != 0;
  const std::vector<math::DerivativeSums> sums = m.sums_at(source, poses, map, true);
  const detail::BackendTelemetry tel = m.backend->telemetry();
  const double total_ms = ms_since(t0);
  std::vector<AlignResult> out(poses.size());
  for (std::size_t k = 0; k < poses.size(); ++k) {
    AlignResult& r = out[k];
    r.backend = m.backend->kind();
    r.source_points = source.size();
    r.target_voxels = map.voxels;
    r.pose = poses[k];
    r.transform = pose_to_matrix(r.pose);
    r.reason = runs ? StopReason::Converged : degenerate;
    if (runs) {
      fill_from_evaluation(r, detail::to_evaluation(sums[k]));
      r.timings.upload_ms = tel.upload_ms;
      r.timings.gpu_ms = tel.gpu_ms;
      r.timings.bytes_up = tel.bytes_up;
      r.timings.bytes_down = tel.bytes_down;
      r.timings.setup_bytes_up = tel.setup_bytes_up;
      r.timings.evaluations = 1;
      if (r.matched_points == 0) r.reason = StopReason::NoCorrespondence;
    }
    r.converged = r.reason == StopReason::Converged;
    r.timings.total_ms = total_ms;
  }
  return out;
}

AlignResult align(const PointCloud& target, PointCloudView source, const Eigen::Matrix4d& guess,
                  const AlignSettings& settings, const ExecutionOptions& execution) {
  Aligner aligner(settings, execution);
  aligner.set_target(target);
  AlignResult r = aligner.align(source, guess);
  attach_pose_covariance(aligner, source, r);  // settings.pose_covariance
  return r;
}


std::vector<AlignResult> Aligner::align_batch(PointCloudView source, const std::vector<Pose6>& guesses,
                                              const BatchOptions& options) {
  NDTCU_NVTX_RANGE("align batch");
  check_guesses(guesses, "align_batch");
  return std::move(run_batch({source}, {&guesses}, options).front());
}

std::vector<AlignResult> Aligner::align_batch(PointCloudView source, const std::vector<Eigen::Matrix4d>& guesses,
                                              const BatchOptions& options) {
  if (guesses.empty()) throw Error("align_batch: the guess list is empty");
  std::vector<Pose6> poses;
  poses.reserve(guesses.size());
  for (std::size_t k = 0; k < guesses.size(); ++k) {
    try {
      poses.push_back(matrix_to_pose(guesses[k]));
    } catch (const Error& e) {
      throw Error("align_batch: hypothesis " + std::to_string(k) + ": " + e.what());
    }
  }
  return align_batch(source, poses, options);
}

std::vector<std::vector<AlignResult>> Aligner::align_batch(const std::vector<PointCloud>& sources,
                                                           const std::vector<std::vector<Pose6>>& guesses,
                                                           const BatchOptions& options) {
  return align_batch(std::vector<PointCloudView>(sources.begin(), sources.end()), guesses, options);
}

std::vector<std::vector<AlignResult>> Aligner::align_batch(const std::vector<PointCloudView>& sources,
                                                           const std::vector<std::vector<Pose6>>& guesses,
                                                           const BatchOptions& options) {
  if (sources.empty()) throw Error("align_batch: the source list is empty");
  if (sources.size() != guesses.size()) {
    throw Error("align_batch: " + std::to_string(sources.size()) + " sources but " + std::to_string(guesses.size()) +
                " guess lists");
  }
  NDTCU_NVTX_RANGE("align batch");
  std::vector<const std::vector<Pose6>*> guess_lists;
  for (std::size_t b = 0; b < guesses.size(); ++b) {
    check_guesses(guesses[b], "align_batch: source " + std::to_string(b));
    guess_lists.push_back(&guesses[b]);
  }
  return run_batch(sources, guess_lists, options);
}

}  // namespace ndtcu
