#include "alloc_tracker.hpp"

#include <atomic>
#include <cstdio>
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
#include <dlfcn.h>

#include <cstring>
#include <type_traits>
// sanitizer/allocator_interface.h, which GCC does not install; the runtimes of GCC and
// Clang both define them.
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, std::size_t),
                                                         void (*free_hook)(const volatile void*));
extern "C" std::size_t __sanitizer_get_allocated_size(const volatile void* p);
#else
#include <malloc.h>  // malloc_usable_size
#endif

// Every replaceable form of operator new and delete is replaced, not only the plain ones:
// a form left out keeps the runtime's (or a sanitizer's) allocator, and memory it hands out
// would then be freed here with another one (std::stable_sort's temporary buffer comes
// from the nothrow form: AddressSanitizer reports that as alloc-dealloc-mismatch), and
// over-aligned allocations would escape the record.

namespace {
std::atomic<std::size_t> g_largest{0};

// The counts, over all threads. Sequentially consistent: the cost is that of any atomic
// increment, and a test then reads counts that every thread it has joined contributed to.
std::atomic<std::uint64_t> g_allocations{0};
std::atomic<std::uint64_t> g_failures{0};
std::atomic<std::int64_t> g_live_blocks{0};
std::atomic<std::int64_t> g_live_bytes{0};
// The value of g_allocations whose allocation fails (0: none), and whether every later one
// fails too.
std::atomic<std::uint64_t> g_fail_at{0};
std::atomic<bool> g_fail_after{false};
// The counts when the tracker was last armed; written and read by the test's own thread.
ndtcu::test::AllocationCounts g_armed_at;

void record(std::size_t n) {
  std::size_t seen = g_largest.load(std::memory_order_relaxed);
  while (n > seen && !g_largest.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
}

// Counts one operator new call; true when it is the one (or one of those) to fail.
bool count_and_fail() noexcept {
  const std::uint64_t k = g_allocations.fetch_add(1) + 1;
  const std::uint64_t at = g_fail_at.load();
  if (at == 0 || k < at || (k > at && !g_fail_after.load())) return false;
  g_failures.fetch_add(1);
  return true;
}

void add_live(std::int64_t blocks, std::int64_t bytes) noexcept {
  g_live_blocks.fetch_add(blocks);
  g_live_bytes.fetch_add(bytes);
}
}  // namespace

namespace ndtcu::test {
void reset_largest_allocation() { g_largest.store(0); }
std::size_t largest_allocation() { return g_largest.load(); }

AllocationCounts allocation_counts() {
  AllocationCounts c;
  c.allocations = g_allocations.load();
  c.failures = g_failures.load();
  c.live_blocks = g_live_blocks.load();
  c.live_bytes = g_live_bytes.load();
  return c;
}

AllocationCounts allocation_counts_since_armed() {
  const AllocationCounts now = allocation_counts();
  AllocationCounts c;
  c.allocations = now.allocations - g_armed_at.allocations;
  c.failures = now.failures - g_armed_at.failures;
  c.live_blocks = now.live_blocks - g_armed_at.live_blocks;
  c.live_bytes = now.live_bytes - g_armed_at.live_bytes;
  return c;
}

void arm_allocation_failure(std::uint64_t nth, bool and_after) {
  g_fail_at.store(0);  // nothing fails while the target is moved
  g_armed_at = allocation_counts();
  g_fail_after.store(and_after);
  if (nth != 0) g_fail_at.store(g_armed_at.allocations + nth);
}

void disarm_allocation_failure() { g_fail_at.store(0); }
}  // namespace ndtcu::test

#ifdef NDTCU_TEST_SANITIZER_ALLOCATOR

namespace {
void on_malloc(const volatile void*, std::size_t n) {
  record(n);
  add_live(1, static_cast<std::int64_t>(n));
}
// Called before the block is released, so its size can still be asked for (the size asked
// for at allocation, which is what on_malloc added).
void on_free(const volatile void* p) { add_live(-1, -static_cast<std::int64_t>(__sanitizer_get_allocated_size(p))); }
// Installed before main(); allocations made earlier are no test's.
[[maybe_unused]] const int g_hooks_installed = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);

// The sanitizer's own operator new, found past this executable (RTLD_NEXT: the sanitizer's
// runtime is the first shared library, as it must be). Only the new forms are wrapped, to
// fail an allocation; every delete stays the sanitizer's, which frees what its new made and
// checks the form and size as before. This needs the runtime as a shared library (GCC's
// default; Clang links it statically unless told -shared-libsan). The names are the
// Itanium ABI's for a std::size_t that is unsigned long.
static_assert(std::is_same<std::size_t, unsigned long>::value, "the mangled names below take size_t as 'm'");

template <class Fn>
Fn sanitizer_new(std::atomic<void*>& cache, const char* mangled) {
  void* f = cache.load();
  if (f == nullptr) {
    f = dlsym(RTLD_NEXT, mangled);  // calls malloc at most, never operator new
    if (f == nullptr) {
      std::fprintf(stderr, "alloc_tracker: %s not found past the executable (sanitizer runtime not shared?)\n",
                   mangled);
      std::abort();
    }
    cache.store(f);
  }
  Fn fn;
  static_assert(sizeof(fn) == sizeof(f), "function and object pointers differ in size");
  std::memcpy(&fn, &f, sizeof(fn));
  return fn;
}

using NewFn = void* (*)(std::size_t);
using NewNothrowFn = void* (*)(std::size_t, const std::nothrow_t&) noexcept;
using NewAlignedFn = void* (*)(std::size_t, std::align_val_t);
using NewAlignedNothrowFn = void* (*)(std::size_t, std::align_val_t, const std::nothrow_t&) noexcept;
std::atomic<void*> g_new[8];
}  // namespace

