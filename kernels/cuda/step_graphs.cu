#include "kernels/cuda/step_graphs.cuh"

#include "kernels/cuda/cuda_check.cuh"

namespace baton::kernels::cuda {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;

StepGraphs::StepGraphs(cudaStream_t stream, bool enabled) : stream_(stream), enabled_(enabled) {}

StepGraphs::~StepGraphs() {
  for (auto& [key, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
}

void StepGraphs::Begin(uint64_t key, bool record) {
  key_ = key;
  fingerprint_ = kFnvOffset;
  ++steps_;
  if (!enabled_ || !record) {
    mode_ = Mode::kEager;
  } else if (graphs_.contains(key)) {
    mode_ = Mode::kReplaying;
  } else if (seen_.contains(key)) {
    mode_ = Mode::kCapturing;
    // Only this thread's calls join the capture; a call that may not be captured fails it.
    BATON_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  } else {
    mode_ = Mode::kEager;
    if (seen_.size() >= kMaxSeen) seen_.clear();
    seen_.insert(key);
  }
}

bool StepGraphs::End() {
  const Mode mode = mode_;
  mode_ = Mode::kOutside;
  switch (mode) {
    case Mode::kCapturing: {
      cudaGraph_t graph = nullptr;
      BATON_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      cudaGraphExec_t exec = nullptr;
      BATON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      BATON_CUDA_CHECK(cudaGraphDestroy(graph));
      BATON_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
      Keep(key_, exec);
      return true;
    }
    case Mode::kReplaying: {
      Graph& graph = graphs_.at(key_);
      if (graph.fingerprint != fingerprint_) {
        Drop(key_);
        return false;
      }
      graph.last_used = steps_;
      BATON_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream_));
      return true;
    }
    default:
      return true;
  }
}

void StepGraphs::Keep(uint64_t key, cudaGraphExec_t exec) {
  if (graphs_.size() >= kMaxGraphs) {
    auto oldest = graphs_.begin();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    Drop(oldest->first);
  }
  graphs_[key] = {.exec = exec, .fingerprint = fingerprint_, .last_used = steps_};
}

void StepGraphs::Drop(uint64_t key) {
  auto it = graphs_.find(key);
  if (it == graphs_.end()) return;
  // A graph launched earlier may still run: destroying its exec is allowed then (CUDA defers
  // the release until the launch completes).
  BATON_CUDA_CHECK(cudaGraphExecDestroy(it->second.exec));
  graphs_.erase(it);
}

}  // namespace baton::kernels::cuda
