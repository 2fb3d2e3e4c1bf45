#pragma once
// Random numbers with fixed, portable algorithms: the simulator's output must be the same
// bytes on every run and with any thread count, so nothing here comes from
// std::*_distribution (whose algorithms are implementation-defined).
#include <cmath>
#include <cstdint>

namespace ndtcu::sim::detail {

/// SplitMix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mixer whose
/// outputs pass BigCrush for consecutive inputs. The constants are SplitMix64's.
inline std::uint64_t mix64(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ull;  // 2^64 / golden ratio: the SplitMix64 increment
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Counter-based hash of (seed, stream, a, b): each argument goes through the mixer in
/// turn, so neighbouring counters give unrelated outputs. Used wherever a value must not
/// depend on evaluation order (per-ray noise, per-primitive sampling).
inline std::uint64_t hash4(std::uint64_t seed, std::uint64_t stream, std::uint64_t a, std::uint64_t b = 0) noexcept {
  return mix64(mix64(mix64(mix64(seed) ^ stream) ^ a) ^ b);
}

/// Top 53 bits as a double in [0, 1) (exactly representable, uniform).
inline double to_unit(std::uint64_t bits) noexcept { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

/// Standard normal from two uniform bit patterns (Box-Muller, cosine branch). The first
/// uniform is moved into (0, 1] so the logarithm is finite.
inline double normal_from_bits(std::uint64_t bits1, std::uint64_t bits2) noexcept {
  constexpr double kTwoPi = 6.283185307179586;
  const double u1 = 1.0 - to_unit(bits1);
  const double u2 = to_unit(bits2);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

/// A small sequential generator (SplitMix64) for the layout code, where choices follow
/// one another anyway. Cheap to create from a hash, so work split across threads gets
/// one per item.
class Rng {
 public:
  /// Starts the sequence at `seed`.
  explicit Rng(std::uint64_t seed) noexcept : state_(seed) {}
  /// Next 64 random bits.
  std::uint64_t next() noexcept {
    state_ += 0x9e3779b97f4a7c15ull;  // SplitMix64's increment; mix64 adds it once more
    return mix64(state_);
  }
  /// Uniform in [0, 1).
  double uniform() noexcept { return to_unit(next()); }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Standard normal.
  double normal() noexcept {
    const std::uint64_t a = next();
    return normal_from_bits(a, next());
  }
  /// Integer in [0, n) for n > 0 (multiply-shift; the bias is below 2^-32 for n < 2^32).
  std::uint32_t below(std::uint32_t n) noexcept {
    return static_cast<std::uint32_t>(((next() >> 32) * static_cast<std::uint64_t>(n)) >> 32);
  }
  /// Integer in [lo, hi] inclusive.
  int between(int lo, int hi) noexcept { return lo + static_cast<int>(below(static_cast<std::uint32_t>(hi - lo + 1))); }
  /// True with probability p.
  bool chance(double p) noexcept { return uniform() < p; }

 private:
  std::uint64_t state_;
};

/// Stream identifiers, so that different uses of one seed never share hash inputs.
enum Stream : std::uint64_t {
  kStreamLayout = 0x4c41594f5554ull,      // "LAYOUT"
  kStreamTerrain = 0x5445525241494eull,   // "TERRAIN"
  kStreamRoute = 0x524f555445ull,         // "ROUTE"
  kStreamMap = 0x4d4150ull,               // "MAP"
  kStreamMapPick = 0x5049434bull,         // "PICK"
  kStreamRayNoise = 0x4e4f495345ull,      // "NOISE"
  kStreamRayDrop = 0x44524f50ull,         // "DROP"
  kStreamKidnap = 0x4b49444e4150ull,      // "KIDNAP"
  kStreamRoughStart = 0x524f554748ull,    // "ROUGH"
  kStreamImu = 0x494d55ull,               // "IMU"
};

}  // namespace ndtcu::sim::detail
