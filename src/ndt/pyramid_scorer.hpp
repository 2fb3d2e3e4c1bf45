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
};

/// Scores on the host, `pool` sharing out the nodes (null: the calling thread alone).
std::unique_ptr<PyramidScorer> make_cpu_pyramid_scorer(const ScorePyramid& pyramid, ThreadPool* pool);

/// Scores on CUDA device `device` (-1: current) on `stream` (null: the default stream),
/// the pyramid uploaded once here. Throws CudaError without CUDA (src/cuda/no_cuda.cpp).
std::unique_ptr<PyramidScorer> make_cuda_pyramid_scorer(const ScorePyramid& pyramid, CUstream_st* stream, int device);

}  // namespace ndtcu::detail
