#pragma once
// The test executable replaces global operator new to record the largest single
// allocation, so tests can prove a parser allocates no more than a file justifies.
#include <cstddef>

namespace ndtcu::test {

/// Resets the largest-allocation record.
void reset_largest_allocation();
/// The largest single allocation (bytes) since the last reset.
std::size_t largest_allocation();

}  // namespace ndtcu::test
