// Batched alignment on the CUDA backend: for every search mode, each hypothesis of a
// device batch has the bits of align() from its guess on the same backend, whatever the
// batch size and the order; several scans in one batch; no device allocation once sized;
// a batch larger than the device's memory is a CudaError and the next batch works.
#include "../ndt/batch_check.hpp"
#include "../ndt/synthetic.hpp"
#include "../support/test_support.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>

#include "cuda/cuda_backend.hpp"

#include <chrono>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace ndtcu;

namespace {

// K guesses within 0.6 m and 6 deg of `centre`, seeded.
std::vector<Pose6> random_guesses(const Pose6& centre, int k, std::uint32_t seed) {
  return test::guesses_around(centre, k, seed, 0.6, 6.0);
}

// A CUDA and a CPU aligner (Autoware's settings, run as `e` on each backend) on one target.
struct Backends {
  Aligner gpu, cpu;
  explicit Backends(const PointCloud& target, const AlignSettings& s = autoware_preset(),
                    const ExecutionOptions& e = ExecutionOptions{})
      : gpu(s, on(e, Backend::Cuda)), cpu(s, on(e, Backend::Cpu)) {
    gpu.set_target(target);
    cpu.set_target(target);
  }
  static ExecutionOptions on(ExecutionOptions e, Backend backend) {
    e.backend = backend;
    return e;
  }
};

}  // namespace

TEST_CASE("A CUDA batch gives every hypothesis the bits of align(), for any K and order", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const PointCloud target = test::synthetic_scene(71, 60000);
  Pose6 truth;
  truth << 0.4, -0.3, 0.05, 0.01, -0.02, 0.06;
  const PointCloud source = test::moved_by_inverse(test::synthetic_scene(72, 5000), truth);
  for (SearchMethod search : {SearchMethod::Radius, SearchMethod::Direct27, SearchMethod::Direct7, SearchMethod::Direct1}) {
    AlignSettings s = autoware_preset();
    ExecutionOptions e;
    e.backend = Backend::Cuda;
    s.search = search;
    Aligner aligner(s, e);
    aligner.set_target(target);
    const std::vector<Pose6> guesses = random_guesses(truth, test::repeats(37, 9), 17);
    const std::vector<AlignResult> batch = aligner.align_batch(source, guesses);
    int converged = 0;
    for (std::size_t k = 0; k < guesses.size(); ++k) {
      CAPTURE(to_string(search), k);
      test::check_same_bits(batch[k], aligner.align_from_pose(source, guesses[k]));
      converged += batch[k].converged;
    }
    CHECK(converged > static_cast<int>(guesses.size()) * 20 / 37);
    // The same hypotheses shuffled inside a larger batch of other guesses.
    std::vector<Pose6> mixed = random_guesses(truth, test::repeats(200, 40), 99);
    std::vector<std::size_t> where(guesses.size());
    std::mt19937 rng(4);
    for (std::size_t k = 0; k < guesses.size(); ++k) {
      where[k] = std::uniform_int_distribution<std::size_t>(0, mixed.size())(rng);
      mixed.insert(mixed.begin() + static_cast<std::ptrdiff_t>(where[k]), guesses[k]);
      for (std::size_t j = 0; j < k; ++j) where[j] += where[j] >= where[k] ? 1 : 0;
    }
    const std::vector<AlignResult> big = aligner.align_batch(source, mixed);
    for (std::size_t k = 0; k < guesses.size(); ++k) {
      CAPTURE(to_string(search), k, where[k]);
      test::check_same_bits(big[where[k]], batch[k]);
    }
    // A trace, when asked for, follows the single alignment's.
    const std::vector<AlignResult> traced = aligner.align_batch(source, std::vector<Pose6>{guesses[0], guesses[1]}, BatchOptions{true});
    const AlignResult single = aligner.align_from_pose(source, guesses[1]);
    REQUIRE(traced[1].trace.size() == single.trace.size());
    for (std::size_t i = 0; i < single.trace.size(); ++i) CHECK(traced[1].trace[i].pose == single.trace[i].pose);
  }
}

