// The CUDA backend's device members: the buffers of the sources and of a batch's
// hypotheses, and the launches of kernels/ndt_loop_kernels.cuh on them. The map is a
// DeviceVoxelMap's, the loop graphs a LoopGraphCache's.
#include "cuda_backend.hpp"

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_scope.hpp"
#include "loop_graph.hpp"
#include "ndt_loop_kernels.cuh"

#include "../nvtx.hpp"

#include <ndtcu/cuda_device.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace ndtcu::detail {
namespace {

constexpr int kBlock = kLoopBlock;

/// Grows `buffer` to hold `n` (with headroom); true when it was reallocated (graphs built
/// on its old address are then stale).
template <typename T>
bool grow(DeviceBuffer<T>& buffer, std::size_t n) {
  const T* before = buffer.data();
  buffer.resize_with_headroom(n);
  return buffer.data() != before;
}

// NDTCU_CUDA_LOOP: how a new backend launches the device loop (LoopLaunch).
LoopLaunch loop_launch_from_environment() {
  const char* env = std::getenv("NDTCU_CUDA_LOOP");
  if (!env || !*env || std::strcmp(env, "auto") == 0) return LoopLaunch::Auto;
  if (std::strcmp(env, "graph") == 0) return LoopLaunch::Graph;
  if (std::strcmp(env, "stream") == 0) return LoopLaunch::Stream;
  throw Error(std::string("NDTCU_CUDA_LOOP is '") + env + "'; it must be 'auto', 'graph' or 'stream'");
}

void check_source(int source, std::size_t sources) {
  if (source < 0 || static_cast<std::size_t>(source) >= sources) {
    throw Error("CUDA backend: evaluate of source " + std::to_string(source) + " of " + std::to_string(sources));
  }
}

}  // namespace

std::uint64_t device_allocations() noexcept { return device_allocation_count(); }

struct CudaBackend::Impl {
  explicit Impl(cudaStream_t s) : stream(s), map(s) {}

  cudaStream_t stream = nullptr;
  std::uint64_t allocations_at_start = 0;
  DeviceVoxelMap map;
  // Sources, concatenated, as structure of arrays: x, y and z each contiguous, in the three
  // parts of `points` (point_capacity points each), staged in pinned memory and sent with
  // the source table in two copies. Measured on the H200's host (one alignment, BALM 1.4k /
  // KITTI 5k / hdl32 16k points): set_sources took 33-43 / 83-102 / 60-145 us with the four
  // pageable copies it made before, 10 / 10 / 22-24 us this way.
  DeviceBuffer<float> points;
  std::size_t point_capacity = 0;
  DeviceBuffer<DeviceSource> source_table;
  std::vector<DeviceSource> sources;
  PinnedBuffer<float> pinned_points;
  PinnedBuffer<DeviceSource> pinned_sources;
  cudaEvent_t sources_sent = nullptr;  // recorded after the copies out of the pinned staging
  int multiprocessors = 1;     // of the current device
  int driver_version = 0;      // cudaDriverGetVersion: conditional graph nodes need 12040
  int cooperative_blocks = 0;  // cooperative loop kernel's blocks resident at once (0: no cooperative launch)
  LoopLaunch loop_launch = LoopLaunch::Auto;
  // Configuration.
  DeviceBuffer<DeviceConfig> config;
  SearchMethod search = SearchMethod::Radius;
  double outlier_ratio = 0.55;
  bool config_dirty = true;       // the configuration may have changed: compare before the next use
  bool config_on_device = false;  // `uploaded` is what config holds
  DeviceConfig uploaded;
  // Hypotheses: state, running list, partials, sums, trace.
  DeviceBuffer<DeviceHyp> hyps;
  DeviceBuffer<int> active, running, active_count;
  DeviceBuffer<Vec<kSums>> partials, group_partials, sums;
  DeviceBuffer<math::StepTrace> trace;
  DeviceBuffer<unsigned> ticket;
  DeviceBuffer<math::StepRules> rules;
  DeviceBuffer<math::PoseFrame> eval_frames;  // an evaluation's poses' frames
  PinnedBuffer<DeviceHyp> pinned_hyps;
  PinnedBuffer<Vec<kSums>> pinned_sums;
  PinnedBuffer<math::StepTrace> pinned_trace;
  PinnedBuffer<math::PoseFrame> pinned_frames;
  PinnedBuffer<int> pinned_active;
  PinnedBuffer<math::StepRules> pinned_rules;
  int partial_blocks = 0;        // partials per hypothesis the buffers hold
  int partial_groups = 0;        // group sums each of group_partials' two halves holds
  std::uint64_t generation = 1;  // bumped whenever a buffer a graph points into moves
  cudaEvent_t start = nullptr, stop = nullptr;
  BackendTelemetry telemetry;
  LoopGraphCache graphs;

