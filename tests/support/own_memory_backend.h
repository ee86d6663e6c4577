// A CPU backend that declares its memory not the host's (host_memory() false), so that the code
// written for a device backend runs on a machine without one: the caller must move bytes through
// CopyToDevice / CopyToHost / CopyToHostAsync, which this backend counts. CopyToHostAsync copies
// on a thread of its own after a delay (set_copy_delay), as a GPU's copy stream lands later, or
// fails (fail_copies): what the caller reads before the fence has passed is then still stale.
// Steps (BeginStep / EndStep) are counted; refuse_steps(n) makes the next n steps behave as a
// refused replay of a recorded step: their operations do nothing and EndStep returns false.
// Every other operation is the wrapped backend's. Test-only, header-only.
#ifndef BATON_TESTS_SUPPORT_OWN_MEMORY_BACKEND_H_
#define BATON_TESTS_SUPPORT_OWN_MEMORY_BACKEND_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kernels/backend.h"
#include "kernels/host_copy.h"

namespace baton::test_support {

class OwnMemoryBackend final : public kernels::Backend {
 public:
  explicit OwnMemoryBackend(std::unique_ptr<kernels::Backend> inner) : inner_(std::move(inner)) {}

  // Host buffers allocated (AllocateHost) so far.
  int host_allocations() const { return host_allocations_; }
  // Bytes moved by CopyToHost and CopyToDevice so far (any thread).
  size_t bytes_to_host() const { return bytes_to_host_; }
  size_t bytes_to_device() const { return bytes_to_device_; }

  // Steps begun so far, and operations dropped in refused steps.
  int steps_begun() const { return steps_begun_; }
  int operations_dropped() const { return operations_dropped_; }
  void refuse_steps(int n) { steps_to_refuse_ = n; }
  // Called as each forward pass begins (its embedding lookup, GetRows), on its thread.
  void on_forward(std::function<void()> hook) { on_forward_ = std::move(hook); }

  // Asynchronous copies land this long after they are queued.
  void set_copy_delay(std::chrono::milliseconds delay) { copy_delay_ = delay; }
  // Asynchronous copies queued from now on copy nothing and their fences report `why`.
  void fail_copies(absl::Status why) { copy_failure_ = std::move(why); }

