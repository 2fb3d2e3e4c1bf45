// Memory exhaustion on the CPU path: the allocation tracker fails the Nth allocation of a
// call, for every N up to the count an undisturbed call makes, with one thread and with
// two. Each call must throw std::bad_alloc or ndtcu::Error, or succeed with the bits of an
// undisturbed call (a nothrow allocation the library can do without); never crash, hang
// or terminate. The same object must then give the bits of a fresh one, and once the
// objects are gone no block may be left allocated. The sweeps are repeated with memory
// that stays exhausted from the Nth allocation on, which also fails the allocations of the
// error paths (an exception's message, a pool's cleanup).
#include "../support/alloc_tracker.hpp"
#include "../support/test_support.hpp"
#include "synthetic.hpp"
#include "map/voxel_map_access.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/voxel_map.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

using namespace ndtcu;

namespace {

// Bit-for-bit comparisons that allocate nothing, so that they can run while allocations
// are counted and failed.
template <class T>
bool same_bytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
bool same_values(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class Derived>
bool same_matrix(const Eigen::MatrixBase<Derived>& a, const Eigen::MatrixBase<Derived>& b) {
  return std::memcmp(a.derived().data(), b.derived().data(), sizeof(typename Derived::Scalar) * a.size()) == 0;
}

// Every number of a result but the timings.
bool same_result(const AlignResult& a, const AlignResult& b) {
  bool same = same_matrix(a.transform, b.transform) && same_matrix(a.pose, b.pose) && a.converged == b.converged &&
              a.reason == b.reason && a.iterations == b.iterations && same_bytes(a.score, b.score) &&
              same_bytes(a.tp, b.tp) && same_bytes(a.nvtl, b.nvtl) && same_matrix(a.hessian, b.hessian) &&
              a.correspondences == b.correspondences && a.matched_points == b.matched_points &&
              a.source_points == b.source_points && a.target_voxels == b.target_voxels &&
              a.oscillation_count == b.oscillation_count && a.covariance_mode == b.covariance_mode &&
              a.covariance_valid == b.covariance_valid && same_matrix(a.covariance, b.covariance) &&
              same_matrix(a.covariance_xy, b.covariance_xy) && a.backend == b.backend &&
              a.trace.size() == b.trace.size();
  for (std::size_t i = 0; same && i < a.trace.size(); ++i) {
    same = same_matrix(a.trace[i].pose, b.trace[i].pose) && same_bytes(a.trace[i].score, b.trace[i].score) &&
           same_bytes(a.trace[i].step_length, b.trace[i].step_length);
  }
  return same;
}

bool same_results(const std::vector<AlignResult>& a, const std::vector<AlignResult>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!same_result(a[i], b[i])) return false;
  }
  return true;
}

// Every array and number of a map but the build time.
bool same_map(const VoxelMap& a, const VoxelMap& b) {
  const VoxelMapStats &sa = a.stats(), &sb = b.stats();
  bool same = a.size() == b.size() && same_matrix(a.origin(), b.origin()) &&
              same_bytes(a.resolution(), b.resolution()) && sa.points == sb.points &&
              sa.occupied_cells == sb.occupied_cells && sa.sparse_cells == sb.sparse_cells &&
              sa.singular_cells == sb.singular_cells && same_values(a.cells(), b.cells()) &&
              same_values(a.point_counts(), b.point_counts()) &&
              same_values(detail::voxel_hash_table(a).keys, detail::voxel_hash_table(b).keys) &&
              same_values(detail::voxel_hash_table(a).values, detail::voxel_hash_table(b).values);
  for (int i = 0; same && i < 3; ++i) {
    same = same_values(a.mean(i), b.mean(i)) && same_values(a.centroid(i), b.centroid(i));
  }
  for (int e = 0; same && e < 6; ++e) {
    same = same_values(a.inverse_covariance(e), b.inverse_covariance(e)) &&
           same_values(a.covariance(e), b.covariance(e));
  }
  return same;
}

