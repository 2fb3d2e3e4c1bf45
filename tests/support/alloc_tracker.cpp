#include "alloc_tracker.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

// Every replaceable form of operator new and delete is replaced, not only the plain ones:
// a form left out keeps the runtime's (or a sanitizer's) allocator, and memory it hands out
// would then be freed here with another one (std::stable_sort's temporary buffer comes
// from the nothrow form: AddressSanitizer reports that as alloc-dealloc-mismatch), and
// over-aligned allocations would escape the record.

namespace {
std::atomic<std::size_t> g_largest{0};

void record(std::size_t n) {
  std::size_t seen = g_largest.load(std::memory_order_relaxed);
  while (n > seen && !g_largest.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
}

void* try_alloc(std::size_t n) noexcept {
  record(n);
  return std::malloc(n ? n : 1);
}

void* try_alloc_aligned(std::size_t n, std::align_val_t alignment) noexcept {
  record(n);
  // posix_memalign needs a power of two that is a multiple of sizeof(void*); an alignment
  // given to operator new is a power of two, and a smaller one is met by the larger.
  std::size_t a = static_cast<std::size_t>(alignment);
  if (a < sizeof(void*)) a = sizeof(void*);
  void* p = nullptr;
  return posix_memalign(&p, a, n ? n : 1) == 0 ? p : nullptr;
}

void* alloc(std::size_t n) {
  if (void* p = try_alloc(n)) return p;
  throw std::bad_alloc();
}

void* alloc_aligned(std::size_t n, std::align_val_t alignment) {
  if (void* p = try_alloc_aligned(n, alignment)) return p;
  throw std::bad_alloc();
}
}  // namespace

namespace ndtcu::test {
void reset_largest_allocation() { g_largest.store(0); }
std::size_t largest_allocation() { return g_largest.load(); }
}  // namespace ndtcu::test

void* operator new(std::size_t n) { return alloc(n); }
void* operator new[](std::size_t n) { return alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return try_alloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return try_alloc(n); }
void* operator new(std::size_t n, std::align_val_t a) { return alloc_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return alloc_aligned(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return try_alloc_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return try_alloc_aligned(n, a);
}

// malloc and posix_memalign memory alike is released by free.
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
