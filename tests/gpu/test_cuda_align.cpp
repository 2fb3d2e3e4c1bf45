// Whole alignments on the CUDA backend against the CPU backend on identical input:
// every pair of the data folder and a simulator scene, every search mode, both line
// searches, and for the fixed step both places of the Newton loop (the device-resident
// graph and the host loop). Final pose within 1 mm and 0.01 deg, iterations equal (or
// within 1 where float rounding decides a tie), TP and NVTL within 1e-4 relative; a map
// offset to UTM coordinates gives the same relative result within 1 mm.
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/pose_covariance.hpp>
#include <ndtcu/trajectory.hpp>

#include "ndt_derivatives.hpp"

#include <Eigen/Geometry>

#include <cmath>
#include <utility>

using namespace ndtcu;

namespace {

struct Case {
  std::string name;
  PointCloud target, source;
  AlignSettings settings;
  Pose6 guess = Pose6::Zero();
};

PointCloud load(const std::filesystem::path& path, double leaf) {
  PointCloud c = read_point_cloud(path.string());
  // Points exactly at the origin are invalid returns in these scans.
  PointCloud kept;
  kept.origin = c.origin;
  for (const auto& p : c.points) {
    if (!p.isZero()) kept.points.push_back(p);
  }
  return leaf > 0 ? voxel_downsample(kept, leaf) : kept;
}

Pose6 pose_of(const Eigen::Isometry3d& t) { return matrix_to_pose(t.matrix()); }

std::vector<Case> cases(const std::filesystem::path& data) {
  std::vector<Case> out;
  const std::filesystem::path sample = ndtcu::test::source_dir() / "data" / "sample";
  {  // the simulator's sample: scan 3 against the map from 0.8 m / 3 deg off its truth
    Case c{"sample scan 3", load(sample / "map.pcd", 0.0), load(sample / "scans/000003.pcd", 0.5), autoware_preset()};
    Trajectory truth = read_trajectory((sample / "poses_tum.txt").string());
    c.guess = pose_of(truth[3].pose);
    c.guess(0) += 0.8;
    c.guess(1) -= 0.6;
    c.guess(5) += 3.0 * M_PI / 180.0;
    out.push_back(std::move(c));
  }
  if (data.empty()) return out;
  // Each real pair only where its dataset is: a partial copy of the data folder runs what it holds.
  const auto has = [&data](const char* set) { return std::filesystem::exists(data / set); };
  if (has("pairs/hdl32")) {
    Case c{"hdl32", load(data / "pairs/hdl32/target_251370668.pcd", 0.1),
           load(data / "pairs/hdl32/source_251371071.pcd", 0.1), autoware_preset()};
    c.settings.resolution = 1.0;
    out.push_back(std::move(c));
  }
  if (has("pairs/room_scan")) {
    Case c{"room_scan", load(data / "pairs/room_scan/room_scan1.pcd", 0.0),
           load(data / "pairs/room_scan/room_scan2.pcd", 0.2), pcl_preset()};
    c.guess << 1.79387, 0.720047, 0, 0, 0, 0.6931;
    out.push_back(std::move(c));
  }
  if (has("kitti00")) {
    Case c{"kitti00 0<-1", load(data / "kitti00/velodyne/000000.bin", 0.2), load(data / "kitti00/velodyne/000001.bin", 1.0),
           autoware_preset()};
    out.push_back(std::move(c));
  }
  return out;
}

double angle_between(const Pose6& a, const Pose6& b) {
  const Eigen::Matrix3d ra = pose_to_matrix(a).topLeftCorner<3, 3>(), rb = pose_to_matrix(b).topLeftCorner<3, 3>();
  return Eigen::AngleAxisd(ra.transpose() * rb).angle();
}

// Case `c` aligned with settings `s`, run as `e`, on the CPU backend and on the CUDA backend.
std::pair<AlignResult, AlignResult> align_cpu_and_cuda(const Case& c, const AlignSettings& s,
                                                       const ExecutionOptions& e = {}) {
  ExecutionOptions cpu_exec = e, gpu_exec = e;
  cpu_exec.backend = Backend::Cpu;
  gpu_exec.backend = Backend::Cuda;
  Aligner cpu(s, cpu_exec), gpu(s, gpu_exec);
  cpu.set_target(c.target);
  gpu.set_target(c.target);
  return {cpu.align_from_pose(c.source, c.guess), gpu.align_from_pose(c.source, c.guess)};
}

}  // namespace

