#include "alloc_tracker.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

// Under AddressSanitizer or ThreadSanitizer the record comes from the sanitizer's
// allocation hook, and operator new and delete are left to the sanitizer: its own are what
// find a block freed with the wrong form (new[] with delete, malloc with delete) or with a
// wrong size, and the replacements below, all going to malloc and free, would hide exactly
// that. The hook sees every allocation the sanitizer's allocator makes (malloc as well as
// operator new), which the tests' bounds allow: they bound the largest block, and a
// malloc'ed block counts against a parser as much as a new'ed one.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NDTCU_TEST_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NDTCU_TEST_SANITIZER_ALLOCATOR 1
#endif
#endif

#ifdef NDTCU_TEST_SANITIZER_ALLOCATOR
// sanitizer/allocator_interface.h, which GCC does not install; the runtimes of GCC and
// Clang both define it.
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, std::size_t),
                                                         void (*free_hook)(const volatile void*));
#endif

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
}  // namespace

namespace ndtcu::test {
void reset_largest_allocation() { g_largest.store(0); }
std::size_t largest_allocation() { return g_largest.load(); }
}  // namespace ndtcu::test

#ifdef NDTCU_TEST_SANITIZER_ALLOCATOR

namespace {
void on_malloc(const volatile void*, std::size_t n) { record(n); }
void on_free(const volatile void*) {}
// Installed before main(); allocations made earlier are no test's.
[[maybe_unused]] const int g_hooks_installed = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}  // namespace

#else

namespace {
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

#endif  // NDTCU_TEST_SANITIZER_ALLOCATOR
