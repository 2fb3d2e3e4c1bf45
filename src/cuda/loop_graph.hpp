#pragma once
// The device loop's CUDA graphs (host-compiler header; loop_graph.cu builds them): one
// graph per grid shape, whose conditional while node repeats the loop's body (the
// derivative kernel, then the step kernel of kernels/ndt_loop_kernels.cuh) until no
// hypothesis runs, and a small cache of them, so that a localizer's single alignments and
// its six-hypothesis covariance batches do not rebuild each other's graph.
#include <cstddef>
#include <cstdint>
#include <vector>

struct CUstream_st;     // cudaStream_t without the CUDA headers
struct CUgraph_st;      // cudaGraph_t
struct CUgraphExec_st;  // cudaGraphExec_t

namespace ndtcu::detail {

struct BatchArgs;  // kernels/ndt_loop_kernels.cuh

/// A captured loop graph for a grid of `blocks` x `slots` and the buffers of `generation`.
struct LoopGraph {
  CUgraph_st* graph = nullptr;
  CUgraphExec_st* exec = nullptr;
  int blocks = 0, slots = 0;
  bool trace = false;
  std::uint64_t generation = 0;
  std::uint64_t last_used = 0;
};

/// The loop's grid for `k` hypotheses: k rounded up to a power of two (so batch sizes
/// nearby share a graph; slots past the running count exit at once).
int loop_slots(int k);

/// The loop graphs of one backend, by grid shape, at most kCapacity of them (the least
/// recently used is replaced).
class LoopGraphCache {
 public:
  static constexpr std::size_t kCapacity = 4;

  LoopGraphCache() = default;
  ~LoopGraphCache();
  LoopGraphCache(const LoopGraphCache&) = delete;
  LoopGraphCache& operator=(const LoopGraphCache&) = delete;

  /// The graph for `slots` running slots of sources of at most `needed` blocks (a graph of
  /// `blocks` >= needed, and at most twice it, is reused), with or without a trace, on the
  /// buffers of `generation` (the backend's count of buffer moves: a graph built on moved
  /// buffers is stale). Built on `args` when none fits; `built` says so.
  CUgraphExec_st* get(const BatchArgs& args, int slots, int needed, int blocks, bool trace, std::uint64_t generation,
                      bool& built);

 private:
  void build(LoopGraph& g, const BatchArgs& args, int slots, int blocks, bool trace, std::uint64_t generation);

  std::vector<LoopGraph> graphs_;
  std::uint64_t clock_ = 0;
  CUstream_st* capture_stream_ = nullptr;  // a private stream: the caller's may be the legacy default
};

}  // namespace ndtcu::detail