TEST_CASE("CUDA alignments match the CPU backend on every pair, search and line search", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  auto data = test::data_dir();
  if (!data) WARN("data folder absent: only the simulator scene runs");
  for (Case& c : cases(data ? *data : std::filesystem::path{})) {
    for (SearchMethod search : {SearchMethod::Radius, SearchMethod::Direct27, SearchMethod::Direct7, SearchMethod::Direct1}) {
      for (LineSearch line : {LineSearch::Fixed, LineSearch::MoreThuente}) {
        for (GpuNewtonLoop loop : {GpuNewtonLoop::Device, GpuNewtonLoop::Host}) {
          if (line == LineSearch::MoreThuente && loop == GpuNewtonLoop::Device) continue;  // host only
          AlignSettings s = c.settings;
          ExecutionOptions e;
          s.search = search;
          s.line_search = line;
          e.gpu_loop = loop;
          e.threads = 0;
          const auto [rc, rg] = align_cpu_and_cuda(c, s, e);
          CAPTURE(c.name, to_string(search), to_string(line), to_string(loop), rc.iterations, rg.iterations,
                  to_string(rc.reason), to_string(rg.reason), rc.pose.transpose(), rg.pose.transpose());
          CHECK(rg.backend == Backend::Cuda);
          CHECK((rg.pose.head<3>() - rc.pose.head<3>()).norm() < 1e-3);
          CHECK(angle_between(rg.pose, rc.pose) < 0.01 * M_PI / 180.0);
          CHECK(std::abs(rg.iterations - rc.iterations) <= 1);
          CHECK(std::abs(rg.tp - rc.tp) <= 1e-4 * std::abs(rc.tp));
          CHECK(std::abs(rg.nvtl - rc.nvtl) <= 1e-4 * std::abs(rc.nvtl));
          CHECK(rg.trace.size() == static_cast<std::size_t>(rg.iterations));
          if (rg.iterations == rc.iterations) {
            CHECK(rg.reason == rc.reason);
            CHECK(rg.timings.evaluations == rc.timings.evaluations);
            for (std::size_t k = 0; k < rc.trace.size(); ++k) {
              CHECK(std::abs(rg.trace[k].score - rc.trace[k].score) <= 1e-4 * std::abs(rc.trace[k].score) + 1e-6);
            }
          }
          if (loop == GpuNewtonLoop::Host || line == LineSearch::MoreThuente) {
            CHECK(rg.timings.bytes_up == sizeof(math::PoseFrame) * static_cast<unsigned>(rg.timings.evaluations));
          } else {
            CHECK(rg.timings.bytes_up < 512u);  // the hypothesis's state and the rules, once per alignment
          }
        }
      }
    }
  }
}

// NewtonDirection::SaddleFree on CUDA: the device loop runs only PCL's direction, so the
// loop runs on the host (one pose frame uploaded per evaluation) even where the device loop is
// asked for, and the alignment follows the CPU backend's.
TEST_CASE("CUDA alignments with the saddle-free direction run the host loop and match the CPU backend", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  auto data = test::data_dir();
  for (Case& c : cases(data ? *data : std::filesystem::path{})) {
    AlignSettings s = c.settings;
    ExecutionOptions e;
    s.line_search = LineSearch::Fixed;
    s.newton_direction = NewtonDirection::SaddleFree;
    e.gpu_loop = GpuNewtonLoop::Device;
    const auto [rc, rg] = align_cpu_and_cuda(c, s, e);
    CAPTURE(c.name, rc.iterations, rg.iterations, to_string(rc.reason), to_string(rg.reason));
    CHECK(rg.backend == Backend::Cuda);
    CHECK((rg.pose.head<3>() - rc.pose.head<3>()).norm() < 1e-3);
    CHECK(angle_between(rg.pose, rc.pose) < 0.01 * M_PI / 180.0);
    CHECK(std::abs(rg.iterations - rc.iterations) <= 1);
    CHECK(rg.timings.bytes_up == sizeof(math::PoseFrame) * static_cast<unsigned>(rg.timings.evaluations));
  }
}

TEST_CASE("CUDA alignment to a map at UTM coordinates gives the same relative result", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  Case c = cases({}).front();
  AlignSettings s = c.settings;
  ExecutionOptions execution;
  execution.backend = Backend::Cuda;
  Aligner near(s, execution), far(s, execution);
  near.set_target(c.target);
  PointCloud utm = c.target;
  const Eigen::Vector3d offset(680000.0, 3900000.0, 40.0);
  utm.origin += offset;  // the same points, now 680 km east and 3900 km north
  far.set_target(utm);
  Pose6 far_guess = c.guess;
  far_guess.head<3>() += offset;
  const AlignResult a = near.align_from_pose(c.source, c.guess);
  const AlignResult b = far.align_from_pose(c.source, far_guess);
  CAPTURE(a.pose.transpose(), b.pose.transpose());
  CHECK((b.pose.head<3>() - offset - a.pose.head<3>()).norm() < 1e-3);
  CHECK(angle_between(a.pose, b.pose) < 0.01 * M_PI / 180.0);
  CHECK(a.iterations == b.iterations);
}

namespace {

// An aligner of the case's settings estimating `mode` on `backend`, the case's map set.
Aligner covariance_aligner(const Case& c, PoseCovariance mode, Backend backend) {
  AlignSettings s = c.settings;
  s.pose_covariance = mode;
  ExecutionOptions execution;
  execution.backend = backend;
  Aligner aligner(s, execution);
  aligner.set_target(c.target);
  return aligner;
}

}  // namespace

