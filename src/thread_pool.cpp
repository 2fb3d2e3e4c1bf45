#include "thread_pool.hpp"

#include <ndtcu/error.hpp>

#include <algorithm>
#include <exception>
#include <string>

namespace ndtcu::detail {

int resolve_thread_count(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

void (*thread_pool_spawn_hook)(int index) = nullptr;

ThreadPool::ThreadPool(int threads) {
  const int n = resolve_thread_count(threads);
  try {
    workers_.reserve(static_cast<std::size_t>(n - 1));
    for (int i = 1; i < n; ++i) {
      if (thread_pool_spawn_hook) thread_pool_spawn_hook(i);
      workers_.emplace_back([this] { worker_loop(); });
    }
  } catch (const std::exception& e) {
    // A throwing constructor runs no destructor: the workers already started would wait
    // on wake_ after it is gone (and a joinable std::thread's destructor terminates), so
    // they are stopped and joined here.
    const std::size_t started = workers_.size();
    stop_and_join();
    throw Error(std::to_string(n) + " threads requested (the caller included), but worker thread " +
                std::to_string(started + 1) + " could not be started after " + std::to_string(started) +
                " (stopped again): " + e.what() + "; ask for fewer threads");
  }
}

ThreadPool::~ThreadPool() { stop_and_join(); }

void ThreadPool::stop_and_join() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

// Takes tasks until none is left; called by workers and by the thread in parallel_for.
void ThreadPool::drain() {
  for (;;) {
    std::size_t i;
    const std::function<void(std::size_t)>* task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (task_ == nullptr || next_ >= count_) return;
      i = next_++;
      task = task_;
    }
    try {
      (*task)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (++finished_ == count_) done_.notify_all();
    }
  }
}

void ThreadPool::worker_loop() {
  std::size_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    drain();
  }
}

void ThreadPool::parallel_for(std::size_t count, const std::function<void(std::size_t)>& task) {
  if (count == 0) return;
  if (workers_.empty() || count == 1) {
    for (std::size_t i = 0; i < count; ++i) task(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    count_ = count;
    next_ = 0;
    finished_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  // Only as many workers as there are tasks beyond the caller's: waking all of 16 for a
  // small scan's 2 chunks cost more than the chunks did.
  const std::size_t helpers = std::min(count - 1, workers_.size());
  if (helpers == workers_.size()) {
    wake_.notify_all();
  } else {
    for (std::size_t i = 0; i < helpers; ++i) wake_.notify_one();
  }
  drain();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return finished_ == count_; });
    task_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ndtcu::detail
