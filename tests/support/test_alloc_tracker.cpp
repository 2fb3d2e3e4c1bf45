// The test executable's allocation record (alloc_tracker.cpp) and comparison helpers:
// every form of operator new goes through the record and back through the matching
// delete, and the helpers take empty clouds.
#include "alloc_tracker.hpp"
#include "test_support.hpp"
#include "voxel_reference.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
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

TEST_CASE("bit_identical compares empty clouds without touching null pointers", "[unit][support]") {
  ndtcu::PointCloud a, b;
  CHECK(ndtcu::test::bit_identical(a, b));
  b.points.emplace_back(1.f, 2.f, 3.f);
  CHECK_FALSE(ndtcu::test::bit_identical(a, b));
}