TEST_CASE("A CUDA single alignment has the bits of a batch whatever its threads per point", "[gpu]") {
  // A single alignment spreads each point over up to 8 threads, the more the smaller the
  // scan is next to the device; a batch gives each point one thread. Scans from 400 to
  // 48,000 points take every count on a device of 16 to 200 SMs: each one's single
  // alignment, its single evaluation and its pose in a batch have the same bits.
  NDTCU_REQUIRE_GPU();
  const PointCloud target = test::synthetic_scene(81, 60000);
  Pose6 truth;
  truth << 0.3, 0.2, -0.05, 0.01, 0.02, -0.04;
  // Under a sanitizer, three sizes (8, 4 and 1 lanes on a 132-SM device) and one search.
  const bool sanitized = test::under_sanitizer();
  const std::vector<int> sizes =
      sanitized ? std::vector<int>{1500, 6000, 48000} : std::vector<int>{400, 1500, 3000, 6000, 12000, 24000, 48000};
  std::vector<SearchMethod> searches{SearchMethod::Radius};
  if (!sanitized) searches.push_back(SearchMethod::Direct7);
  for (int n : sizes) {
    const PointCloud source = test::moved_by_inverse(test::synthetic_scene(82, n), truth);
    for (SearchMethod search : searches) {
      AlignSettings s = autoware_preset();
      s.search = search;
      Aligner aligner(s, Backends::on(ExecutionOptions{}, Backend::Cuda));
      aligner.set_target(target);
      const std::vector<Pose6> guesses = random_guesses(truth, 3, 5);
      const std::vector<AlignResult> batch = aligner.align_batch(source, guesses);
      const std::vector<AlignResult> evaluated = aligner.evaluate_batch(source, guesses);
      for (std::size_t k = 0; k < guesses.size(); ++k) {
        CAPTURE(n, to_string(search), k);
        test::check_same_bits(batch[k], aligner.align_from_pose(source, guesses[k]));
        test::check_same_bits(evaluated[k], aligner.evaluate_batch(source, std::vector<Pose6>{guesses[k]}).front());
      }
    }
  }
}

TEST_CASE("A CUDA batch of several scans, and the CPU backend's numbers", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const PointCloud target = test::synthetic_scene(73, 60000);
  Pose6 truth;
  truth << -0.3, 0.2, 0.0, 0.0, 0.01, -0.05;
  const std::vector<PointCloud> sources = {test::moved_by_inverse(test::synthetic_scene(74, 6000), truth),
                                           test::moved_by_inverse(test::synthetic_scene(75, 1200), truth)};
  const std::vector<std::vector<Pose6>> guesses = {random_guesses(truth, 9, 5), random_guesses(truth, 12, 6)};
  Backends both(target);
  Aligner& gpu = both.gpu;
  const auto all = gpu.align_batch(sources, guesses);
  const auto on_cpu = both.cpu.align_batch(sources, guesses);
  for (std::size_t b = 0; b < sources.size(); ++b) {
    const auto each = gpu.align_batch(sources[b], guesses[b]);
    for (std::size_t k = 0; k < each.size(); ++k) {
      CAPTURE(b, k);
      test::check_same_bits(all[b][k], each[k]);
      // The CPU runs the same math with each pair's terms in double, the GPU in float:
      // the paths agree to rounding, and an alignment may stop one iteration apart, so
      // the poses agree within a step under the convergence threshold (epsilon 0.01 m).
      CHECK((all[b][k].pose - on_cpu[b][k].pose).head<3>().norm() < 1e-2);
      CHECK(std::abs(all[b][k].iterations - on_cpu[b][k].iterations) <= 1);
    }
  }
}

