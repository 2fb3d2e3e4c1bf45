// The test executable's allocation record (alloc_tracker.cpp) and comparison helpers:
// every form of operator new goes through the record and back through the matching
// delete; the tracker counts allocations in every thread and fails the one it is armed
// for; the helpers take empty clouds.
#include "alloc_tracker.hpp"
#include "test_support.hpp"
#include "voxel_reference.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace {
struct alignas(256) OverAligned {
  unsigned char bytes[1 << 20];
};
}  // namespace

TEST_CASE("the allocation record sees the nothrow and the aligned forms of operator new", "[unit][support]") {
  using ndtcu::test::largest_allocation;
  using ndtcu::test::reset_largest_allocation;
  constexpr std::size_t kBig = std::size_t{3} << 20;

  reset_largest_allocation();
  {
    std::unique_ptr<char[]> p(new (std::nothrow) char[kBig]);
    REQUIRE(p);
  }
  CHECK(largest_allocation() >= kBig);

  reset_largest_allocation();
  {
    auto p = std::make_unique<OverAligned>();  // operator new(size, align_val_t)
    CHECK(reinterpret_cast<std::uintptr_t>(p.get()) % 256 == 0);
  }
  CHECK(largest_allocation() >= sizeof(OverAligned));

  reset_largest_allocation();
  void* raw = ::operator new(kBig, std::align_val_t{64}, std::nothrow);
  REQUIRE(raw != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(raw) % 64 == 0);
  ::operator delete(raw, std::align_val_t{64}, std::nothrow);
  CHECK(largest_allocation() >= kBig);

  // std::stable_sort's temporary buffer (the nothrow form), freed by the library.
  reset_largest_allocation();
  std::vector<std::uint32_t> v(1 << 20);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint32_t>((i * 2654435761u) >> 7);
  std::stable_sort(v.begin(), v.end());
  CHECK(std::is_sorted(v.begin(), v.end()));
  CHECK(largest_allocation() >= v.size() * sizeof(std::uint32_t) / 2);
}

namespace {
// Explicit calls of operator new and delete: the compiler may leave out a new-expression
// whose block is never used, and its allocation with it.
void* allocate(std::size_t n) { return ::operator new(n); }
void release(void* p) { ::operator delete(p); }
}  // namespace

TEST_CASE("the allocation tracker counts allocations and live blocks, and fails the one it is armed for",
          "[unit][support]") {
  using namespace ndtcu::test;
  // Counting only: three allocations, one of them freed again. The counts are read before
  // any assertion, which could allocate.
  AllocationCounts counted;
  {
    ScopedAllocationFailure count_only(0);
    void* a = allocate(sizeof(int));
    void* b = ::operator new[](10 * sizeof(int));
    void* c = ::operator new(100, std::nothrow);
    ::operator delete(c, std::nothrow);
    counted = allocation_counts_since_armed();
    release(a);
    ::operator delete[](b);
  }
  CHECK(counted.allocations == 3);
  CHECK(counted.failures == 0);
  CHECK(counted.live_blocks == 2);
  CHECK(counted.live_bytes >= static_cast<std::int64_t>(11 * sizeof(int)));

  // The second allocation fails, and only it: the throwing form throws std::bad_alloc.
  void* first = nullptr;
  void* third = nullptr;
  bool second_threw = false;
  AllocationCounts once;
  {
    ScopedAllocationFailure fail(2);
    first = allocate(8);
    try {
      release(allocate(8));
    } catch (const std::bad_alloc&) {
      second_threw = true;
    }
    third = allocate(8);
    once = allocation_counts_since_armed();
  }
  CHECK(first != nullptr);
  CHECK(second_threw);
  CHECK(third != nullptr);
  CHECK(once.allocations == 3);
  CHECK(once.failures == 1);
  CHECK(once.live_blocks == 2);
  release(first);
  release(third);

  // The nothrow forms return null instead, aligned or not; with `and_after` every
  // allocation from the first fails.
  void* plain = nullptr;
  void* aligned = nullptr;
  bool array_threw = false;
  AllocationCounts sticky;
  {
    ScopedAllocationFailure fail(1, true);
    plain = ::operator new(64, std::nothrow);
    aligned = ::operator new(64, std::align_val_t{128}, std::nothrow);
    try {
      ::operator delete[](::operator new[](sizeof(OverAligned), std::align_val_t{alignof(OverAligned)}),
                          std::align_val_t{alignof(OverAligned)});
    } catch (const std::bad_alloc&) {
      array_threw = true;
    }
    sticky = allocation_counts_since_armed();
  }
  CHECK(plain == nullptr);
  CHECK(aligned == nullptr);
  CHECK(array_threw);
  CHECK(sticky.allocations == 3);
  CHECK(sticky.failures == 3);
  CHECK(sticky.live_blocks == 0);

  // Disarmed, allocations succeed again.
  void* again = allocate(8);
  CHECK(again != nullptr);
  release(again);
}

TEST_CASE("the allocation tracker counts and fails the allocations of other threads", "[unit][support]") {
  using namespace ndtcu::test;
  constexpr int kThreads = 4, kEach = 1000;
  // Every thread's allocation counts, and a failure armed for the 2000th from now reaches
  // whichever thread makes it; with `and_after`, every later one fails too. The threads
  // are started, and running, before arming, so that only their own allocations are
  // counted: the start of a thread also mallocs and frees blocks, which the sanitizers'
  // hooks see (under load, a thread not yet running when armed freed one inside).
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::vector<int> failed(kThreads, 0);
  std::atomic<int> running{0};
  std::atomic<bool> go{false};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&failed, &running, &go, t] {
      ++running;
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kEach; ++i) {
        try {
          release(allocate(sizeof(double)));
        } catch (const std::bad_alloc&) {
          ++failed[static_cast<std::size_t>(t)];
        }
      }
    });
  }
  while (running.load() < kThreads) std::this_thread::yield();
  AllocationCounts counts;
  {
    ScopedAllocationFailure fail(2000, true);
    go = true;
    for (auto& t : threads) t.join();
    counts = allocation_counts_since_armed();
  }
  int total_failed = 0;
  for (int f : failed) total_failed += f;
  CHECK(counts.allocations == kThreads * kEach);
  CHECK(counts.failures == counts.allocations - 1999);
  CHECK(static_cast<std::uint64_t>(total_failed) == counts.failures);
  // Each thread's std::thread state, made before arming, was freed when it ended.
  CHECK(counts.live_blocks == -kThreads);
}

TEST_CASE("bit_identical compares empty clouds without touching null pointers", "[unit][support]") {
  ndtcu::PointCloud a, b;
  CHECK(ndtcu::test::bit_identical(a, b));
  b.points.emplace_back(1.f, 2.f, 3.f);
  CHECK_FALSE(ndtcu::test::bit_identical(a, b));
}
