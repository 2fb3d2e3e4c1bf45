#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/pose_covariance.hpp>

#include "../cuda/cuda_backend.hpp"
#include "../log.hpp"
#include "../nvtx.hpp"
#include "../thread_pool.hpp"
#include "evaluator.hpp"
#include "optimizer.hpp"

#include <Eigen/Geometry>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
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

VoxelMapOptions voxel_map_options(const AlignSettings& s) {
  VoxelMapOptions o;
  o.resolution = s.resolution;
  o.covariance = s.covariance;
  o.min_points = s.min_points_per_voxel;
  o.eigenvalue_ratio = s.eigenvalue_ratio;
  o.threads = s.threads;
  return o;
}

namespace {

// The one place a backend is chosen: "cpu" or "cuda".
const char* resolve_backend(Backend requested) {
  if (requested == Backend::Cpu) return "cpu";
  const std::string why = cuda_unavailable_reason();
  if (requested == Backend::Cuda) {
    if (!why.empty()) throw CudaError("backend cuda requested, but " + why);
    return "cuda";
  }
  static std::once_flag once;
  std::call_once(once, [&why] {
    if (why.empty()) {
      auto devices = cuda_devices();
      detail::log().info("backend auto: using CUDA on {}", devices.empty() ? "device 0" : devices.front().name);
    } else {
      detail::log().info("backend auto: using the CPU backend ({})", why);
    }
  });
  return why.empty() ? "cuda" : "cpu";
}

}  // namespace

struct Aligner::Impl {
  AlignSettings settings;
  std::shared_ptr<const VoxelMap> map;
  std::uint64_t map_generation = 0;  // bumped by set_target: the CUDA copy follows it
  detail::ThreadPool pool;
  const char* backend;
  std::unique_ptr<detail::CudaBackend> cuda;  // device state, kept across aligns
  std::uint64_t uploaded_generation = 0;
  // The CPU backend's dense voxel index of the map (empty: the map's hash is used), built
  // once per set_target when the map's box fits kCpuDenseIndexBudget.
  detail::DenseVoxelIndex cpu_index;
  std::uint64_t cpu_index_generation = 0;
  Impl(const AlignSettings& s, CUstream_st* stream)
      : settings(s), pool(s.threads),
        backend(resolve_backend(s.backend)) {
    if (std::string(backend) == "cuda") cuda = std::make_unique<detail::CudaBackend>(stream);
  }

  // The evaluator of the backend in use, with the map and the source on it. The CUDA
  // map is uploaded once per set_target, the source once per call.
  std::unique_ptr<detail::DerivativeEvaluator> evaluator(const PointCloud& source, AlignTimings& timings) {
    const VoxelMap& m = *map;
    if (!cuda) {
      if (cpu_index_generation != map_generation) {
        const detail::LatticeBox box = detail::occupied_box(m);
        cpu_index = box.bytes() <= double(detail::kCpuDenseIndexBudget) ? detail::DenseVoxelIndex::build(m, box)
                                                                         : detail::DenseVoxelIndex{};
        cpu_index_generation = map_generation;
      }
      return std::make_unique<detail::CpuEvaluator>(m, source.points, settings.search, settings.outlier_ratio, pool,
                                                    &cpu_index);
    }
    NDTCU_NVTX_RANGE("upload");
    const auto t0 = std::chrono::steady_clock::now();
    cuda->reset_telemetry();
    if (uploaded_generation != map_generation) {
      cuda->set_map(m);
      uploaded_generation = map_generation;
    }
    cuda->set_source(source.points);
    cuda->configure(settings.search, settings.outlier_ratio,
                    settings.gpu_derivatives == GpuDerivatives::Fused ? detail::DerivativeVariant::Fused
                                                                       : detail::DerivativeVariant::Precomputed);
    timings.upload_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return std::make_unique<detail::CudaEvaluator>(*cuda);
  }

  // The fixed step's Newton loop runs on the device when the backend is CUDA, the settings
  // ask for it and the driver has conditional graph nodes.
  bool use_device_loop() const {
    return cuda && wants_device_loop(settings) && cuda->device_loop_supported();
  }

  detail::OptimizerOutput optimize_on_device(const Pose6& start) {
    detail::DeviceLoopSettings d;
    d.step_min = settings.epsilon / 2;  // as optimize(): transformation_epsilon / 2
    d.step_max = settings.step_size;
    d.epsilon = settings.epsilon;
    d.max_iterations = settings.max_iterations;
    d.pcl_convergence = settings.convergence == ConvergenceRule::Pcl;
    detail::DeviceLoopOutput r = cuda->run_fixed_step(start, d);
    detail::OptimizerOutput out;
    out.pose = r.pose;
    out.iterations = r.iterations;
    out.reason = r.reason;
    out.final = detail::to_evaluation(r.final_sums);
    out.trace = std::move(r.trace);
    out.evaluations = r.evaluations;
    return out;
  }

