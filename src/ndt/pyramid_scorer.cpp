// The host scorer of the global search's nodes (pyramid_scorer.hpp).
#include "pyramid_scorer.hpp"

#include "../thread_pool.hpp"

#include <algorithm>

namespace ndtcu::detail {

namespace {

class CpuPyramidScorer final : public PyramidScorer {
 public:
  CpuPyramidScorer(const ScorePyramid& pyramid, ThreadPool* pool)
      : view_(pyramid.view()), standing_(pyramid.standing_view()), pool_(pool) {}

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

  Expansion expand(const std::vector<math::SearchNode>& parents, const math::SearchLimits& limits,
                   std::uint32_t threshold, std::vector<math::SearchNode>& children,
                   std::vector<std::uint32_t>& bounds) override {
    // Runs of parents per task, each with its own survivors, joined in run order.
    constexpr std::size_t kRun = 16;
    const std::size_t runs = (parents.size() + kRun - 1) / kRun;
    parts_.resize(std::max(parts_.size(), runs));
    const auto run = [&](std::size_t r) {
      Part& part = parts_[r];
      part.nodes.clear();
      part.bounds.clear();
      part.count = {};
      const std::size_t end = std::min(parents.size(), (r + 1) * kRun);
      for (std::size_t n = r * kRun; n < end; ++n) {
        const std::int32_t* o =
            offsets_.data() + static_cast<std::size_t>(parents[n].yaw) * 3 * static_cast<std::size_t>(points_);
        for (int d = 0; d < 8; ++d) {
          const math::SearchNode c = math::child_node(parents[n], d);
          if (!math::child_searched(view_, standing_, limits, c)) continue;
          const std::uint32_t b = math::node_bound(view_, o, 0, points_, 1, c);
          ++part.count.scored;
          part.count.leaves += c.level == 0;
          if (b >= threshold) {
            part.nodes.push_back(c);
            part.bounds.push_back(b);
          }
        }
      }
    };
    if (pool_ && runs > 1) {
      pool_->parallel_for(runs, run);
    } else {
      for (std::size_t r = 0; r < runs; ++r) run(r);
    }
    children.clear();
    bounds.clear();
    Expansion total;
    for (std::size_t r = 0; r < runs; ++r) {
      const Part& part = parts_[r];
      children.insert(children.end(), part.nodes.begin(), part.nodes.end());
      bounds.insert(bounds.end(), part.bounds.begin(), part.bounds.end());
      total.scored += part.count.scored;
      total.leaves += part.count.leaves;
    }
    return total;
  }

  void push(const std::vector<ScoredNode>& nodes) override { stack_.insert(stack_.end(), nodes.begin(), nodes.end()); }
  void defer(const std::vector<ScoredNode>& nodes) override { store_.insert(store_.end(), nodes.begin(), nodes.end()); }
  std::size_t stacked() const override { return stack_.size(); }
  std::size_t deferred() const override { return store_.size(); }
  void clear_stack() override {
    stack_.clear();
    store_.clear();
  }

  Expansion step(std::size_t max_parents, const math::SearchLimits& limits, std::uint32_t threshold, std::uint32_t floor,
                 std::vector<ScoredNode>& leaves) override {
    const std::size_t count = std::min(max_parents, stack_.size());
    popped_.clear();
    for (std::size_t k = stack_.size() - count; k < stack_.size(); ++k) {
      if (stack_[k].bound >= threshold) popped_.push_back(stack_[k].node);
    }
    stack_.resize(stack_.size() - count);
    const Expansion grown = expand(popped_, limits, threshold, children_, bounds_);
    leaves.clear();
    const std::size_t first = stack_.size();
    for (std::size_t k = 0; k < children_.size(); ++k) {
      const ScoredNode n{children_[k], bounds_[k]};
      (n.node.level == 0 ? leaves : n.bound >= floor ? stack_ : store_).push_back(n);
    }
    sort_from(first);
    return grown;
  }

  void restock(std::uint32_t floor, std::uint32_t threshold) override {
    const std::size_t first = stack_.size();
    std::size_t kept = 0;
    for (const ScoredNode& n : store_) {
      if (n.bound >= floor) {
        stack_.push_back(n);
      } else if (n.bound >= threshold) {
        store_[kept++] = n;
      }
    }
    store_.resize(kept);
    sort_from(first);
  }

 private:
  struct Part {
    std::vector<math::SearchNode> nodes;
    std::vector<std::uint32_t> bounds;
    Expansion count;
  };
  math::PyramidView view_, standing_;
  ThreadPool* pool_;
  std::vector<Part> parts_;  // expand()'s survivors per run of parents, kept for their capacity
  // The stack's nodes from `first` on, in ascending order of their bounds (stable).
  void sort_from(std::size_t first) {
    std::stable_sort(stack_.begin() + static_cast<std::ptrdiff_t>(first), stack_.end(),
                     [](const ScoredNode& a, const ScoredNode& b) { return a.bound < b.bound; });
  }

  std::vector<ScoredNode> stack_, store_;  // step()'s nodes
  std::vector<math::SearchNode> popped_, children_;
  std::vector<std::uint32_t> bounds_;
  std::vector<std::int32_t> offsets_;
  int points_ = 0;
};

}  // namespace

std::unique_ptr<PyramidScorer> make_cpu_pyramid_scorer(const ScorePyramid& pyramid, ThreadPool* pool) {
  return std::make_unique<CpuPyramidScorer>(pyramid, pool);
}

}  // namespace ndtcu::detail
