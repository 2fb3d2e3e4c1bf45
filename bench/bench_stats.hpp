#pragma once
// What the search benchmarks share: seeded uniform draws that every standard library
// makes alike, and percentiles of timings.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace ndtcu::bench {

/// A uniform double in [0, 1) from the generator's top 53 bits: the same starts with every
/// standard library (the distributions of <random> are implementation-defined).
inline double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// The q-quantile of `v` (nearest rank); NaN for an empty list.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace ndtcu::bench