  ~Impl() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (sources_sent) cudaEventDestroy(sources_sent);
  }

  /// Sends the configuration when it differs from what the device holds (the sources' and
  /// the map's addresses change only when their buffers grow or the map is swapped).
  void upload_config() {
    if (!map.ready()) throw Error("CudaBackend: no map set");
    const math::GaussConstants g = math::gauss_constants(map.resolution(), outlier_ratio);
    DeviceConfig c;
    std::memset(&c, 0, sizeof c);  // padding too: compared byte for byte below
    c.grid = map.grid();
    c.x = points.data();
    c.y = c.x + point_capacity;
    c.z = c.y + point_capacity;
    c.sources = source_table.data();
    c.search = to_math(search);
    c.d1 = g.d1;
    c.d2 = g.d2;
    config_dirty = false;
    if (config_on_device && std::memcmp(&c, &uploaded, sizeof c) == 0) return;
    config_on_device = false;  // until the copy below is queued
    config.upload(&c, 1, stream);
    std::memcpy(&uploaded, &c, sizeof c);
    config_on_device = true;
    telemetry.setup_bytes_up += sizeof(c);
  }

  /// The most blocks a source takes in the single alignment's launch shape (`single`) or
  /// a batch's (one thread per point).
  int max_source_blocks(bool single) const {
    int b = 1;
    for (const DeviceSource& s : sources) b = std::max(b, single ? s.single.blocks : s.blocks);
    return b;
  }

  /// The most point groups (partial sums) a source has.
  int max_source_groups() const {
    int g = 1;
    for (const DeviceSource& s : sources) g = std::max(g, s.groups);
    return g;
  }

  /// Sizes the per-hypothesis buffers for `k` hypotheses (grow-only, with headroom): the
  /// partial and group sums and the sums every evaluation writes, then with `loop` the
  /// device loop's states, running list and trace, without it an evaluation's frames.
  void size_for(std::size_t k, bool loop, bool with_trace, int max_iterations) {
    const int blocks = max_source_blocks(false);
    bool moved = false;
    try {
      if (blocks > partial_blocks) {
        partial_blocks = blocks + blocks / 4 + 1;  // headroom for scans a little larger
        partials.resize_discard(0);
        moved = true;
      }
      // The cooperative loop alternates between two sets of a batch of one's partials (two
      // hypotheses' worth) and two of its group sums.
      moved |= grow(partials, std::max<std::size_t>(k, 2) * static_cast<std::size_t>(partial_blocks));
      if (const int groups = max_source_groups(); groups > partial_groups) {
        partial_groups = groups + groups / 4 + 1;
        group_partials.resize_discard(0);
        moved = true;
      }
      moved |= grow(group_partials, 2 * static_cast<std::size_t>(partial_groups));
      moved |= grow(sums, k);
      if (loop) {
        moved |= grow(hyps, k);
        moved |= grow(active, k);
        moved |= grow(running, k);
        moved |= grow(active_count, 1);
        moved |= grow(ticket, 1);
        moved |= grow(rules, 1);
        if (with_trace && grow(trace, k * static_cast<std::size_t>(max_iterations))) {
          moved = true;
          // A hypothesis writes only the iterations it runs, and the read-back copies every
          // slot: zero them once, so no read-back ever copies uninitialized memory.
          NDTCU_CUDA_CHECK(cudaMemsetAsync(trace.data(), 0, trace.capacity() * sizeof(math::StepTrace), stream));
        }
      } else {
        grow(eval_frames, k);  // no graph points into it
      }
    } catch (...) {
      ++generation;  // a buffer may have been freed: no cached graph may point into it
      throw;
    }
    if (moved) ++generation;
  }

  /// Room in the pinned staging for `k` hypotheses.
  void reserve_pinned(std::size_t k) {
    pinned_hyps.reserve_with_headroom(k);
    pinned_sums.reserve_with_headroom(k);
    pinned_active.reserve_with_headroom(k + 1);
  }

  BatchArgs args(bool with_trace) {
    BatchArgs a{};
    a.cfg = config.data();
    a.hyps = hyps.data();
    a.active = active.data();
    a.active_count = active_count.data();
    a.running = running.data();
    a.partials = partials.data();
    a.sums = sums.data();
    a.trace = with_trace ? trace.data() : nullptr;
    a.ticket = ticket.data();
    a.group_partials = group_partials.data();
    a.max_blocks = partial_blocks;
    a.max_groups = partial_groups;
    a.rules = rules.data();
    return a;
  }

  /// Uploads the first `k` hypotheses staged in pinned_hyps and the running list of all of
  /// them (0 .. k - 1) on the stream.
  void upload_hypotheses(std::size_t k) {
    for (std::size_t i = 0; i < k; ++i) pinned_active.data()[i] = static_cast<int>(i);
    pinned_active.data()[k] = static_cast<int>(k);
    NDTCU_CUDA_CHECK(
        cudaMemcpyAsync(hyps.data(), pinned_hyps.data(), k * sizeof(DeviceHyp), cudaMemcpyHostToDevice, stream));
    NDTCU_CUDA_CHECK(
        cudaMemcpyAsync(active.data(), pinned_active.data(), k * sizeof(int), cudaMemcpyHostToDevice, stream));
    NDTCU_CUDA_CHECK(
        cudaMemcpyAsync(active_count.data(), pinned_active.data() + k, sizeof(int), cudaMemcpyHostToDevice, stream));
  }

  /// The loop's blocks for a batch of one (`single`) or more: the largest source's with
  /// headroom (so scans a little larger or smaller share a graph; blocks past a source's
  /// exit at once).
  int loop_blocks(bool single) const {
    const int needed = max_source_blocks(single);
    return needed + needed / 4 + 1;
  }

  /// The device time between the start and stop events (the stream synchronized).
  float elapsed_ms() const {
    float ms = 0.f;
    NDTCU_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  }

  /// Adds one call's counts to the telemetry.
  void count(std::uint64_t evaluations, std::uint64_t up, std::uint64_t down, float ms) {
    telemetry.evaluations += evaluations;
    telemetry.bytes_up += up;
    telemetry.bytes_down += down;
    telemetry.gpu_ms += ms;
    telemetry.device_allocations = device_allocation_count() - allocations_at_start;
  }

  /// Readies an evaluation of source `source` at `k` poses: checks the source, sends the
  /// configuration if it changed, sizes the buffers and the pinned staging. False when
  /// there is nothing to evaluate (no poses, or a source without points: zero sums).
  bool stage_evaluation(int source, std::size_t k) {
    check_source(source, sources.size());
    if (config_dirty) upload_config();
    if (k == 0 || sources[static_cast<std::size_t>(source)].n == 0) return false;
    size_for(k, false, false, 1);
    pinned_frames.reserve_with_headroom(k);
    pinned_sums.reserve_with_headroom(k);
    return true;
  }

  /// Evaluates source `source` at the `k` pose frames staged in pinned_frames, their sums
  /// into pinned_sums (the stream synchronized): the frames' one copy, the derivative
  /// kernel (a grid of one pose in the single alignment's instance and shape), the
  /// reduction, the sums' one copy back. The evaluations' one path: evaluate() is a batch
  /// of one, so a pose's sums are the same bits either way.
  void evaluate_staged(int source, std::size_t k) {
    const DeviceSource& src = sources[static_cast<std::size_t>(source)];
    const int blocks = k == 1 ? src.single.blocks : src.blocks;
    const BatchArgs a = args(false);
    const EvaluationArgs e{eval_frames.data(), source};
    NDTCU_NVTX_RANGE("derivatives");
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(eval_frames.data(), pinned_frames.data(), k * sizeof(math::PoseFrame),
                                     cudaMemcpyHostToDevice, stream));
    NDTCU_CUDA_CHECK(cudaEventRecord(start, stream));
    launch_derivatives(a, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(k)), e, stream);
    NDTCU_CUDA_CHECK_LAUNCH();
    launch_reduce(a, e, static_cast<int>(k), stream);
    NDTCU_CUDA_CHECK_LAUNCH();
    NDTCU_CUDA_CHECK(cudaEventRecord(stop, stream));
    NDTCU_CUDA_CHECK(
        cudaMemcpyAsync(pinned_sums.data(), sums.data(), k * sizeof(Vec<kSums>), cudaMemcpyDeviceToHost, stream));
    NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));  // the one synchronization per evaluation
    count(k, k * sizeof(math::PoseFrame), k * sizeof(Vec<kSums>), elapsed_ms());
  }

  void launch_loop(std::size_t k, const math::StepRules& rules, bool keep_trace, bool cooperative, bool in_graph,
                   int single_blocks);
  std::vector<OptimizerOutput> read_back(std::size_t k, const math::StepRules& rules, bool keep_trace);
};