// Ends the program with a message when a sweep has not finished in time: a pool that
// waits forever for a task that died would otherwise hang the test run without a word of
// where. 120 s: the slowest sweep takes about a second, under AddressSanitizer a few.
// The constructor returns once the watchdog's thread runs: a thread's start mallocs and
// frees blocks, which must not fall between a sweep's two counts.
class Watchdog {
 public:
  Watchdog(const char* what, const std::atomic<std::uint64_t>& n)
      : thread_([this, what, &n] {
          std::unique_lock<std::mutex> lock(mutex_);
          running_ = true;
          cv_.notify_all();
          if (!cv_.wait_for(lock, std::chrono::seconds(120), [this] { return done_; })) {
            std::fprintf(stderr, "fault injection: %s hung with allocation %llu failed\n", what,
                         static_cast<unsigned long long>(n.load()));
            std::_Exit(1);
          }
        }) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return running_; });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool running_ = false;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

// What a sweep saw. Plain numbers, so that collecting them allocates nothing.
struct Sweep {
  std::uint64_t allocations = 0;        // made by an undisturbed call
  bool counted_right = false;           // and that call gave the expected bits
  std::uint64_t succeeded = 0;          // calls that returned
  std::uint64_t bad_alloc = 0;          // calls that threw std::bad_alloc
  std::uint64_t errors = 0;             // calls that threw ndtcu::Error
  std::uint64_t other_exception = 0;    // calls that threw anything else
  std::uint64_t not_failed = 0;         // Ns the call made fewer allocations than (worker timing)
  std::uint64_t first_other = 0;        // the first N of an other exception
  std::uint64_t first_wrong = 0;        // the first N whose call returned other bits
  std::uint64_t first_broken = 0;       // the first N after which the object gave other bits
  std::int64_t leaked_blocks = 0;       // blocks still allocated after the objects are gone
  std::int64_t leaked_bytes = 0;
};

// Runs the sweep: `make()` makes the object, `prepare(object)` puts it in the state a call
// starts from (never with failures armed), `call(object)` is the call under test and
// returns whether it gave the expected bits. One object serves every N, and after each
// failure it is called again as the failure left it, so state that a failed call leaves
// behind shows. Everything the sweep makes lives between the two counts that measure a
// leak; a first round before them, with as many threads running, makes what is made once
// per program (the logger, the backend's first-use state, and the stacks the C library
// keeps for new threads, with their TLS blocks that the sanitizers' hooks count), which
// is no leak.
template <class Make, class Prepare, class Call>
Sweep fault_sweep(const char* what, bool and_after, Make make, Prepare prepare, Call call) {
  Sweep s;
  std::atomic<std::uint64_t> current{0};
  Watchdog watchdog(what, current);
  {
    auto warm = make();
    prepare(warm);
    call(warm);
  }
  const test::AllocationCounts before = test::allocation_counts();
  {
    auto object = make();
    prepare(object);
    {
      test::ScopedAllocationFailure count_only(0);
      s.counted_right = call(object);
      s.allocations = test::allocation_counts_since_armed().allocations;
    }
    for (std::uint64_t n = 1; n <= s.allocations; ++n) {
      current = n;
      prepare(object);
      bool right = false;
      bool failed = false;
      try {
        test::ScopedAllocationFailure fail(n, and_after);
        try {
          right = call(object);
        } catch (...) {
          failed = test::allocation_counts_since_armed().failures > 0;
          throw;
        }
        failed = test::allocation_counts_since_armed().failures > 0;
        ++s.succeeded;
        if (!right && s.first_wrong == 0) s.first_wrong = n;
      } catch (const std::bad_alloc&) {
        ++s.bad_alloc;
      } catch (const Error&) {
        ++s.errors;
      } catch (...) {
        ++s.other_exception;
        if (s.first_other == 0) s.first_other = n;
      }
      if (!failed) ++s.not_failed;
      // The same object as the failure left it, undisturbed: the bits of a fresh one.
      if (!call(object) && s.first_broken == 0) s.first_broken = n;
    }
  }
  const test::AllocationCounts after = test::allocation_counts();
  s.leaked_blocks = after.live_blocks - before.live_blocks;
  s.leaked_bytes = after.live_bytes - before.live_bytes;
  return s;
}

