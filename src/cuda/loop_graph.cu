#include "loop_graph.hpp"

#include "cuda_check.cuh"
#include "ndt_loop_kernels.cuh"

#include <algorithm>

namespace ndtcu::detail {
namespace {

void destroy(LoopGraph& g) noexcept {
  if (g.exec) cudaGraphExecDestroy(g.exec);
  if (g.graph) cudaGraphDestroy(g.graph);
  g.exec = nullptr;
  g.graph = nullptr;
}

}  // namespace

int loop_slots(int k) {
  int slots = 1;
  while (slots < k) slots *= 2;
  return slots;
}

LoopGraphCache::~LoopGraphCache() {
  for (LoopGraph& g : graphs_) destroy(g);
  if (capture_stream_) cudaStreamDestroy(capture_stream_);
}

CUgraphExec_st* LoopGraphCache::get(const BatchArgs& args, int slots, int needed, int blocks, bool trace,
                                    std::uint64_t generation, bool& built) {
  ++clock_;
  built = false;
  for (LoopGraph& g : graphs_) {
    if (g.exec && g.slots == slots && needed <= g.blocks && needed * 2 >= g.blocks && g.trace == trace &&
        g.generation == generation) {
      g.last_used = clock_;
      return g.exec;
    }
  }
  LoopGraph* target = nullptr;
  if (graphs_.size() < kCapacity) {
    graphs_.emplace_back();
    target = &graphs_.back();
  } else {
    target = &*std::min_element(graphs_.begin(), graphs_.end(),
                                [](const LoopGraph& l, const LoopGraph& r) { return l.last_used < r.last_used; });
    destroy(*target);
  }
  build(*target, args, slots, blocks, trace, generation);
  target->last_used = clock_;
  built = true;
  return target->exec;
}

void LoopGraphCache::build(LoopGraph& g, const BatchArgs& args, int slots, int blocks, bool trace,
                           std::uint64_t generation) {
  if (!capture_stream_) NDTCU_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking));
  NDTCU_CUDA_CHECK(cudaGraphCreate(&g.graph, 0));
  try {
    cudaGraphConditionalHandle handle = 0;
    NDTCU_CUDA_CHECK(cudaGraphConditionalHandleCreate(&handle, g.graph, 1, cudaGraphCondAssignDefault));
    cudaGraphNodeParams params{};
    params.type = cudaGraphNodeTypeConditional;
    params.conditional.handle = handle;
    params.conditional.type = cudaGraphCondTypeWhile;
    params.conditional.size = 1;
    cudaGraphNode_t node = nullptr;
    NDTCU_CUDA_CHECK(cudaGraphAddNode(&node, g.graph, nullptr, nullptr, 0, &params));
    cudaGraph_t body = params.conditional.phGraph_out[0];
    NDTCU_CUDA_CHECK(
        cudaStreamBeginCaptureToGraph(capture_stream_, body, nullptr, nullptr, 0, cudaStreamCaptureModeThreadLocal));
    const cudaError_t launched = launch_loop_body(args, blocks, slots, handle, true, capture_stream_);
    cudaGraph_t captured = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(capture_stream_, &captured);
    NDTCU_CUDA_CHECK(launched);
    NDTCU_CUDA_CHECK(ended);
    NDTCU_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
  } catch (...) {
    destroy(g);
    throw;
  }
  g.slots = slots;
  g.blocks = blocks;
  g.trace = trace;
  g.generation = generation;
}

}  // namespace ndtcu::detail