CudaBackend::CudaBackend(CUstream_st* stream, int device) : device_(-1) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw CudaError("CUDA backend unavailable: " + why);
  const LoopLaunch launch = loop_launch_from_environment();
  device_ = resolve_device(device);
  DeviceScope scope(device_);
  impl_ = std::make_unique<Impl>(stream);
  Impl& m = *impl_;
  m.loop_launch = launch;
  m.allocations_at_start = device_allocation_count();
  int current = 0;
  NDTCU_CUDA_CHECK(cudaGetDevice(&current));
  NDTCU_CUDA_CHECK(cudaDeviceGetAttribute(&m.multiprocessors, cudaDevAttrMultiProcessorCount, current));
  NDTCU_CUDA_CHECK(cudaDriverGetVersion(&m.driver_version));
  int cooperative = 0, per_sm = 0;
  NDTCU_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, current));
  if (cooperative) {
    NDTCU_CUDA_CHECK(cooperative_loop_blocks_per_sm(per_sm));
    m.cooperative_blocks = per_sm * m.multiprocessors;
  }
  NDTCU_CUDA_CHECK(cudaEventCreate(&m.start));
  NDTCU_CUDA_CHECK(cudaEventCreate(&m.stop));
  NDTCU_CUDA_CHECK(cudaEventCreateWithFlags(&m.sources_sent, cudaEventDisableTiming));
  m.config.resize_discard(1);
  m.eval_frames.resize_discard(1);
  m.pinned_frames.reserve(1);
  m.pinned_sums.reserve(1);
  m.pinned_active.reserve(2);
  m.pinned_hyps.reserve(1);
  m.pinned_rules.reserve(1);
  m.size_for(1, true, false, 1);
  NDTCU_CUDA_CHECK(cudaMemsetAsync(m.ticket.data(), 0, sizeof(unsigned), m.stream));
}