  void record_telemetry(AlignTimings& timings) const {
    if (!cuda) return;
    const auto& t = cuda->telemetry();
    timings.gpu_ms = t.gpu_ms;
    timings.bytes_up = t.bytes_up;
    timings.bytes_down = t.bytes_down;
    timings.setup_bytes_up = t.setup_bytes_up;
  }
};

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Internal (map-relative) pose of a world pose: t_int = R o_s + t - o_m (see aligner.hpp).
Pose6 to_internal(const Pose6& world, const Eigen::Vector3d& source_origin, const Eigen::Vector3d& map_origin) {
  Pose6 p = world;
  const Eigen::Matrix3d r = pose_to_matrix(world).topLeftCorner<3, 3>();
  p.head<3>() = r * source_origin + world.head<3>() - map_origin;
  return p;
}

Pose6 to_world(const Pose6& internal, const Eigen::Vector3d& source_origin, const Eigen::Vector3d& map_origin) {
  Pose6 p = internal;
  const Eigen::Matrix3d r = pose_to_matrix(internal).topLeftCorner<3, 3>();
  p.head<3>() = internal.head<3>() - r * source_origin + map_origin;
  return p;
}

void fill_from_evaluation(AlignResult& r, const detail::Evaluation& e) {
  r.score = e.score;
  r.tp = r.source_points ? e.score / static_cast<double>(r.source_points) : 0.0;
  r.nvtl = e.matched_points ? e.nvtl_sum / static_cast<double>(e.matched_points) : 0.0;
  r.hessian = e.hessian;
  r.correspondences = e.correspondences;
  r.matched_points = e.matched_points;
}

}  // namespace

Aligner::Aligner(const AlignSettings& settings, CUstream_st* cuda_stream) {
  validate(settings);
  impl_ = std::make_unique<Impl>(settings, cuda_stream);
}
Aligner::~Aligner() = default;
Aligner::Aligner(Aligner&&) noexcept = default;
Aligner& Aligner::operator=(Aligner&&) noexcept = default;

const AlignSettings& Aligner::settings() const noexcept { return impl_->settings; }
const char* Aligner::backend() const noexcept { return impl_->backend; }
const std::shared_ptr<const VoxelMap>& Aligner::target() const noexcept { return impl_->map; }

void Aligner::set_target(const PointCloud& target) {
  impl_->map = std::make_shared<const VoxelMap>(VoxelMap::build(target, voxel_map_options(impl_->settings)));
  ++impl_->map_generation;
}

void Aligner::set_target(std::shared_ptr<const VoxelMap> map) {
  if (!map) throw Error("set_target: null voxel map");
  if (map->resolution() != static_cast<double>(static_cast<float>(impl_->settings.resolution))) {
    throw Error("set_target: voxel map resolution " + std::to_string(map->resolution()) +
                " differs from the settings' " + std::to_string(impl_->settings.resolution));
  }
  if (map->options().covariance != impl_->settings.covariance) {
    throw Error(std::string("set_target: voxel map covariance mode '") + to_string(map->options().covariance) +
                "' differs from the settings' '" + to_string(impl_->settings.covariance) + "'");
  }
  impl_->map = std::move(map);
  ++impl_->map_generation;
}

namespace {

void check_inputs(const std::shared_ptr<const VoxelMap>& map, const PointCloud& source, const Eigen::Matrix4d& guess) {
  if (!map) throw Error("align: no target set (call set_target first)");
  if (!guess.allFinite()) throw Error("align: the initial guess has a non-finite entry");
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (!source.points[i].allFinite()) throw Error("align: source point " + std::to_string(i) + " is not finite");
  }
}

}  // namespace

AlignResult Aligner::align(const PointCloud& source, const Eigen::Matrix4d& guess) {
  if (!guess.allFinite()) throw Error("align: the initial guess has a non-finite entry");
  return align_from_pose(source, matrix_to_pose(guess));
}

