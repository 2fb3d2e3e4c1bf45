// The thread pool of the CPU backend and of a batch's results: a thread that cannot be
// started (the system's thread or memory limit) is an ndtcu::Error, and the workers already
// started are stopped, not left waiting on a pool that no longer exists; an aligner whose
// results' pool cannot start makes them on its own thread.
#include "../support/test_support.hpp"
#include "batch_check.hpp"
#include "synthetic.hpp"

#include "thread_pool.hpp"

#include <ndtcu/aligner.hpp>
#include <ndtcu/error.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

using namespace ndtcu;

namespace {

std::atomic<int> g_fail_at{0};

// Fails the creation of worker `g_fail_at` as std::thread does when the system refuses it.
void fail_one_spawn(int index) {
  if (index == g_fail_at.load()) {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), "thread creation");
  }
}

struct ResetSpawnHook {
  ~ResetSpawnHook() { detail::thread_pool_spawn_hook = nullptr; }
};

// Constructs a pool of `threads` on a thread of its own and returns what happened, or
// "hung" when it has not returned within the deadline. The pool is gone, and the thread
// joined, before this returns: a worker or a thread still ending would free memory while
// the next test counts it.
std::string construct_pool(int threads) {
  auto outcome = std::make_shared<std::promise<std::string>>();
  std::future<std::string> result = outcome->get_future();
  std::thread constructor([outcome, threads] {
    std::string what;
    try {
      detail::ThreadPool pool(threads);
      what = "constructed, size " + std::to_string(pool.size());
    } catch (const Error& e) {
      what = std::string("Error: ") + e.what();
    } catch (const std::exception& e) {
      what = std::string("other exception: ") + e.what();
    }
    outcome->set_value(std::move(what));
  });
  // 30 s: joining a handful of idle workers takes microseconds.
  if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    constructor.detach();
    return "hung";
  }
  constructor.join();
  return result.get();
}

}  // namespace

TEST_CASE("a thread pool whose worker cannot be started throws Error and stops the started ones",
          "[unit][thread_pool]") {
  ResetSpawnHook reset;
  detail::thread_pool_spawn_hook = fail_one_spawn;
  for (int fail_at : {1, 2, 5, 7}) {
    CAPTURE(fail_at);
    g_fail_at = fail_at;
    const std::string what = construct_pool(8);
    CHECK_THAT(what, Catch::StartsWith("Error: 8 threads requested (the caller included), but worker thread " +
                                       std::to_string(fail_at) + " could not be started after " +
                                       std::to_string(fail_at - 1)));
    CHECK_THAT(what, Catch::Contains("Resource temporarily unavailable") && Catch::Contains("ask for fewer threads"));
  }
  // A failure that never comes: the pool is whole.
  g_fail_at = 100;
  CHECK(construct_pool(8) == "constructed, size 8");

  // And pools work again once threads can be made.
  detail::thread_pool_spawn_hook = nullptr;
  detail::ThreadPool pool(4);
  std::atomic<std::size_t> sum{0};
  pool.parallel_for(100, [&](std::size_t i) { sum += i; });
  CHECK(sum == 4950u);
}

TEST_CASE("a pool of 16 runs batches of 2 to 20 tasks, fewer than its workers or more, each task once",
          "[unit][thread_pool]") {
  // parallel_for wakes only as many workers as there are tasks beyond the caller's: the
  // others sleep through the batch and must still take part in the next, larger one.
  detail::ThreadPool pool(16);
  for (int round = 0; round < 200; ++round) {
    const std::size_t count = 2 + static_cast<std::size_t>(round % 19);
    std::vector<std::atomic<int>> runs(count);
    for (auto& r : runs) r = 0;
    pool.parallel_for(count, [&](std::size_t i) { runs[i]++; });
    for (std::size_t i = 0; i < count; ++i) {
      CAPTURE(round, count, i);
      CHECK(runs[i].load() == 1);
    }
  }
}

TEST_CASE("a batch's results made on the aligner's threads have the bits of one thread's, also when no thread starts",
          "[unit][thread_pool]") {
  // Aligner::align_batch makes the results of a batch of 64 hypotheses or more on a pool of
  // ExecutionOptions::threads; when that pool cannot be started it makes them itself.
  const PointCloud target = test::synthetic_scene(91, 20000);
  const PointCloud source = test::synthetic_scene(92, 400);
  const std::vector<Pose6> guesses = test::guesses_around(Pose6::Zero(), 80, 3, 0.5, 5.0);
  auto run = [&](int threads) {
    Aligner aligner(autoware_preset(), test::on_cpu(threads));
    aligner.set_target(target);
    return aligner.align_batch(source, guesses);
  };
  const std::vector<AlignResult> one = run(1);
  const std::vector<AlignResult> several = run(4);
  REQUIRE(one.size() == guesses.size());
  for (std::size_t k = 0; k < guesses.size(); ++k) {
    CAPTURE(k);
    test::check_same_bits(several[k], one[k]);
    CHECK(std::memcmp(several[k].localizability.eigenvalues.data(), one[k].localizability.eigenvalues.data(),
                      sizeof(double) * 6) == 0);
    CHECK(several[k].localizability.degenerate == one[k].localizability.degenerate);
  }
  ResetSpawnHook reset;
  Aligner aligner(autoware_preset(), test::on_cpu(4));  // its backend's pool starts here
  aligner.set_target(target);
  g_fail_at = 1;
  detail::thread_pool_spawn_hook = fail_one_spawn;  // the results' pool, made on first use, cannot start
  const std::vector<AlignResult> fallback = aligner.align_batch(source, guesses);
  detail::thread_pool_spawn_hook = nullptr;
  for (std::size_t k = 0; k < guesses.size(); ++k) {
    CAPTURE(k);
    test::check_same_bits(fallback[k], one[k]);
  }
}