// The sandwich covariance is computed on the host from the aligner's map: on a CUDA
// aligner (its map built on the GPU) the same halves as the CPU aligner's at the same pose,
// to the map's float bits.
TEST_CASE("The sandwich covariance on a CUDA aligner: the CPU aligner's halves at the same pose", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const Case c = cases({}).front();
  Aligner cpu = covariance_aligner(c, PoseCovariance::Sandwich, Backend::Cpu);
  Aligner gpu = covariance_aligner(c, PoseCovariance::Sandwich, Backend::Cuda);
  AlignResult r = gpu.align_from_pose(c.source, c.guess);
  REQUIRE(r.converged);
  Eigen::Matrix<double, 6, 6> hc, bc, hg, bg;
  REQUIRE(cpu.score_scatter(c.source, r.transform, hc, bc));
  REQUIRE(gpu.score_scatter(c.source, r.transform, hg, bg));
  CAPTURE(hc, hg, bc, bg);
  CHECK((hc - hg).cwiseAbs().maxCoeff() <= 1e-6 * hc.cwiseAbs().maxCoeff());
  CHECK((bc - bg).cwiseAbs().maxCoeff() <= 1e-6 * bc.cwiseAbs().maxCoeff());
  attach_pose_covariance(gpu, c.source, r);
  CHECK(r.covariance_mode == PoseCovariance::Sandwich);
  CHECK(r.covariance_valid);
  const Eigen::Matrix<double, 6, 6> a_inverse = (-hg).inverse();
  CHECK((r.covariance - a_inverse * bg * a_inverse).cwiseAbs().maxCoeff() <= 1e-8 * r.covariance.cwiseAbs().maxCoeff());
}

// The calibrated covariance on a CUDA aligner: the Laplace estimate of its own Hessian with
// the terms of calibrated_pose_covariance, as the CPU aligner computes them from its result.
TEST_CASE("The calibrated covariance on a CUDA aligner: the CPU aligner's at the same alignment", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const Case c = cases({}).front();
  Aligner cpu = covariance_aligner(c, PoseCovariance::Calibrated, Backend::Cpu);
  Aligner gpu = covariance_aligner(c, PoseCovariance::Calibrated, Backend::Cuda);
  AlignResult r = gpu.align_from_pose(c.source, c.guess);
  REQUIRE(r.converged);
  AlignResult on_cpu = r;  // the same alignment's result, calibrated by the CPU aligner
  attach_pose_covariance(gpu, c.source, r);
  attach_pose_covariance(cpu, c.source, on_cpu);
  CHECK(r.covariance_mode == PoseCovariance::Calibrated);
  REQUIRE(r.covariance_valid);
  REQUIRE(on_cpu.covariance_valid);
  // Host math on the same numbers: equal to double rounding.
  CHECK((r.covariance - on_cpu.covariance).cwiseAbs().maxCoeff() <= 1e-12 * on_cpu.covariance.cwiseAbs().maxCoeff());
  const PoseCovarianceResult laplace = estimate_pose_covariance(gpu, c.source, r, PoseCovariance::Laplace);
  REQUIRE(laplace.valid);
  CHECK(r.covariance.trace() > laplace.covariance.trace());
}

TEST_CASE("Backend::Cuda without a usable device is a clear CudaError", "[unit]") {
  AlignSettings s;
  ExecutionOptions execution;
  execution.backend = Backend::Cuda;
  if (!cuda_devices().empty()) {
    CHECK(Aligner(s, execution).backend() == Backend::Cuda);
    return;
  }
  try {
    Aligner a(s, execution);
    FAIL("no CudaError");
  } catch (const CudaError& e) {
    CHECK_THAT(e.what(), Catch::Contains("backend cuda requested, but"));
  }
  execution.backend = Backend::Auto;
  CHECK(Aligner(s, execution).backend() == Backend::Cpu);
}

TEST_CASE("ExecutionOptions::device: an index past the devices is an Error naming it and the count; an index "
          "given runs there with the bits of the default", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const int count = static_cast<int>(cuda_devices().size());
  const Case c = cases({}).front();
  AlignSettings s = c.settings;
  ExecutionOptions execution;
  execution.backend = Backend::Cuda;
  execution.device = count;
  try {
    Aligner a(s, execution);
    FAIL("no Error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("device " + std::to_string(count) + ": no such CUDA device (" +
                                         std::to_string(count)));
  }
  // The last device, named, against the current one (-1): the same alignment, bit for bit
  // (on a one-GPU machine both are device 0; on more, device count-1 against device 0).
  execution.device = count - 1;
  Aligner named(s, execution);
  execution.device = -1;
  Aligner current(s, execution);
  named.set_target(c.target);
  current.set_target(c.target);
  const AlignResult a = named.align_from_pose(c.source, c.guess);
  const AlignResult b = current.align_from_pose(c.source, c.guess);
  CHECK(a.pose == b.pose);
  CHECK(a.iterations == b.iterations);
  CHECK(a.score == b.score);
}