AlignResult Aligner::align_from_pose(const PointCloud& source, const Pose6& guess_pose) {
  NDTCU_NVTX_RANGE("align");
  const auto t0 = std::chrono::steady_clock::now();
  if (!guess_pose.allFinite()) throw Error("align: the initial guess has a non-finite entry");
  check_inputs(impl_->map, source, Eigen::Matrix4d::Identity());
  const VoxelMap& map = *impl_->map;
  const AlignSettings& s = impl_->settings;

  AlignResult r;
  r.backend = impl_->backend;
  r.source_points = source.size();
  r.target_voxels = map.size();
  r.pose = guess_pose;
  r.transform = pose_to_matrix(guess_pose);
  if (source.empty() || map.empty()) {
    r.reason = source.empty() ? StopReason::EmptySource : StopReason::NoVoxels;
    r.timings.total_ms = ms_since(t0);
    detail::log().warn("align: {}", to_string(r.reason));
    return r;
  }

  auto evaluator = impl_->evaluator(source, r.timings);
  const Pose6 start = to_internal(guess_pose, source.origin, map.origin());
  const auto t1 = std::chrono::steady_clock::now();
  detail::OptimizerOutput out = impl_->use_device_loop() ? impl_->optimize_on_device(start)
                                                          : detail::optimize(*evaluator, start, s);
  r.timings.optimize_ms = ms_since(t1);
  impl_->record_telemetry(r.timings);
  r.timings.evaluations = out.evaluations;
  r.timings.per_iteration_ms = out.iterations ? r.timings.optimize_ms / out.iterations : 0.0;

  r.iterations = out.iterations;
  r.reason = out.reason;
  r.converged = out.reason == StopReason::Converged;
  r.pose = to_world(out.pose, source.origin, map.origin());
  r.transform = pose_to_matrix(r.pose);
  fill_from_evaluation(r, out.final);
  std::vector<Eigen::Vector3d> positions{guess_pose.head<3>()};
  for (auto& it : out.trace) {
    it.pose = to_world(it.pose, source.origin, map.origin());
    positions.push_back(it.pose.head<3>());
  }
  r.trace = std::move(out.trace);
  r.oscillation_count = detail::count_oscillation(positions);
  r.timings.total_ms = ms_since(t0);
  if (r.reason == StopReason::NoCorrespondence || r.reason == StopReason::SingularHessian) {
    detail::log().warn("align: stopped after {} iterations: {}", r.iterations, to_string(r.reason));
  }
  if (s.pose_covariance != PoseCovariance::None) attach_pose_covariance(*this, source, r, s.pose_covariance);
  return r;
}

AlignResult Aligner::evaluate(const PointCloud& source, const Eigen::Matrix4d& transform) {
  const auto t0 = std::chrono::steady_clock::now();
  check_inputs(impl_->map, source, transform);
  const VoxelMap& map = *impl_->map;
  AlignResult r;
  r.backend = impl_->backend;
  r.source_points = source.size();
  r.target_voxels = map.size();
  r.pose = matrix_to_pose(transform);
  r.transform = pose_to_matrix(r.pose);
  r.reason = source.empty() ? StopReason::EmptySource : map.empty() ? StopReason::NoVoxels : StopReason::Converged;
  if (r.reason == StopReason::Converged) {
    auto evaluator = impl_->evaluator(source, r.timings);
    fill_from_evaluation(r, evaluator->evaluate(to_internal(r.pose, source.origin, map.origin()), true));
    impl_->record_telemetry(r.timings);
    r.timings.evaluations = 1;
    if (r.matched_points == 0) r.reason = StopReason::NoCorrespondence;
  }
  r.converged = r.reason == StopReason::Converged;
  r.timings.total_ms = ms_since(t0);
  return r;
}

namespace {

// Throws Error naming the first hypothesis with a non-finite entry.
void check_guesses(const std::vector<Pose6>& guesses, const std::string& what) {
  if (guesses.empty()) throw Error(what + ": the guess list is empty");
  static const char* const kEntry[6] = {"x", "y", "z", "roll", "pitch", "yaw"};
  for (std::size_t k = 0; k < guesses.size(); ++k) {
    for (int i = 0; i < 6; ++i) {
      if (!std::isfinite(guesses[k](i))) {
        throw Error(what + ": hypothesis " + std::to_string(k) + " has a non-finite " + kEntry[i] + " (" +
                    std::to_string(guesses[k](i)) + ")");
      }
    }
  }
}

}  // namespace

std::vector<AlignResult> Aligner::align_batch(const PointCloud& source, const std::vector<Pose6>& guesses,
                                              const BatchOptions& options) {
  check_guesses(guesses, "align_batch");
  std::vector<AlignResult> out;
  out.reserve(guesses.size());
  for (const Pose6& g : guesses) {
    out.push_back(align_from_pose(source, g));
    if (!options.trace) out.back().trace.clear();
  }
  return out;
}

std::vector<AlignResult> Aligner::align_batch(const PointCloud& source, const std::vector<Eigen::Matrix4d>& guesses,
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
  if (sources.empty()) throw Error("align_batch: the source list is empty");
  if (sources.size() != guesses.size()) {
    throw Error("align_batch: " + std::to_string(sources.size()) + " sources but " + std::to_string(guesses.size()) +
                " guess lists");
  }
  for (std::size_t b = 0; b < guesses.size(); ++b) check_guesses(guesses[b], "align_batch: source " + std::to_string(b));
  std::vector<std::vector<AlignResult>> out;
  out.reserve(sources.size());
  for (std::size_t b = 0; b < sources.size(); ++b) out.push_back(align_batch(sources[b], guesses[b], options));
  return out;
}

AlignResult align(const PointCloud& target, const PointCloud& source, const Eigen::Matrix4d& guess,
                  const AlignSettings& settings) {
  Aligner aligner(settings);
  aligner.set_target(target);
  return aligner.align(source, guess);
}

}  // namespace ndtcu
