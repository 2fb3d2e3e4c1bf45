// First GPU test: the device is visible, and a kernel's output matches the CPU.
#include "../support/test_support.hpp"

#include "cuda/transform_points.hpp"

#include <ndtcu/cuda_device.hpp>

#include <Eigen/Geometry>

#include <random>

using namespace ndtcu;

TEST_CASE("CUDA device answers and a kernel transforms points as the CPU does", "[gpu]") {
  if (!cuda_compiled()) NDTCU_SKIP("built without CUDA");
  auto devices = cuda_devices();
  if (devices.empty()) NDTCU_SKIP("no CUDA device: " + cuda_unavailable_reason());
  const auto& d = devices.front();
  INFO("device 0: " << d.name << " sm_" << d.compute_major << d.compute_minor << ", " << d.multiprocessors
                    << " SMs, " << d.total_memory_bytes / (1 << 20) << " MiB");
  CHECK(d.compute_major >= 3);
  CHECK(d.multiprocessors > 0);
  CHECK(d.total_memory_bytes > 0);
  CHECK(d.free_memory_bytes <= d.total_memory_bytes);

  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-100.f, 100.f);
  std::vector<Eigen::Vector3f> pts(100003);  // not a multiple of the block size
  for (auto& p : pts) p = {u(rng), u(rng), u(rng)};
  Eigen::Affine3f T = Eigen::Translation3f(1.5f, -2.f, 0.25f) * Eigen::AngleAxisf(0.3f, Eigen::Vector3f(1, 2, 3).normalized());
  auto out = detail::cuda_transform_points(pts, T.matrix());
  REQUIRE(out.size() == pts.size());
  double worst = 0;
  for (std::size_t i = 0; i < pts.size(); ++i) worst = std::max(worst, double((out[i] - T * pts[i]).norm()));
  // Both sides compute the same float expression; FMA contraction on the device can
  // differ by a few ulps of |p| ~ 170 m (1 ulp ~ 1.5e-5 m).
  CHECK(worst < 1e-4);
  WARN("GPU smoke: " << d.name << ", 100003 points transformed, max |gpu - cpu| = " << worst << " m");
}