CudaBackend::~CudaBackend() {
  try {
    DeviceScope scope(device_);
    impl_.reset();
  } catch (...) {
    impl_.reset();  // the device could not be made current: freed where it is
  }
}

void CudaBackend::set_loop_launch(LoopLaunch launch) noexcept { impl_->loop_launch = launch; }
LoopLaunch CudaBackend::loop_launch() const noexcept { return impl_->loop_launch; }

void CudaBackend::set_map(const VoxelMap& map, VoxelLookup lookup, std::size_t dense_budget_bytes) {
  Impl& m = *impl_;
  map_.reset();  // the map set_map(shared_ptr) set is no longer the one in use
  const MapChange change = m.map.set(map, lookup, dense_budget_bytes);
  m.telemetry.setup_bytes_up += change.bytes_up;
  if (change.swapped) ++m.telemetry.map_swaps;
  m.config_dirty = true;
}

void CudaBackend::set_map_from_device(const VoxelMap& map, const DeviceVoxelCells& cells, VoxelLookup lookup,
                                      std::size_t dense_budget_bytes) {
  Impl& m = *impl_;
  map_.reset();
  m.config_dirty = true;
  m.telemetry.setup_bytes_up += m.map.set_from_device(map, cells, lookup, dense_budget_bytes).bytes_up;
}