  std::string name() const override { return inner_->name() + "-own-memory"; }
  bool host_memory() const override { return false; }
  absl::StatusOr<void*> Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  void Free(void* pointer) override { inner_->Free(pointer); }
  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    ++host_allocations_;
    return inner_->AllocateHost(bytes);
  }
  void FreeHost(void* pointer) override { inner_->FreeHost(pointer); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    bytes_to_device_ += bytes;
    inner_->CopyToDevice(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    bytes_to_host_ += bytes;
    inner_->CopyToHost(dst, src, bytes);
  }
  std::unique_ptr<kernels::CopyFence> CopyToHostAsync(
      std::span<const kernels::HostCopy> copies) override {
    auto fence = std::make_unique<DelayedFence>();
    fence->status = copy_failure_;
    std::vector<kernels::HostCopy> list(copies.begin(), copies.end());
    if (!copy_failure_.ok()) list.clear();
    fence->copier = std::thread(
        [this, list = std::move(list), delay = copy_delay_, done = &fence->done] {
          std::this_thread::sleep_for(delay);
          for (const kernels::HostCopy& c : list) CopyToHost(c.destination, c.source, c.bytes);
          done->Notify();
        });
    return fence;
  }
  void BeginStep(uint64_t shape, int64_t rows) override {
    ++steps_begun_;
    refusing_ = steps_to_refuse_ > 0;
    if (refusing_) --steps_to_refuse_;
    inner_->BeginStep(shape, rows);
  }
  bool EndStep() override {
    const bool ran = inner_->EndStep() && !refusing_;
    refusing_ = false;
    return ran;
  }
  void Add(float* x, const float* y, int64_t n) override {
    if (Dropped()) return;
    inner_->Add(x, y, n);
  }
  void WeightedSumOfRows(const float* x, const int64_t* rows, const float* weights, int64_t n,
                         int64_t k, int64_t dim, float* out) override {
    if (Dropped()) return;
    inner_->WeightedSumOfRows(x, rows, weights, n, k, dim, out);
  }
  void Scale(float* x, float s, int64_t n) override {
    if (Dropped()) return;
    inner_->Scale(x, s, n);
  }
  void AddRowBias(float* x, const float* bias, int64_t n_rows, int64_t dim) override {
    if (Dropped()) return;
    inner_->AddRowBias(x, bias, n_rows, dim);
  }
  void RoundToF16(float* x, int64_t n) override {
    if (Dropped()) return;
    inner_->RoundToF16(x, n);
  }
  void GatherRows(const float* x, const int64_t* rows, int64_t n, int64_t dim,
                  float* out) override {
    if (Dropped()) return;
    inner_->GatherRows(x, rows, n, dim, out);
  }
  void CopyColumns(const float* x, int64_t x_stride, int64_t rows, int64_t width, float* y,
                   int64_t y_stride) override {
    if (Dropped()) return;
    inner_->CopyColumns(x, x_stride, rows, width, y, y_stride);
  }
  void MatMul(const kernels::WeightMatrix& w, const float* x, int64_t n, float* y) override {
    if (Dropped()) return;
    inner_->MatMul(w, x, n, y);
  }
  void MatMulMany(std::span<const kernels::WeightMatrix* const> ws, const float* x, int64_t n,
                  std::span<float* const> ys) override {
    if (Dropped()) return;
    inner_->MatMulMany(ws, x, n, ys);
  }
  bool RegisterWeights(const kernels::WeightMatrix& w) override {
    return inner_->RegisterWeights(w);
  }
  void ReleaseWeights(const kernels::WeightMatrix& w) override { inner_->ReleaseWeights(w); }
  void GetRows(const kernels::WeightMatrix& w, const int32_t* ids, int64_t n,
               float* out) override {
    if (on_forward_) on_forward_();
    inner_->GetRows(w, ids, n, out);
  }
  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
    if (Dropped()) return;
    inner_->RmsNorm(x, weight, n, dim, eps, y);
  }
  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const kernels::RopeParams& params) override {
    if (Dropped()) return;
    inner_->Rope(x, n, n_heads, head_dim, positions, params);
  }
  void SiluMul(const float* gate, const float* up, int64_t count, float* y) override {
    if (Dropped()) return;
    inner_->SiluMul(gate, up, count, y);
  }
  void GeluMul(const float* gate, const float* up, int64_t count, float* y) override {
    if (Dropped()) return;
    inner_->GeluMul(gate, up, count, y);
  }
  void SwigluOaiMul(const float* gate, const float* up, int64_t count, float* y) override {
    if (Dropped()) return;
    inner_->SwigluOaiMul(gate, up, count, y);
  }
  void WriteKv(const kernels::KvLayerView& kv, const int32_t* positions, int64_t n,
               const float* k, const float* v) override {
    if (Dropped()) return;
    inner_->WriteKv(kv, positions, n, k, v);
  }
  void Attention(const float* q, const int32_t* q_positions, int64_t n_q, int32_t n_head,
                 const kernels::KvLayerView& kv, float scale, const float* sinks,
                 float* out) override {
    if (Dropped()) return;
    inner_->Attention(q, q_positions, n_q, n_head, kv, scale, sinks, out);
  }
  void AttentionMany(std::span<const kernels::AttentionQueries> seqs, int32_t n_head, float scale,
                     const float* sinks) override {
    if (Dropped()) return;
    inner_->AttentionMany(seqs, n_head, scale, sinks);
  }

 private:
  struct DelayedFence final : kernels::CopyFence {
    ~DelayedFence() override { copier.join(); }
    absl::Status Wait(absl::Time deadline) override {
      if (!done.WaitForNotificationWithDeadline(deadline)) {
        return absl::DeadlineExceededError("copy still running");
      }
      return status;
    }
    absl::Notification done;
    absl::Status status;
    std::thread copier;
  };

  // Whether the operation being called is in a refused step (and so does nothing).
  bool Dropped() {
    if (refusing_) ++operations_dropped_;
    return refusing_;
  }

  std::unique_ptr<kernels::Backend> inner_;
  int steps_begun_ = 0;
  int steps_to_refuse_ = 0;
  std::function<void()> on_forward_;
  int operations_dropped_ = 0;
  bool refusing_ = false;
  std::chrono::milliseconds copy_delay_{0};
  absl::Status copy_failure_;
  std::atomic<size_t> bytes_to_host_ = 0;
  std::atomic<size_t> bytes_to_device_ = 0;
  std::atomic<int> host_allocations_ = 0;
};

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_OWN_MEMORY_BACKEND_H_
