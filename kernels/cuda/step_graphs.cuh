// A forward pass recorded as a CUDA graph and replayed in later steps of the same shape, so a
// decode step costs one graph launch instead of hundreds of kernel launches (a small model's
// step is launches: ~20 per layer of a few microseconds each).
//
// The backend brackets a step's operations with Begin(shape) and End(). The first step of a
// shape runs eagerly (its scratch buffers grow then, outside any capture); the second is
// captured from the stream and launched as a graph; later ones replay it: each operation then
// only stages its index arrays (IndexUploader, which restarts at offset 0 every step, so a step
// of the same shape stages them at the same addresses that the graph's copies read) and mixes
// its arguments into a fingerprint, and End launches the graph when the fingerprint is the
// captured step's. When it is not (the same shape key but other pointers or sizes), End drops
// the graph and returns false: nothing of the step ran, and the caller runs it again eagerly.
//
// Thread-safety: the backend's operations' thread only.
#ifndef BATON_KERNELS_CUDA_STEP_GRAPHS_CUH_
#define BATON_KERNELS_CUDA_STEP_GRAPHS_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

namespace baton::kernels::cuda {

class StepGraphs {
 public:
  enum class Mode { kOutside, kEager, kCapturing, kReplaying };

  // enabled false: every step runs eagerly.
  StepGraphs(cudaStream_t stream, bool enabled);
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;
  ~StepGraphs();

  // Starts a step of shape `key`, run eagerly unless `record`; the stream must be idle
  // (nothing queued on it runs).
  void Begin(uint64_t key, bool record);
  // Ends it: true when its operations ran or were launched (eagerly, or as a graph captured now
  // or replayed); false when a replay was refused and nothing ran.
  bool End();

  Mode mode() const { return mode_; }
  // Whether operations launch their kernels now: outside steps, eager and capturing steps.
  bool launching() const { return mode_ != Mode::kReplaying; }

  // Mixes an operation's arguments (scalars and pointers) into the step's fingerprint; returns
  // launching().
  template <typename... Args>
  bool Record(const Args&... args) {
    if (mode_ != Mode::kOutside) (Mix(args), ...);
    return launching();
  }

 private:
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    uint64_t fingerprint = 0;
    uint64_t last_used = 0;
  };
  static constexpr size_t kMaxGraphs = 32;
  static constexpr size_t kMaxSeen = 1024;

  template <typename T>
  void Mix(const T& v) {
    static_assert(std::is_arithmetic_v<T> || std::is_pointer_v<T> || std::is_enum_v<T>,
                  "fingerprints take scalars and pointers");
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    for (unsigned char b : bytes) fingerprint_ = (fingerprint_ ^ b) * 0x100000001b3ull;
  }
  void Keep(uint64_t key, cudaGraphExec_t exec);  // evicts the least recently used past kMax
  void Drop(uint64_t key);

  const cudaStream_t stream_;
  const bool enabled_;
  Mode mode_ = Mode::kOutside;
  uint64_t key_ = 0;
  uint64_t fingerprint_ = 0;
  uint64_t steps_ = 0;
  std::unordered_map<uint64_t, Graph> graphs_;
  std::unordered_set<uint64_t> seen_;  // keys that ran eagerly once
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_STEP_GRAPHS_CUH_