void CudaBackend::stage_map(std::shared_ptr<const VoxelMap> map, VoxelLookup lookup, std::size_t dense_budget_bytes) {
  if (!map) throw Error("CudaBackend::stage_map: null map");
  impl_->map.stage(std::move(map), lookup, dense_budget_bytes);
}

std::size_t CudaBackend::use_tiled_map(DeviceTiledMap& map, bool take_newer) {
  Impl& m = *impl_;
  map_.reset();  // a later set_map of any map sets it again (and leaves the tiled map)
  if (m.map.use_tiled(map, take_newer).swapped) {
    m.config_dirty = true;
    ++m.telemetry.map_swaps;
  }
  return m.map.tiled_voxels();
}

void CudaBackend::configure(SearchMethod search, double outlier_ratio) {
  Impl& m = *impl_;
  m.search = search;
  m.outlier_ratio = outlier_ratio;
  m.config_dirty = true;
}

VoxelLookup CudaBackend::lookup() const noexcept { return impl_->map.lookup(); }

BackendTelemetry CudaBackend::telemetry() const {
  BackendTelemetry t = impl_->telemetry;
  t.upload_ms = upload_ms_;
  return t;
}

void CudaBackend::reset_telemetry() noexcept {
  impl_->telemetry = BackendTelemetry{};
  impl_->allocations_at_start = device_allocation_count();
  upload_ms_ = 0.0;
}