TEST_CASE("A CUDA batch allocates nothing once sized, and memory errors are clear", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const PointCloud target = test::synthetic_scene(76, 60000);
  const PointCloud source = test::synthetic_scene(77, 5000);
  AlignSettings s = autoware_preset();
  ExecutionOptions execution;
  execution.backend = Backend::Cuda;
  Aligner aligner(s, execution);
  aligner.set_target(target);
  const std::vector<Pose6> guesses = random_guesses(Pose6::Zero(), test::repeats(256, 32), 8);
  const auto part = [&guesses](std::size_t of_256) {
    return std::vector<Pose6>(guesses.begin(), guesses.begin() + static_cast<std::ptrdiff_t>(guesses.size() * of_256 / 256));
  };
  const auto first = aligner.align_batch(source, guesses);
  const std::uint64_t allocations = detail::device_allocations();
  for (int run = 0; run < test::repeats(5, 1); ++run) {
    const auto again = aligner.align_batch(source, guesses);
    for (std::size_t k = 0; k < guesses.size(); k += 31) test::check_same_bits(again[k], first[k]);
  }
  const auto fewer = aligner.align_batch(source, part(100));
  CHECK(detail::device_allocations() == allocations);
  const auto t0 = std::chrono::steady_clock::now();
  const auto timed = aligner.align_batch(source, part(200));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  int iterations = 0;
  for (const auto& r : timed) iterations += r.iterations;
  WARN(timed.size() << " hypotheses of 5000 points: " << ms << " ms wall, " << timed.front().timings.gpu_ms << " ms GPU, "
                                         << iterations << " iterations");

  // A source whose partial sums for 32768 hypotheses cannot fit: 4 million points take
  // 15,625 blocks each, 32768 x 15,625 partials of 248 bytes are 127 GB.
  PointCloud huge;
  huge.points.reserve(4000000);
  while (huge.points.size() < 4000000) huge.points.insert(huge.points.end(), source.points.begin(), source.points.end());
  std::vector<Pose6> many(32768, Pose6::Zero());
  try {
    aligner.align_batch(huge, many);
    FAIL("a 127 GB batch did not fail");
  } catch (const CudaError& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("bytes") != std::string::npos);
  }
  const auto after = aligner.align_batch(source, std::vector<Pose6>(guesses.begin(), guesses.begin() + 8));
  for (std::size_t k = 0; k < after.size(); ++k) test::check_same_bits(after[k], first[k]);
}

TEST_CASE("A CUDA evaluation batch gives every pose the bits of a batch of one", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const PointCloud source = test::synthetic_scene(79, 5000);
  Backends b(test::synthetic_scene(78, 60000));
  Aligner& gpu = b.gpu;
  Aligner& cpu = b.cpu;
  const std::vector<Pose6> poses = random_guesses(Pose6::Zero(), 300, 21);
  const std::vector<AlignResult> batch = gpu.evaluate_batch(source, poses);
  const std::vector<AlignResult> on_cpu = cpu.evaluate_batch(source, poses);
  // score_batch: the same score, NVTL and counts, evaluated without the Hessian.
  const std::vector<PoseScore> scored = gpu.score_batch(source, poses);
  const std::vector<PoseScore> scored_on_cpu = cpu.score_batch(source, poses);
  REQUIRE(scored.size() == poses.size());
  for (std::size_t k = 0; k < poses.size(); ++k) {
    CAPTURE(k);
    test::check_same_score(scored[k], batch[k]);
    test::check_same_score(scored_on_cpu[k], on_cpu[k]);
  }
  for (std::size_t k = 0; k < poses.size(); k += 13) {
    CAPTURE(k);
    test::check_same_bits(batch[k], gpu.evaluate_batch(source, std::vector<Pose6>{poses[k]}).front());
    // The same pose frame and voxels on both backends; the GPU's pair terms in float
    // (measured on an H200: at most 1.7e-7 apart).
    CHECK(batch[k].correspondences == on_cpu[k].correspondences);
    CHECK(batch[k].score == Approx(on_cpu[k].score).epsilon(2e-6));
    CHECK(batch[k].nvtl == Approx(on_cpu[k].nvtl).epsilon(2e-6));
  }
}