void check_sweep(const Sweep& s, int threads) {
  CAPTURE(threads, s.allocations, s.succeeded, s.bad_alloc, s.errors, s.not_failed);
  // A call that allocates nothing would make the sweep test nothing.
  CHECK(s.allocations > 0);
  CHECK(s.counted_right);
  CHECK(s.other_exception == 0);
  CHECK(s.first_other == 0);
  CHECK(s.first_wrong == 0);
  CHECK(s.first_broken == 0);
  CHECK(s.leaked_blocks == 0);
  CHECK(s.leaked_bytes == 0);
  // Every N failed an allocation: with one thread a call allocates the same every time;
  // with two, a worker may start or stop at another point, so a few Ns may fall past
  // the end of a call that allocated less.
  if (threads == 1) CHECK(s.not_failed == 0);
  if (threads > 1) CHECK(s.not_failed <= s.allocations / 4);
  // Most failures are exceptions: a call that swallowed all of them would not be tested.
  CHECK(s.bad_alloc + s.errors > s.allocations / 2);
}

AlignSettings cpu_settings() {
  AlignSettings s = autoware_preset();
  s.resolution = 1.0;
  return s;
}

Pose6 pose(double x, double y, double z, double roll, double pitch, double yaw) {
  Pose6 p;
  p << x, y, z, roll, pitch, yaw;
  return p;
}

// The scene of the aligner sweeps: small clouds, so that a few hundred calls per sweep
// take a fraction of a second.
struct Scene {
  PointCloud target = test::synthetic_scene(21, 4000);
  Pose6 truth = pose(0.3, -0.2, 0.05, 0.01, -0.01, 0.03);
  PointCloud source = test::moved_by_inverse(test::synthetic_scene(22, 1000), truth);
  // A second map over another box of cells: an aligner that has used it holds another
  // dense voxel index, which a failed switch back must not leave behind.
  PointCloud other = [] {
    PointCloud c = test::synthetic_scene(23, 2000);
    for (auto& p : c.points) p += Eigen::Vector3f(7.f, -4.f, 1.f);
    return c;
  }();
};

// The scene, made once.
const Scene& scene() {
  static const Scene s;
  return s;
}

}  // namespace

TEST_CASE("VoxelMap::build: an allocation failure anywhere is an exception, and nothing leaks",
          "[unit][fault_injection]") {
  const PointCloud cloud = test::synthetic_scene(9, 4000);
  for (bool and_after : {false, true}) {
    for (int threads : {1, 2}) {
      VoxelMapOptions o;
      o.resolution = 1.0;
      o.threads = threads;
      const VoxelMap reference = VoxelMap::build(cloud, o);
      REQUIRE(reference.size() > 50);
      const Sweep s = fault_sweep(
          "VoxelMap::build", and_after, [] { return 0; }, [](int&) {},
          [&](int&) { return same_map(VoxelMap::build(cloud, o), reference); });
      CAPTURE(and_after);
      check_sweep(s, threads);
    }
  }
}

namespace {

// What `run` gives on a fresh aligner with `target`. The aligner is gone on return: its
// workers do not run on into a sweep, where their thread's start or end would be counted.
template <class Target, class Run>
auto fresh_result(const AlignSettings& settings, const ExecutionOptions& execution, const Target& target, Run run) {
  Aligner fresh(settings, execution);
  fresh.set_target(target);
  return run(fresh);
}

// The aligner sweeps over one entry point, for each of `variants`, both thread counts and
// both failure modes: `run(aligner)` is the call, `same(result, expected)` compares its
// bits with those of a fresh aligner's. Each call starts from an aligner that last used
// another map, so that it begins by switching back to the target (the dense voxel index
// of the CPU backend is rebuilt then).
template <class Run, class Same>
void sweep_aligner(const char* what, const std::vector<AlignSettings>& variants, Run run, Same same) {
  for (const AlignSettings& base : variants) {
    const VoxelMapOptions o = voxel_map_options(base, test::on_cpu(1));
    const auto target = std::make_shared<const VoxelMap>(VoxelMap::build(scene().target, o));
    const auto other = std::make_shared<const VoxelMap>(VoxelMap::build(scene().other, o));
    for (int threads : {1, 2}) {
      const AlignSettings& settings = base;
      const ExecutionOptions execution = test::on_cpu(threads);
      const auto expected = fresh_result(settings, execution, target, run);
      auto make = [&] {
        Aligner a(settings, execution);
        a.set_target(target);
        return a;
      };
      auto from_other_map = [&](Aligner& a) {
        a.set_target(other);
        a.evaluate(scene().source, Eigen::Matrix4d::Identity());
        a.set_target(target);
      };
      for (bool and_after : {false, true}) {
        CAPTURE(what, and_after, to_string(settings.line_search));
        auto call = [&](Aligner& a) { return same(run(a), expected); };
        check_sweep(fault_sweep(what, and_after, make, from_other_map, call), threads);
      }
    }
  }
}

AlignSettings pcl_cpu_settings() {
  AlignSettings s = preset("pcl");
  s.resolution = 1.0;
  s.epsilon = 1e-4;  // PCL's rule compares a squared translation: tighter so it iterates
  s.max_iterations = 4;  // each iteration runs the line search; four keep the sweep short
  return s;
}

}  // namespace

