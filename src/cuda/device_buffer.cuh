#pragma once
// DeviceBuffer<T>: the one owner of device memory in ndtcu. Move-only; the destructor
// frees without throwing. Every allocation is counted, which is how tests prove that a
// loop allocates nothing.
#include "cuda_check.cuh"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace ndtcu::detail {

/// Number of device allocations made by DeviceBuffer since the program started.
std::uint64_t device_allocation_count() noexcept;
/// Records one device allocation (called by DeviceBuffer only).
void count_device_allocation() noexcept;

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) { resize_discard(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)),
                                            capacity_(std::exchange(o.capacity_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }

  /// Sets the size to `n` elements; reallocates (contents lost) only when `n` exceeds the
  /// capacity, so buffers sized once never allocate again (grow-only).
  void resize_discard(std::size_t n) {
    if (n > capacity_) {
      // The new buffer first, the old one freed only once it exists: a growth that fails
      // leaves the buffer (its address, capacity and contents) as it was, so nothing that
      // points into it dangles.
      void* p = nullptr;
      cudaError_t err = cudaMalloc(&p, n * sizeof(T));
      if (err != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky-free error state for the next call
        std::size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        throw CudaError("cudaMalloc of " + std::to_string(n * sizeof(T)) + " bytes failed: " + cudaGetErrorName(err) +
                        " (" + std::to_string(free_b) + " of " + std::to_string(total_b) + " bytes free)");
      }
      count_device_allocation();
      release();
      ptr_ = static_cast<T*>(p);
      capacity_ = n;
    }
    size_ = n;
  }

  /// Sets the size to `n` like resize_discard, but a growth allocates 1.5 * n: sizes that
  /// creep up (scan after scan of a sequence) then reallocate, which synchronizes the whole
  /// device, only now and then instead of at every new maximum.
  void resize_with_headroom(std::size_t n) {
    if (n > capacity_) resize_discard(n + n / 2);
    size_ = n;
  }

  /// Copies `n` host elements in, growing when needed, on `stream`.
  void upload(const T* host, std::size_t n, cudaStream_t stream = nullptr) {
    resize_discard(n);
    if (n) NDTCU_CUDA_CHECK(cudaMemcpyAsync(ptr_, host, n * sizeof(T), cudaMemcpyHostToDevice, stream));
  }

  /// Copies the first `n` elements out, on `stream` (the caller synchronizes).
  void download(T* host, std::size_t n, cudaStream_t stream = nullptr) const {
    if (n > size_) throw CudaError("DeviceBuffer::download of " + std::to_string(n) + " elements from " +
                                   std::to_string(size_));
    if (n) NDTCU_CUDA_CHECK(cudaMemcpyAsync(host, ptr_, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  }

  T* data() noexcept { return ptr_; }
  const T* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  void release() noexcept {
    if (ptr_) cudaFree(ptr_);  // never throws: errors here would only mask the first one
    ptr_ = nullptr;
    size_ = capacity_ = 0;
  }

  T* ptr_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

/// Grow-only page-locked host memory (cudaMallocHost), the staging of asynchronous copies.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  /// At least `n` elements; reallocates (contents lost) only when `n` exceeds the capacity.
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    capacity_ = 0;
    void* p = nullptr;
    NDTCU_CUDA_CHECK(cudaMallocHost(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    capacity_ = n;
  }
  /// reserve(), growing to 1.5 * n when it must grow (see DeviceBuffer::resize_with_headroom).
  void reserve_with_headroom(std::size_t n) {
    if (n > capacity_) reserve(n + n / 2);
  }
  T* data() noexcept { return ptr_; }

 private:
  T* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace ndtcu::detail
