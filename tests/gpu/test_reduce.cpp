// The fixed-order reduction every Newton iteration relies on (reduce_partials, as the
// loop kernels call it): right sums and identical bits on every run.
#include "../support/test_support.hpp"

#include "reduce_probe.hpp"

#include <ndtcu/cuda_device.hpp>

#include <cmath>
#include <cstring>
#include <random>

TEST_CASE("fixed-order reduction of partials is exact to rounding and bit-identical over 100 runs", "[gpu]") {
  if (ndtcu::cuda_devices().empty()) NDTCU_SKIP("no CUDA device: " + ndtcu::cuda_unavailable_reason());
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int n : {1, 255, 256, 257, 5000, 100000}) {
    CAPTURE(n);
    std::vector<double> x(n);
    for (auto& v : x) v = u(rng);
    auto runs = ndtcu::test::reduce_on_gpu(x, 100);
    // Reference: the same double terms as the kernel (p *= x * 1.7, two plain products
    // the compiler cannot contract), summed in long double.
    std::vector<long double> ref(29, 0.0L), mag(29, 0.0L);
    for (double xi : x) {
      double p = xi;
      for (int k = 0; k < 29; ++k) {
        ref[k] += p;
        mag[k] += std::fabs(p);
        p *= xi * 1.7;
      }
    }
    for (int k = 0; k < 29; ++k) {
      // Any summation order is within n * eps * sum|terms| of the exact sum.
      CHECK(std::abs(static_cast<long double>(runs[0][k]) - ref[k]) <= n * 2.3e-16L * mag[k] + 1e-300L);
    }
    for (const auto& r : runs) CHECK(std::memcmp(r.data(), runs[0].data(), 29 * sizeof(double)) == 0);
  }
}