void CudaBackend::set_sources_on_device(const std::vector<PointCloudView>& sources) {
  Impl& m = *impl_;
  std::size_t total = 0;
  for (const PointCloudView& s : sources) total += s.size();
  if (total > static_cast<std::size_t>(std::numeric_limits<int>::max() / (2 * kMaxLanes))) {
    throw Error("CUDA backend: " + std::to_string(total) + " source points are more than it indexes");
  }
  // Whatever happens below, the configuration the kernels read (the point buffers'
  // addresses) may be stale until compared and sent again, and the cached sources are gone.
  m.config_dirty = true;
  m.sources.clear();
  // The last copies out of the staging have finished before it is written or freed.
  NDTCU_CUDA_CHECK(cudaEventSynchronize(m.sources_sent));
  // A scan larger than any before grows the buffers to 1.5 times its size: localizing a
  // sequence whose filtered scans grow a little at a time would otherwise reallocate (a
  // device-wide synchronization) on every new maximum. A growth that fails leaves the old
  // buffer as it was (DeviceBuffer::resize_discard).
  const std::size_t capacity = std::max<std::size_t>(total, 1);
  if (capacity > m.point_capacity) {
    const std::size_t grown = capacity + capacity / 2;
    m.pinned_points.reserve(3 * grown);
    try {
      m.points.resize_discard(3 * grown);
    } catch (...) {
      ++m.generation;  // no cached graph may run on what was freed
      throw;
    }
    m.point_capacity = grown;
  }
  m.pinned_sources.reserve_with_headroom(sources.size());
  // Structure of arrays: x, y, z each contiguous, so a warp's loads coalesce.
  float* const xs = m.pinned_points.data();
  float* const ys = xs + m.point_capacity;
  float* const zs = ys + m.point_capacity;
  std::size_t at = 0;
  for (const PointCloudView& s : sources) {
    DeviceSource d{};
    d.offset = static_cast<int>(at);
    d.n = static_cast<int>(s.size());
    d.groups = static_cast<int>(
        std::max<std::int64_t>(1, (static_cast<std::int64_t>(d.n) + kPointGroup - 1) / kPointGroup));
    d.blocks = static_cast<int>(std::max<std::int64_t>(1, (static_cast<std::int64_t>(d.n) + kBlock - 1) / kBlock));
    d.single = single_shape(d.n, m.multiprocessors);
    m.sources.push_back(d);
    for (std::size_t i = 0; i < s.size(); ++i) {
      xs[at + i] = s[i].x();
      ys[at + i] = s[i].y();
      zs[at + i] = s[i].z();
    }
    at += s.size();
  }
  std::copy(m.sources.begin(), m.sources.end(), m.pinned_sources.data());
  // The three parts in one copy (with the unused ends of the first two) while those ends
  // are not larger than the points; else a copy each.
  std::size_t sent = 0;
  if (2 * (m.point_capacity - total) <= 3 * total) {
    sent = 2 * m.point_capacity + total;
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.points.data(), xs, sent * sizeof(float), cudaMemcpyHostToDevice, m.stream));
  } else if (total > 0) {
    sent = 3 * total;
    for (std::size_t part = 0; part < 3; ++part) {
      NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.points.data() + part * m.point_capacity, xs + part * m.point_capacity,
                                       total * sizeof(float), cudaMemcpyHostToDevice, m.stream));
    }
  }
  m.source_table.resize_discard(m.sources.size());
  if (!m.sources.empty()) {
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(m.source_table.data(), m.pinned_sources.data(),
                                     m.sources.size() * sizeof(DeviceSource), cudaMemcpyHostToDevice, m.stream));
  }
  NDTCU_CUDA_CHECK(cudaEventRecord(m.sources_sent, m.stream));
  m.telemetry.setup_bytes_up += sent * sizeof(float) + m.sources.size() * sizeof(DeviceSource);
}

math::DerivativeSums CudaBackend::evaluate_on_device(int source, const Pose6& pose, bool with_hessian) {
  Impl& m = *impl_;
  math::DerivativeSums out;
  out.clear();
  if (!m.stage_evaluation(source, 1)) return out;
  const double p[6] = {pose(0), pose(1), pose(2), pose(3), pose(4), pose(5)};
  *m.pinned_frames.data() = math::pose_frame(p, with_hessian);
  m.evaluate_staged(source, 1);
  for (int k = 0; k < kSums; ++k) out.v[k] = m.pinned_sums.data()->v[k];
  return out;
}

std::vector<math::DerivativeSums> CudaBackend::evaluate_batch_on_device(int source, const std::vector<Pose6>& poses,
                                                                        bool with_hessian) {
  Impl& m = *impl_;
  const std::size_t k = poses.size();
  std::vector<math::DerivativeSums> out(k);
  for (auto& s : out) s.clear();
  if (k > 65535) throw Error("CUDA backend: " + std::to_string(k) + " poses in one evaluation batch (at most 65535)");
  if (!m.stage_evaluation(source, k)) return out;
  math::PoseFrame* frames = m.pinned_frames.data();
  for (std::size_t i = 0; i < k; ++i) {
    const double p[6] = {poses[i](0), poses[i](1), poses[i](2), poses[i](3), poses[i](4), poses[i](5)};
    frames[i] = math::pose_frame(p, with_hessian);
  }
  m.evaluate_staged(source, k);
  for (std::size_t i = 0; i < k; ++i) {
    for (int j = 0; j < kSums; ++j) out[i].v[j] = m.pinned_sums.data()[i].v[j];
  }
  return out;
}