void* operator new(std::size_t n) {
  if (count_and_fail()) throw std::bad_alloc();
  return sanitizer_new<NewFn>(g_new[0], "_Znwm")(n);
}
void* operator new[](std::size_t n) {
  if (count_and_fail()) throw std::bad_alloc();
  return sanitizer_new<NewFn>(g_new[1], "_Znam")(n);
}
void* operator new(std::size_t n, const std::nothrow_t& t) noexcept {
  if (count_and_fail()) return nullptr;
  return sanitizer_new<NewNothrowFn>(g_new[2], "_ZnwmRKSt9nothrow_t")(n, t);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  if (count_and_fail()) return nullptr;
  return sanitizer_new<NewNothrowFn>(g_new[3], "_ZnamRKSt9nothrow_t")(n, t);
}
void* operator new(std::size_t n, std::align_val_t a) {
  if (count_and_fail()) throw std::bad_alloc();
  return sanitizer_new<NewAlignedFn>(g_new[4], "_ZnwmSt11align_val_t")(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  if (count_and_fail()) throw std::bad_alloc();
  return sanitizer_new<NewAlignedFn>(g_new[5], "_ZnamSt11align_val_t")(n, a);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  if (count_and_fail()) return nullptr;
  return sanitizer_new<NewAlignedNothrowFn>(g_new[6], "_ZnwmSt11align_val_tRKSt9nothrow_t")(n, a, t);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  if (count_and_fail()) return nullptr;
  return sanitizer_new<NewAlignedNothrowFn>(g_new[7], "_ZnamSt11align_val_tRKSt9nothrow_t")(n, a, t);
}

#else

namespace {
void* try_alloc(std::size_t n) noexcept {
  record(n);
  if (count_and_fail()) return nullptr;
  void* p = std::malloc(n ? n : 1);
  if (p) add_live(1, static_cast<std::int64_t>(malloc_usable_size(p)));
  return p;
}

void* try_alloc_aligned(std::size_t n, std::align_val_t alignment) noexcept {
  record(n);
  if (count_and_fail()) return nullptr;
  // posix_memalign needs a power of two that is a multiple of sizeof(void*); an alignment
  // given to operator new is a power of two, and a smaller one is met by the larger.
  std::size_t a = static_cast<std::size_t>(alignment);
  if (a < sizeof(void*)) a = sizeof(void*);
  void* p = nullptr;
  if (posix_memalign(&p, a, n ? n : 1) != 0) return nullptr;
  add_live(1, static_cast<std::int64_t>(malloc_usable_size(p)));
  return p;
}

void* alloc(std::size_t n) {
  if (void* p = try_alloc(n)) return p;
  throw std::bad_alloc();
}

void* alloc_aligned(std::size_t n, std::align_val_t alignment) {
  if (void* p = try_alloc_aligned(n, alignment)) return p;
  throw std::bad_alloc();
}

// malloc and posix_memalign memory alike is released by free, and measured by
// malloc_usable_size as when it was counted.
void release(void* p) noexcept {
  if (p == nullptr) return;
  add_live(-1, -static_cast<std::int64_t>(malloc_usable_size(p)));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t n) { return alloc(n); }
void* operator new[](std::size_t n) { return alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return try_alloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return try_alloc(n); }
void* operator new(std::size_t n, std::align_val_t a) { return alloc_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return alloc_aligned(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return try_alloc_aligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return try_alloc_aligned(n, a);
}

void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }

#endif  // NDTCU_TEST_SANITIZER_ALLOCATOR