TEST_CASE("A CUDA evaluation batch of more poses than a grid holds runs in parts, with the bits of small batches",
          "[gpu]") {
  NDTCU_REQUIRE_GPU();
  const PointCloud source = test::synthetic_scene(81, 256);
  Backends b(test::synthetic_scene(80, 60000));
  Aligner& gpu = b.gpu;
  Aligner& cpu = b.cpu;
  // 86,712 poses: what the localizer's widest recovery search screens (it used to stop a
  // run with "at most 65535 poses in one evaluation batch").
  const std::vector<Pose6> poses = test::guesses_around(Pose6::Zero(), 86712, 33, 3.0, 30.0);
  const std::vector<AlignResult> all = gpu.evaluate_batch(source, poses);
  REQUIRE(all.size() == poses.size());
  const std::vector<PoseScore> scored = gpu.score_batch(source, poses);
  REQUIRE(scored.size() == poses.size());
  for (std::size_t k = 0; k < poses.size(); k += 97) {
    CAPTURE(k);
    test::check_same_score(scored[k], all[k]);
  }
  // Poses on both sides of each part's border and at the ends, scored again in small batches.
  for (std::size_t first : {std::size_t{0}, std::size_t{32760}, std::size_t{65530}, poses.size() - 9}) {
    const std::vector<Pose6> few(poses.begin() + static_cast<std::ptrdiff_t>(first),
                                 poses.begin() + static_cast<std::ptrdiff_t>(first + 9));
    const std::vector<AlignResult> small = gpu.evaluate_batch(source, few);
    const std::vector<AlignResult> on_cpu = cpu.evaluate_batch(source, few);
    for (std::size_t k = 0; k < few.size(); ++k) {
      CAPTURE(first + k);
      test::check_same_bits(all[first + k], small[k]);
      CHECK(all[first + k].correspondences == on_cpu[k].correspondences);
      CHECK(all[first + k].score == Approx(on_cpu[k].score).epsilon(2e-6));  // float pair terms
    }
  }
  std::size_t matched = 0;
  for (const AlignResult& r : all) matched += r.matched_points > 0;
  CHECK(matched > poses.size() / 10);  // the poses met the map: the parts were really scored
}

TEST_CASE("A view of a caller's buffer aligns on CUDA with the bits of its PointCloud", "[gpu][view]") {
  NDTCU_REQUIRE_GPU();
  const PointCloud target = test::synthetic_scene(81, 40000);
  Pose6 truth;
  truth << 0.3, -0.2, 0.05, 0.01, -0.01, 0.05;
  PointCloud source = test::moved_by_inverse(test::synthetic_scene(82, 4000), truth);
  source.origin = Eigen::Vector3d(0.5, -0.25, 0.125);
  for (auto& p : source.points) p -= source.origin.cast<float>();
  // The points as float32 triples in a buffer of the caller's, NaN on each side: a read
  // past either end would meet one.
  constexpr std::size_t kGuard = 4;
  std::vector<float> raw(3 * (source.size() + 2 * kGuard), std::numeric_limits<float>::quiet_NaN());
  std::memcpy(raw.data() + 3 * kGuard, source.points.data(), source.size() * 3 * sizeof(float));
  const PointCloudView view(reinterpret_cast<const Eigen::Vector3f*>(raw.data() + 3 * kGuard), source.size(),
                            source.origin);
  AlignSettings s = autoware_preset();
  ExecutionOptions e;
  e.backend = Backend::Cuda;
  Aligner aligner(s, e);
  aligner.set_target(target);
  const std::vector<Pose6> guesses = random_guesses(truth, 6, 23);
  const std::vector<AlignResult> cloud = aligner.align_batch(source, guesses);
  const std::vector<AlignResult> viewed = aligner.align_batch(view, guesses);
  REQUIRE(viewed.size() == guesses.size());
  for (std::size_t k = 0; k < guesses.size(); ++k) {
    CAPTURE(k);
    CHECK(viewed[k].backend == Backend::Cuda);
    test::check_same_bits(viewed[k], cloud[k]);
    test::check_same_bits(aligner.align_from_pose(view, guesses[k]), aligner.align_from_pose(source, guesses[k]));
    test::check_same_bits(aligner.evaluate(view, pose_to_matrix(guesses[k])),
                          aligner.evaluate(source, pose_to_matrix(guesses[k])));
  }
  // The buffer rewritten in place (the points moved 1 m along x): the next call reads the
  // new points, as it reads a changed cloud.
  PointCloud moved = source;
  for (auto& p : moved.points) p.x() += 1.0f;
  std::memcpy(raw.data() + 3 * kGuard, moved.points.data(), moved.size() * 3 * sizeof(float));
  test::check_same_bits(aligner.align_from_pose(view, guesses[0]), aligner.align_from_pose(moved, guesses[0]));
}