bool CudaBackend::device_loop_supported() const noexcept {
  return impl_->loop_launch == LoopLaunch::Stream || impl_->driver_version >= 12040 ||
         (impl_->loop_launch == LoopLaunch::Auto && impl_->cooperative_blocks > 0);
}

std::vector<OptimizerOutput> CudaBackend::run_fixed_step(const std::vector<Hypothesis>& hypotheses,
                                                         const math::StepRules& rules, bool keep_trace) {
  Impl& m = *impl_;
  if (!device_loop_supported()) throw CudaError("the device-resident Newton loop needs a CUDA 12.4 driver or later");
  if (rules.max_iterations < 1) throw Error("device loop: max_iterations must be at least 1");
  if (m.config_dirty) m.upload_config();
  const std::size_t k = hypotheses.size();
  if (k == 0) return {};
  for (const Hypothesis& h : hypotheses) {
    if (h.source < 0 || static_cast<std::size_t>(h.source) >= m.sources.size() ||
        m.sources[static_cast<std::size_t>(h.source)].n == 0) {
      throw Error("device loop: hypothesis of source " + std::to_string(h.source) + ", which has no points");
    }
  }
  const auto iterations = static_cast<std::size_t>(rules.max_iterations);
  m.size_for(k, true, keep_trace, rules.max_iterations);
  m.reserve_pinned(k);
  if (keep_trace) m.pinned_trace.reserve_with_headroom(k * iterations);
  // A batch of one whose blocks are all resident at once runs in the cooperative kernel.
  const int single_blocks = m.sources[static_cast<std::size_t>(hypotheses[0].source)].single.blocks;
  const bool cooperative = m.loop_launch == LoopLaunch::Auto && k == 1 && single_blocks <= m.cooperative_blocks;
  const bool in_graph = !cooperative && m.loop_launch != LoopLaunch::Stream;
  if (in_graph && m.driver_version < 12040) {
    throw CudaError("the device-resident Newton loop of a batch needs a CUDA 12.4 driver or later");
  }
  *m.pinned_rules.data() = rules;
  for (std::size_t i = 0; i < k; ++i) {
    const double p[6] = {hypotheses[i].start(0), hypotheses[i].start(1), hypotheses[i].start(2),
                         hypotheses[i].start(3), hypotheses[i].start(4), hypotheses[i].start(5)};
    DeviceHyp& h = m.pinned_hyps.data()[i];
    h.state = math::start_state(p);
    h.frame = math::pose_frame(p, true);
    h.source = hypotheses[i].source;
    for (int j = 0; j < 6; ++j) h.prior_center[j] = hypotheses[i].prior_center(j);
  }
  m.launch_loop(k, rules, keep_trace, cooperative, in_graph, single_blocks);
  return m.read_back(k, rules, keep_trace);
}

