#pragma once
// Where the global search's nodes are scored: the one dispatch point between the search
// (global_search.cpp) and a backend. Both scorers sum math::node_bound
// (kernels/pyramid_bound.hpp) and give the same integers.
#include "score_pyramid.hpp"

#include <cstdint>
#include <memory>
#include <vector>

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace ndtcu::detail {

class ThreadPool;

/// A node and its bound, as expand() and step() hand them over (20 bytes).
struct ScoredNode {
  math::SearchNode node;
  std::uint32_t bound = 0;
};

class PyramidScorer {
 public:
  virtual ~PyramidScorer() = default;
  /// The scan's points as the following calls score them: offsets[(yaw * points + p) * 3 +
  /// axis], the leaf-0 cell of point p under the yaw.
  virtual void set_points(const std::vector<std::int32_t>& offsets, int points, int yaws) = 0;
  /// bounds[n] = math::node_bound of nodes[n] over every point, at the node's yaw.
  virtual void score(const std::vector<math::SearchNode>& nodes, std::vector<std::uint32_t>& bounds) = 0;

  /// How many children an expand() scored, and how many of them were leaves.
  struct Expansion {
    std::size_t scored = 0, leaves = 0;
  };
  /// The branching step of the search, where the scorer stands: the children of each
  /// parent (math::child_node d = 0..7, those math::child_searched under `limits`) are
  /// scored, and those whose bound is at least `threshold` come back in `children` and
  /// `bounds`, in the order parent by parent, d by d. Only the survivors cross to the host:
  /// on a city map most children bound below the threshold, and handling each of them on the
  /// host had cost several times the GPU's scoring.
  virtual Expansion expand(const std::vector<math::SearchNode>& parents, const math::SearchLimits& limits,
                           std::uint32_t threshold, std::vector<math::SearchNode>& children,
                           std::vector<std::uint32_t>& bounds) = 0;

  /// The rest of the search, where the scorer stands: a stack of nodes to expand depth
  /// first and a store of deferred ones. `nodes` go onto the stack in their order (the last
  /// comes off first).
  virtual void push(const std::vector<ScoredNode>& nodes) = 0;
  /// `nodes` go into the store, after those already there.
  virtual void defer(const std::vector<ScoredNode>& nodes) = 0;
  /// Nodes on the stack, and in the store.
  virtual std::size_t stacked() const = 0;
  virtual std::size_t deferred() const = 0;
  /// Empties the stack and the store.
  virtual void clear_stack() = 0;
  /// One step down: the last min(max_parents, stacked()) nodes come off the stack; those
  /// whose own bound is below `threshold` (it rose since they were pushed) are dropped, the
  /// others expanded as expand() expands them at `threshold`. Of the surviving children that
  /// are not leaves, those of bound at least `floor` go onto the stack in ascending order of
  /// their bounds (among equal bounds in expand()'s order), so the next step takes the best
  /// of them first, and the others into the store in expand()'s order; the surviving leaves
  /// come back in `leaves` in expand()'s order. Only the leaves and the counts cross to the
  /// host: a city's search scores hundreds of millions of nodes, and a host queue of them had
  /// cost several times the scoring.
  virtual Expansion step(std::size_t max_parents, const math::SearchLimits& limits, std::uint32_t threshold,
                         std::uint32_t floor, std::vector<ScoredNode>& leaves) = 0;
  /// The store's nodes of bound at least `floor` go onto the stack (in ascending order of
  /// their bounds, among equal bounds in the store's order), those below `threshold` are
  /// dropped, the others stay in order.
  virtual void restock(std::uint32_t floor, std::uint32_t threshold) = 0;
};

/// Scores on the host, `pool` sharing out the nodes (null: the calling thread alone).
std::unique_ptr<PyramidScorer> make_cpu_pyramid_scorer(const ScorePyramid& pyramid, ThreadPool* pool);

/// Scores on CUDA device `device` (-1: current) on `stream` (null: the default stream),
/// the pyramid uploaded once here. Throws CudaError without CUDA (src/cuda/no_cuda.cpp).
std::unique_ptr<PyramidScorer> make_cuda_pyramid_scorer(const ScorePyramid& pyramid, CUstream_st* stream, int device);

}  // namespace ndtcu::detail
