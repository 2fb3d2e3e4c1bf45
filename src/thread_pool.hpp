#pragma once
// A small fixed pool of std::threads that runs "task i for i in [0, n)" and waits. Tasks
// are handed out dynamically, so which thread runs a task varies; callers that need
// reproducible bits write each task's result to its own slot and reduce in task order.
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ndtcu::detail {

class ThreadPool {
 public:
  /// `threads` workers in total, the calling thread included (so 1 runs everything inline);
  /// 0 means std::thread::hardware_concurrency(). When a thread cannot be started (the
  /// system's thread or memory limit), the ones already started are stopped and joined and
  /// ndtcu::Error says how many were requested and how many started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Number of threads that run tasks, the caller included.
  int size() const noexcept { return static_cast<int>(workers_.size()) + 1; }

  /// Runs task(i) for every i in [0, count) and returns when all are done. The first
  /// exception a task throws is rethrown here (the remaining tasks still run).
  void parallel_for(std::size_t count, const std::function<void(std::size_t)>& task);

 private:
  void worker_loop();
  void drain();
  void stop_and_join() noexcept;

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::size_t)>* task_ = nullptr;
  std::size_t count_ = 0;
  std::size_t next_ = 0;
  std::size_t finished_ = 0;
  std::size_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

/// Threads to use for a request of `requested` (0 = hardware concurrency, at least 1).
int resolve_thread_count(int requested);

/// Test seam: when set, ThreadPool's constructor calls it before starting worker `index`
/// (1-based, as the caller is thread 0); whatever it throws is handled as a failure of
/// std::thread's constructor. Null (the default) in every program but the tests.
extern void (*thread_pool_spawn_hook)(int index);

}  // namespace ndtcu::detail