TEST_CASE("Aligner::align: an allocation failure anywhere is an exception, and the aligner stays usable",
          "[unit][fault_injection]") {
  // Both loops: Autoware's fixed step and PCL's More-Thuente line search, each taking
  // more than one step (a sweep over a call that stops at once would test less).
  for (const AlignSettings& s : {cpu_settings(), pcl_cpu_settings()}) {
    CHECK(align(scene().target, scene().source, Eigen::Matrix4d::Identity(), s, test::on_cpu(1)).iterations > 1);
  }
  sweep_aligner(
      "Aligner::align", {cpu_settings(), pcl_cpu_settings()}, [](Aligner& a) { return a.align(scene().source); },
      same_result);
}

TEST_CASE("Aligner::set_target from a cloud, then align: an allocation failure anywhere is an exception",
          "[unit][fault_injection]") {
  for (int threads : {1, 2}) {
    const AlignSettings settings = cpu_settings();
    const ExecutionOptions execution = test::on_cpu(threads);
    const auto other =
        std::make_shared<const VoxelMap>(VoxelMap::build(scene().other, voxel_map_options(settings, execution)));
    const AlignResult expected =
        fresh_result(settings, execution, scene().target, [](Aligner& a) { return a.align(scene().source); });
    for (bool and_after : {false, true}) {
      CAPTURE(and_after);
      check_sweep(fault_sweep(
                      "Aligner::set_target", and_after, [&] { return Aligner(settings, execution); },
                      [&](Aligner& a) {
                        a.set_target(other);
                        a.evaluate(scene().source, Eigen::Matrix4d::Identity());
                      },
                      [&](Aligner& a) {
                        a.set_target(scene().target);
                        return same_result(a.align(scene().source), expected);
                      }),
                  threads);
    }
  }
}

TEST_CASE("Aligner::align_batch: an allocation failure anywhere is an exception, and the aligner stays usable",
          "[unit][fault_injection]") {
  // Three hypotheses: with two threads they run on the workers, one per task.
  const std::vector<Pose6> guesses{pose(0, 0, 0, 0, 0, 0), pose(0.2, -0.3, 0, 0, 0, 0.02),
                                   pose(-0.2, 0.1, 0, 0, 0, -0.02)};
  sweep_aligner(
      "Aligner::align_batch", {cpu_settings()}, [&](Aligner& a) { return a.align_batch(scene().source, guesses); },
      same_results);
}

TEST_CASE("Aligner::evaluate and evaluate_batch: an allocation failure anywhere is an exception",
          "[unit][fault_injection]") {
  const Eigen::Matrix4d at = pose_to_matrix(scene().truth);
  sweep_aligner(
      "Aligner::evaluate", {cpu_settings()}, [&](Aligner& a) { return a.evaluate(scene().source, at); }, same_result);
  const std::vector<Pose6> poses{scene().truth, pose(0.1, 0, 0, 0, 0, 0), pose(0, 0.1, 0, 0, 0, 0.05)};
  sweep_aligner(
      "Aligner::evaluate_batch", {cpu_settings()}, [&](Aligner& a) { return a.evaluate_batch(scene().source, poses); },
      same_results);
}
