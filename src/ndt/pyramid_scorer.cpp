// The host scorer of the global search's nodes (pyramid_scorer.hpp).
#include "pyramid_scorer.hpp"

#include "../thread_pool.hpp"

#include <algorithm>

namespace ndtcu::detail {

namespace {

class CpuPyramidScorer final : public PyramidScorer {
 public:
  CpuPyramidScorer(const ScorePyramid& pyramid, ThreadPool* pool) : view_(pyramid.view()), pool_(pool) {}

  void set_points(const std::vector<std::int32_t>& offsets, int points, int yaws) override {
    offsets_ = offsets;
    points_ = points;
    (void)yaws;
  }

  void score(const std::vector<math::SearchNode>& nodes, std::vector<std::uint32_t>& bounds) override {
    bounds.resize(nodes.size());
    // Runs of nodes per task: a node costs a few hundred lookups, a hand-off more.
    constexpr std::size_t kRun = 64;
    const auto run = [&](std::size_t r) {
      const std::size_t end = std::min(nodes.size(), (r + 1) * kRun);
      for (std::size_t n = r * kRun; n < end; ++n) {
        const std::int32_t* o = offsets_.data() + static_cast<std::size_t>(nodes[n].yaw) * 3 * static_cast<std::size_t>(points_);
        bounds[n] = math::node_bound(view_, o, 0, points_, 1, nodes[n]);
      }
    };
    const std::size_t runs = (nodes.size() + kRun - 1) / kRun;
    if (pool_ && runs > 1) {
      pool_->parallel_for(runs, run);
    } else {
      for (std::size_t r = 0; r < runs; ++r) run(r);
    }
  }

 private:
  math::PyramidView view_;
  ThreadPool* pool_;
  std::vector<std::int32_t> offsets_;
  int points_ = 0;
};

}  // namespace

std::unique_ptr<PyramidScorer> make_cpu_pyramid_scorer(const ScorePyramid& pyramid, ThreadPool* pool) {
  return std::make_unique<CpuPyramidScorer>(pyramid, pool);
}

}  // namespace ndtcu::detail