// The pose prior runs in the device loop's step kernel (math::add_prior on the reduced
// sums) and in the host loops over device evaluations: both give the CPU's result, a batch
// keeps each hypothesis's bits, and zero information keeps the bits of no prior.
TEST_CASE("A CUDA pose prior gives the CPU backend's result on both loops, with batch bits", "[gpu]") {
  if (cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const auto [target, source, truth] = test::synthetic_pair(81, 60000, 5000, test::pose6(0.3, -0.2, 0.03, 0.01, -0.01, 0.04));
  PosePrior prior;
  prior.pose = truth;
  prior.pose(0) += 0.3;  // pulls x 0.3 m off the scan's optimum
  prior.information.diagonal() << 2e4, 1e2, 1e2, 1e3, 1e3, 1e3;
  for (GpuNewtonLoop loop : {GpuNewtonLoop::Device, GpuNewtonLoop::Host}) {
    for (double regularization : {0.0, 0.05}) {
      AlignSettings s = autoware_preset();
      ExecutionOptions e;
      e.gpu_loop = loop;
      s.prior = prior;
      s.prior.regularization_scale_factor = regularization;
      Backends b(target, s, e);
      Aligner& gpu = b.gpu;
      const std::vector<Pose6> guesses = random_guesses(truth, 20, 31);
      const std::vector<AlignResult> batch = gpu.align_batch(source, guesses);
      const std::vector<AlignResult> on_cpu = b.cpu.align_batch(source, guesses);
      for (std::size_t k = 0; k < guesses.size(); ++k) {
        CAPTURE(to_string(loop), regularization, k, batch[k].pose.transpose(), on_cpu[k].pose.transpose());
        test::check_same_bits(batch[k], gpu.align_from_pose(source, guesses[k]));
        // Float pair terms on the GPU: within a step under the threshold (see above).
        CHECK((batch[k].pose - on_cpu[k].pose).head<3>().norm() < 1e-2);
        CHECK(std::abs(batch[k].iterations - on_cpu[k].iterations) <= 1);
        CHECK(batch[k].score == Approx(on_cpu[k].score).epsilon(1e-3));
      }
      // The prior moved the result towards its centre (the scene holds x stiffly: about
      // a centimetre against 0.3 m at this information).
      s.prior = PosePrior{};
      Aligner free(s, Backends::on(e, Backend::Cpu));
      free.set_target(target);
      CHECK(batch[0].pose(0) > free.align_from_pose(source, guesses[0]).pose(0) + 0.005);
    }
  }
  // Zero information: the bits of no prior.
  AlignSettings plain = autoware_preset();
  ExecutionOptions plain_exec;
  plain_exec.backend = Backend::Cuda;
  AlignSettings zero = plain;
  zero.prior.pose = prior.pose;
  Aligner a(plain, plain_exec), b(zero, plain_exec);
  a.set_target(target);
  b.set_target(target);
  const std::vector<Pose6> guesses = random_guesses(truth, 8, 33);
  const std::vector<AlignResult> ra = a.align_batch(source, guesses), rb = b.align_batch(source, guesses);
  for (std::size_t k = 0; k < guesses.size(); ++k) test::check_same_bits(ra[k], rb[k]);
}
