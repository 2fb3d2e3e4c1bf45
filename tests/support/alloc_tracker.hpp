#pragma once
// The test executable replaces global operator new to record the largest single
// allocation, so tests can prove a parser allocates no more than a file justifies, and to
// count allocations and fail a chosen one, so tests can prove that running out of memory
// at any allocation of a call is an exception and leaves nothing broken or leaked.
//
// Counting is global, not per thread: one atomic counter over every thread's operator
// new, so a call's allocations in its worker threads are counted (and can be failed) as
// well as those of the thread that made it. With workers, which allocation is the Nth
// varies from run to run; with one thread it is the same every run.
#include <cstddef>
#include <cstdint>

namespace ndtcu::test {

/// Resets the largest-allocation record.
void reset_largest_allocation();
/// The largest single allocation (bytes) since the last reset.
std::size_t largest_allocation();

/// Counts of the test executable's allocations. `allocations` and `failures` count calls
/// of operator new (every form); `live_blocks` and `live_bytes` are blocks allocated and
/// not yet freed, and their bytes as the allocator measures them (malloc_usable_size,
/// which is at least the size asked for). Under AddressSanitizer or ThreadSanitizer the
/// live counts come from the sanitizer's allocation hooks and so also cover malloc; either
/// way a call that frees all it allocates leaves them as they were.
struct AllocationCounts {
  std::uint64_t allocations = 0;  ///< operator new calls, the failed ones included
  std::uint64_t failures = 0;     ///< of those, the ones made to fail
  std::int64_t live_blocks = 0;   ///< blocks allocated minus blocks freed
  std::int64_t live_bytes = 0;    ///< their bytes
};

/// Counts since the program started.
AllocationCounts allocation_counts();
/// Counts since the last arm_allocation_failure (the live ones as the change since then).
AllocationCounts allocation_counts_since_armed();

/// Counts operator new calls from now, and fails the `nth` of them (1-based; 0 fails
/// none and only counts): the throwing forms throw std::bad_alloc, the nothrow forms
/// return nullptr. Only that one fails, or, with `and_after`, every one from it on (memory
/// that stays exhausted). Call it while no other thread of the test is allocating.
void arm_allocation_failure(std::uint64_t nth, bool and_after = false);
/// Stops failing allocations (the counts go on).
void disarm_allocation_failure();

/// Arms on construction, disarms on destruction (so a failing REQUIRE does not leave the
/// rest of the test run failing allocations).
class ScopedAllocationFailure {
 public:
  /// arm_allocation_failure(nth, and_after).
  explicit ScopedAllocationFailure(std::uint64_t nth, bool and_after = false) {
    arm_allocation_failure(nth, and_after);
  }
  ~ScopedAllocationFailure() { disarm_allocation_failure(); }
  ScopedAllocationFailure(const ScopedAllocationFailure&) = delete;
  ScopedAllocationFailure& operator=(const ScopedAllocationFailure&) = delete;
};

}  // namespace ndtcu::test