void CudaBackend::Impl::launch_loop(std::size_t k, const math::StepRules& step_rules, bool keep_trace,
                                    bool cooperative, bool in_graph, int single_blocks) {
  const int slots = loop_slots(static_cast<int>(k));
  cudaGraphExec_t graph = nullptr;
  if (in_graph) {
    bool built = false;
    graph = graphs.get(args(keep_trace), slots, max_source_blocks(slots == 1), loop_blocks(slots == 1), keep_trace,
                       generation, built);
    if (built) telemetry.graph_builds += 1;
  }
  NDTCU_NVTX_RANGE("device loop");
  NDTCU_CUDA_CHECK(cudaMemcpyAsync(rules.data(), pinned_rules.data(), sizeof(math::StepRules), cudaMemcpyHostToDevice,
                                   stream));
  upload_hypotheses(k);
  NDTCU_CUDA_CHECK(cudaEventRecord(start, stream));
  if (cooperative) {
    NDTCU_CUDA_CHECK(launch_cooperative_loop(args(keep_trace), single_blocks, stream));
    telemetry.cooperative_loops += 1;
  } else if (in_graph) {
    NDTCU_CUDA_CHECK(cudaGraphLaunch(graph, stream));
  } else {
    // A hypothesis evaluates at most max_iterations + 1 times (fixed_step), so that many
    // passes of the body run every loop to its end.
    const BatchArgs a = args(keep_trace);
    const int blocks = loop_blocks(slots == 1);
    for (int pass = 0; pass <= step_rules.max_iterations; ++pass) {
      NDTCU_CUDA_CHECK(launch_loop_body(a, blocks, slots, 0, false, stream));
    }
  }
  NDTCU_CUDA_CHECK(cudaEventRecord(stop, stream));
}

std::vector<OptimizerOutput> CudaBackend::Impl::read_back(std::size_t k, const math::StepRules& step_rules,
                                                          bool keep_trace) {
  const auto iterations = static_cast<std::size_t>(step_rules.max_iterations);
  NDTCU_CUDA_CHECK(
      cudaMemcpyAsync(pinned_hyps.data(), hyps.data(), k * sizeof(DeviceHyp), cudaMemcpyDeviceToHost, stream));
  NDTCU_CUDA_CHECK(
      cudaMemcpyAsync(pinned_sums.data(), sums.data(), k * sizeof(Vec<kSums>), cudaMemcpyDeviceToHost, stream));
  if (keep_trace) {
    NDTCU_CUDA_CHECK(cudaMemcpyAsync(pinned_trace.data(), trace.data(), k * iterations * sizeof(math::StepTrace),
                                     cudaMemcpyDeviceToHost, stream));
  }
  NDTCU_CUDA_CHECK(
      cudaMemcpyAsync(pinned_active.data() + k, active_count.data(), sizeof(int), cudaMemcpyDeviceToHost, stream));
  NDTCU_CUDA_CHECK(cudaStreamSynchronize(stream));
  const float ms = elapsed_ms();
  if (const int still = pinned_active.data()[k]; still != 0) {
    throw CudaError("device loop: " + std::to_string(still) + " of " + std::to_string(k) +
                    " hypotheses still running after the loop ended (max_iterations " +
                    std::to_string(step_rules.max_iterations) + ")");
  }
  std::vector<OptimizerOutput> out(k);
  std::uint64_t evaluations = 0;
  for (std::size_t i = 0; i < k; ++i) {
    const math::StepState& st = pinned_hyps.data()[i].state;
    OptimizerOutput& o = out[i];
    for (int j = 0; j < 6; ++j) o.pose(j) = st.pose[j];
    o.iterations = st.iterations;
    o.evaluations = st.evaluations;
    o.reason = to_stop_reason(st.reason);
    math::DerivativeSums final_sums;
    for (int j = 0; j < kSums; ++j) final_sums.v[j] = pinned_sums.data()[i].v[j];
    o.final = to_evaluation(final_sums);
    if (keep_trace) {
      o.trace = to_trace(pinned_trace.data() + i * iterations, std::min(st.iterations, step_rules.max_iterations));
    }
    evaluations += static_cast<std::uint64_t>(st.evaluations);
  }
  count(evaluations, k * (sizeof(DeviceHyp) + sizeof(int)) + sizeof(int) + sizeof(math::StepRules),
        k * (sizeof(DeviceHyp) + sizeof(Vec<kSums>)) + (keep_trace ? k * iterations * sizeof(math::StepTrace) : 0), ms);
  return out;
}

}  // namespace ndtcu::detail
