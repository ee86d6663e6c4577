#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/log/check.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/interleaved_rows.h"
#include "kernels/cpu/iquant_blocks.h"
#include "kernels/cpu/super_block_lanes.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/packed_block32.h"
#include "kernels/cpu/reference_kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_arena.h"
#include "kernels/dtype.h"
#include "kernels/half.h"

namespace baton::kernels {
namespace {

// Weight rows per ParallelFor task: a multiple of every tile width.
constexpr int64_t kRowGrain = 16;
// Below this many elements an elementwise operation runs on the calling thread alone.
constexpr int64_t kMinParallelElements = 16384;
// Most queries that go through an attention segment together (their K and V rows read once).
constexpr int64_t kAttentionQueryBlock = 16;

void RoundToF16Scalar(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = F16ToF32(F32ToF16(v[i]));
}

void CheckMatMulShape(const WeightMatrix& w) {
  const DTypeTraits& t = Traits(w.dtype);
  CHECK(t.can_dequantize) << "MatMul: weights of type " << t.name << " are not supported";
  CHECK(w.n_cols % t.block_size == 0)
      << "MatMul: " << w.n_cols << " columns is not a multiple of the " << t.name << " block size";
}

// What both CPU backends share: host memory, and the element-wise operations between the
// layers' products (plain loops the compiler vectorizes, on the calling thread: they are a small
// part of a step and a parallel job would cost a barrier).
class HostBackend : public Backend {
 public:
  bool host_memory() const override { return true; }

  absl::StatusOr<void*> Allocate(size_t bytes) override { return AllocateHost(bytes); }
  void Free(void* pointer) override { FreeHost(pointer); }
  // memcpy wants valid pointers even for no bytes; an empty copy may come with null ones.
  void CopyToDevice(void* device_dst, const void* host_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(device_dst, host_src, bytes);
  }
  void CopyToHost(void* host_dst, const void* device_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(host_dst, device_src, bytes);
  }

  void Add(float* x, const float* y, int64_t n) override { AddScalar(x, y, n); }
  void Scale(float* x, float s, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
  }
  void AddRowBias(float* x, const float* bias, int64_t n_rows, int64_t dim) override {
    for (int64_t r = 0; r < n_rows; ++r) Add(x + r * dim, bias, dim);
  }
  void RoundToF16(float* x, int64_t n) override { RoundToF16UnboundedScalar(x, n); }
  void WriteKv(const KvLayerView& kv, const int32_t* positions, int64_t n, const float* k,
               const float* v) override {
    const int64_t kv_dim = int64_t{kv.n_kv_head} * kv.head_dim;
    for (int64_t i = 0; i < n; ++i) {
      CHECK(positions[i] >= 0 && positions[i] < kv.n_tokens)
          << "WriteKv: position " << positions[i] << " outside the view's " << kv.n_tokens
          << " tokens";
      for (int32_t kv_h = 0; kv_h < kv.n_kv_head; ++kv_h) {
        const int64_t offset = kv.RowOffset(positions[i], kv_h);
        const int64_t from = i * kv_dim + int64_t{kv_h} * kv.head_dim;
        ToF16Row(k + from, kv.head_dim, kv.k_base + offset);
        ToF16Row(v + from, kv.head_dim, kv.v_base + offset);
      }
    }
  }
  void GatherRows(const float* x, const int64_t* rows, int64_t n, int64_t dim,
                  float* out) override {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(out + i * dim, x + rows[i] * dim, static_cast<size_t>(dim) * sizeof(float));
    }
  }
  void CopyColumns(const float* x, int64_t x_stride, int64_t rows, int64_t width, float* y,
                   int64_t y_stride) override {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(y + r * y_stride, x + r * x_stride, static_cast<size_t>(width) * sizeof(float));
    }
  }
  void WeightedSumOfRows(const float* x, const int64_t* rows, const float* weights, int64_t n,
                         int64_t k, int64_t dim, float* out) override {
    reference::WeightedSumOfRows(x, rows, weights, 0, n, k, dim, out);
  }

 protected:
  // out[0..n) = F32ToF16 of x[0..n).
  virtual void ToF16Row(const float* x, int64_t n, uint16_t* out) {
    for (int64_t e = 0; e < n; ++e) out[e] = F32ToF16(x[e]);
  }
};

class ReferenceCpuBackend final : public HostBackend {
 public:
  std::string name() const override { return "cpu-reference"; }

  void MatMul(const WeightMatrix& w, const float* x, int64_t n, float* y) override {
    CheckMatMulShape(w);
    reference::MatMul(w, x, n, y);
  }
  void GetRows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out) override {
    reference::GetRows(w, ids, n, out);
  }
  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
    reference::RmsNorm(x, weight, n, dim, eps, y);
  }
  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& params) override {
    reference::Rope(x, n, n_heads, head_dim, positions, params);
  }
  void SiluMul(const float* gate, const float* up, int64_t count, float* y) override {
    reference::SiluMul(gate, up, count, y);
  }
  void GeluMul(const float* gate, const float* up, int64_t count, float* y) override {
    reference::GeluMul(gate, up, count, y);
  }
  void SwigluOaiMul(const float* gate, const float* up, int64_t count, float* y) override {
    reference::SwigluOaiMul(gate, up, count, y);
  }
  void Attention(const float* q, const int32_t* q_positions, int64_t n_q, int32_t n_head,
                 const KvLayerView& kv, float scale, const float* sinks, float* out) override {
    reference::Attention(q, q_positions, n_q, n_head, kv, scale, sinks, out);
  }
};

class FastCpuBackend final : public HostBackend {
 public:
  FastCpuBackend(const CpuBackendOptions& options, CpuIsa isa)
      : kernels_(KernelsFor(isa)), pool_(ThreadPoolOptions{.n_threads = options.n_threads}) {}

  std::string name() const override {
    return "cpu-" + std::string(CpuIsaName(kernels_.isa));
  }

  int host_threads() const override { return pool_.n_threads(); }
  void ParallelForOnHost(int64_t n_tasks,
                         absl::FunctionRef<void(int64_t, int64_t, int)> fn) override {
    pool_.ParallelFor(n_tasks, fn);
  }

  void MatMul(const WeightMatrix& registered_as, const float* x, int64_t n, float* y) override {
    CheckMatMulShape(registered_as);
    std::vector<uint8_t> q8_0_rows;
    const WeightMatrix w = AsMultiplied(registered_as, q8_0_rows);
    if (n <= 0 || w.n_rows <= 0) return;
    const int64_t n_tasks = (w.n_rows + kRowGrain - 1) / kRowGrain;
    const MatMulRowsFn kernel = MatMulKernelFor(kernels_, w.dtype);
    if (kernel == nullptr) {
      pool_.ParallelFor(n_tasks, [&](int64_t begin, int64_t end, int) {
        reference::MatMulRows(w, x, n, y, begin * kRowGrain, std::min(end * kRowGrain, w.n_rows));
      });
      return;
    }
    MatMulRowsFn run;
    MatMulArgs args = KernelArgs(w, n, y, &run);
    args.x = PrepareActivations(ActivationFormatFor(kernels_, w.dtype), x, n, w.n_cols);
    pool_.ParallelFor(n_tasks, [&](int64_t begin, int64_t end, int) {
      run(args, begin * kRowGrain, std::min(end * kRowGrain, w.n_rows));
    });
  }

  void MatMulMany(std::span<const WeightMatrix* const> ws, const float* x, int64_t n,
                  std::span<float* const> ys) override {
    constexpr size_t kMaxMatrices = 4;
    if (ws.size() > kMaxMatrices || n <= 0) {
      Backend::MatMulMany(ws, x, n, ys);
      return;
    }
    WeightMatrix w[kMaxMatrices];
    std::vector<uint8_t> q8_0_rows[kMaxMatrices];
    bool shared = true;
    for (size_t k = 0; k < ws.size(); ++k) {
      CheckMatMulShape(*ws[k]);
      w[k] = AsMultiplied(*ws[k], q8_0_rows[k]);
      shared = shared && w[k].dtype == w[0].dtype && w[k].n_cols == w[0].n_cols &&
               w[k].n_rows > 0 && MatMulKernelFor(kernels_, w[k].dtype) != nullptr;
    }
    if (!shared) {  // one product after the other, on the matrices as already multiplied
      for (size_t k = 0; k < ws.size(); ++k) MatMul(w[k], x, n, ys[k]);
      return;
    }
    // One quantization of x, one parallel job over the row tasks of all matrices in turn.
    MatMulArgs args[kMaxMatrices];
    MatMulRowsFn run[kMaxMatrices];
    int64_t first_task[kMaxMatrices + 1] = {0};
    for (size_t k = 0; k < ws.size(); ++k) {
      args[k] = KernelArgs(w[k], n, ys[k], &run[k]);
      first_task[k + 1] = first_task[k] + (w[k].n_rows + kRowGrain - 1) / kRowGrain;
    }
    const MatMulActivations xa =
        PrepareActivations(ActivationFormatFor(kernels_, w[0].dtype), x, n, w[0].n_cols);
    for (size_t k = 0; k < ws.size(); ++k) args[k].x = xa;
    pool_.ParallelFor(first_task[ws.size()], [&](int64_t begin, int64_t end, int) {
      for (size_t k = 0; k < ws.size(); ++k) {
        const int64_t b = std::max(begin, first_task[k]) - first_task[k];
        const int64_t e = std::min(end, first_task[k + 1]) - first_task[k];
        if (b < e) run[k](args[k], b * kRowGrain, std::min(e * kRowGrain, w[k].n_rows));
      }
    });
  }

  // The i-quants and MXFP4 are multiplied in their Q8_0 form (iquant_blocks.h): the copy of such
  // a matrix is that of the Q8_0 matrix.
  // A copy is known by its matrix's address and shape: a matrix at the address of a registered
  // one with other rows (a tensor-parallel rank's share of a tied output, at the embeddings'
  // address) gets no copy of its own and is multiplied from its rows.
  bool RegisterWeights(const WeightMatrix& w) override {
    if (auto it = registered_.find(w.data); it != registered_.end()) {
      if (!IsCopyOf(it->second, w)) return false;
      ++it->second.count;
      return true;
    }
    std::vector<uint8_t> q8_0_rows;
    const WeightMatrix m = IsIQuantOrMxfp4(w.dtype) ? ToQ8_0(w, q8_0_rows) : w;
    std::optional<Registered> copy = MakeCopy(m);
    if (!copy.has_value()) return false;
    registered_[w.data] = *copy;
    return true;
  }

  void ReleaseWeights(const WeightMatrix& w) override {
    auto it = registered_.find(w.data);
    if (it == registered_.end() || !IsCopyOf(it->second, w)) return;
    if (--it->second.count > 0) return;
    weight_arena_.Release(it->second.packed);
    registered_.erase(it);
  }

  // A registered matrix's rows come from the backend's copy (the tied output's are the
  // embeddings): the file's pages of it, let go once copied, stay so. An i-quant's come from
  // w.data, as the file stores them (its copy holds their Q8_0 form, not their values).
  void GetRows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out) override {
    const Registered* registered = FindCopy(w);
    if (registered == nullptr || registered->dtype != w.dtype) {
      ForRows(n, w.n_cols, [&](int64_t begin, int64_t end) {
        reference::GetRows(w, ids + begin, end - begin, out + begin * w.n_cols);
      });
      return;
    }
    const Registered& copy = *registered;
    ForRows(n, w.n_cols, [&](int64_t begin, int64_t end) {
      std::vector<uint8_t> row(static_cast<size_t>(RowBytes(w.dtype, w.n_cols)));
      for (int64_t i = begin; i < end; ++i) {
        CHECK(ids[i] >= 0 && ids[i] < w.n_rows) << "GetRows: id " << ids[i] << " out of range";
        CopyRegisteredRow(w, copy, ids[i], row.data());
        DequantizeRow(w.dtype, row.data(), out + i * w.n_cols, w.n_cols);
      }
    });
  }

  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
    // GGML's rms_norm followed by its mul with the weight, the sum of squares in 8 lanes
    // (elementwise.h).
    ForRows(n, dim, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        kernels_.rms_norm_row(x + i * dim, weight, dim, eps, y + i * dim);
      }
    });
  }

  void Add(float* x, const float* y, int64_t n) override { kernels_.add(x, y, n); }
  void RoundToF16(float* x, int64_t n) override { kernels_.round_to_f16_unbounded(x, n); }

  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& params) override {
    // The reference's arithmetic; the angles of a step's positions are computed once and serve
    // the Q and K of every layer.
    reference::CheckRope(params, head_dim);
    const float* angles = rope_angles_.For(positions, n, params);
    const RopeRotateFn rotate =
        kernels_.rope_rotate != nullptr ? kernels_.rope_rotate : reference::RopeRotate;
    ForRows(n, n_heads * head_dim * 2, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        rotate(x + t * n_heads * head_dim, n_heads, head_dim, angles + t * params.n_dims, params);
      }
    });
  }

  void SiluMul(const float* gate, const float* up, int64_t count, float* y) override {
    if (kernels_.silu_mul == nullptr) {
      ForRows(count, 1, [&](int64_t begin, int64_t end) {
        reference::SiluMul(gate + begin, up + begin, end - begin, y + begin);
      });
      return;
    }
    ForRows(count, 1, [&](int64_t begin, int64_t end) {
      kernels_.silu_mul(gate + begin, up + begin, end - begin, y + begin);
    });
  }

  void GeluMul(const float* gate, const float* up, int64_t count, float* y) override {
    ForRows(count, 1, [&](int64_t begin, int64_t end) {
      reference::GeluMul(gate + begin, up + begin, end - begin, y + begin);
    });
  }

  void SwigluOaiMul(const float* gate, const float* up, int64_t count, float* y) override {
    ForRows(count, 1, [&](int64_t begin, int64_t end) {
      reference::SwigluOaiMul(gate + begin, up + begin, end - begin, y + begin);
    });
  }

  void Attention(const float* q, const int32_t* q_positions, int64_t n_q, int32_t n_head,
                 const KvLayerView& kv, float scale, const float* sinks, float* out) override {
    const int32_t max_pos = CheckAttention(q_positions, n_q, n_head, kv);
    if (n_q <= 0) return;
    const int32_t max_segments = max_pos / kAttentionSegment + 1;
    if (!VectorizedAttention(kv)) {
      AttentionReference(q, q_positions, n_q, n_head, kv, scale, sinks, out);
    } else if (kv.FirstVisible(max_pos) > 0) {
      // A window that hides some queries' first keys: each pair starts at its own first key.
      const AttentionQueries seq{
          .q = q, .q_positions = q_positions, .n_q = n_q, .kv = kv, .out = out};
      AttentionPairs({&seq, 1}, n_q * kv.n_kv_head, n_head, scale, sinks);
    } else if (n_q * kv.n_kv_head >= 2 * pool_.n_threads() || max_segments == 1) {
      AttentionInQueryBlocks(q, q_positions, n_q, n_head, kv, scale, sinks, out);
    } else {
      AttentionInSharedSegments(q, q_positions, n_q, n_head, kv, scale, sinks, out, max_segments);
    }
  }

  void AttentionMany(std::span<const AttentionQueries> seqs, int32_t n_head, float scale,
                     const float* sinks) override {
    // One parallel job for a batch of short query runs (decode, speculative verification): a
    // sequence's own Attention call would be a job of its few (query, kv head) pairs, and a batch
    // would wait at a barrier per sequence.
    bool one_job = seqs.size() > 1;
    int64_t n_pairs = 0;
    for (const AttentionQueries& s : seqs) {
      CheckAttention(s.q_positions, s.n_q, n_head, s.kv);
      one_job = one_job && VectorizedAttention(s.kv) && s.n_q <= kAttentionQueryBlock;
      n_pairs += s.n_q * s.kv.n_kv_head;
    }
    if (!one_job || n_pairs < 2 * pool_.n_threads()) {
      Backend::AttentionMany(seqs, n_head, scale, sinks);
      return;
    }
    AttentionPairs(seqs, n_pairs, n_head, scale, sinks);
  }

 protected:
  void ToF16Row(const float* x, int64_t n, uint16_t* out) override {
    if (kernels_.to_f16_row == nullptr) return HostBackend::ToF16Row(x, n, out);
    kernels_.to_f16_row(x, n, out);
  }

 private:
  // Tasks in the order 0, n-1, 1, n-2, ...: with the static split, every thread gets a similar
  // share of a causal prefill's work.
  static int64_t Spread(int64_t k, int64_t n) { return k % 2 == 0 ? k / 2 : n - 1 - k / 2; }

  // Checks Attention's arguments; returns the largest query position (0 for none).
  static int32_t CheckAttention(const int32_t* q_positions, int64_t n_q, int32_t n_head,
                                const KvLayerView& kv) {
    CHECK(kv.n_kv_head > 0 && n_head % kv.n_kv_head == 0)
        << "Attention: " << n_head << " heads over " << kv.n_kv_head << " kv heads";
    int32_t max_pos = 0;
    for (int64_t i = 0; i < n_q; ++i) {
      CHECK(q_positions[i] >= 0 && q_positions[i] < kv.n_tokens)
          << "Attention: query " << i << " at position " << q_positions[i]
          << " outside the cache of " << kv.n_tokens << " tokens";
      max_pos = std::max(max_pos, q_positions[i]);
    }
    return max_pos;
  }

  // Whether the level's attention kernels take heads of kv's shape.
  bool VectorizedAttention(const KvLayerView& kv) const {
    return kernels_.attention_partial != nullptr && AttentionTakes(kv.head_dim);
  }

  // Every (query, kv head) pair of every sequence a task of one job, each through its segments
  // in order: the partials folded as AttentionInSharedSegments folds them. A query whose window
  // hides its first keys starts at its first visible key: its first segment is the rest of the
  // fixed segment that key falls in.
  void AttentionPairs(std::span<const AttentionQueries> seqs, int64_t n_pairs, int32_t n_head,
                      float scale, const float* sinks) {
    std::vector<int64_t> first_pair(seqs.size() + 1, 0);
    int64_t max_size = 0;
    for (size_t k = 0; k < seqs.size(); ++k) {
      first_pair[k + 1] = first_pair[k] + seqs[k].n_q * seqs[k].kv.n_kv_head;
      const int32_t group = n_head / seqs[k].kv.n_kv_head;
      max_size = std::max(max_size, group * AttentionPartialSize(seqs[k].kv.head_dim));
    }
    pool_.ParallelFor(n_pairs, [&](int64_t begin, int64_t end, int) {
      std::vector<float> partial(max_size), state(max_size);
      size_t k = std::upper_bound(first_pair.begin(), first_pair.end(), begin) -
                 first_pair.begin() - 1;
      for (int64_t task = begin; task < end; ++task) {
        while (task >= first_pair[k + 1]) ++k;
        const AttentionQueries& s = seqs[k];
        const int32_t group = n_head / s.kv.n_kv_head;
        const int64_t pair = task - first_pair[k];
        const int64_t i = pair / s.kv.n_kv_head;
        const int32_t kv_h = static_cast<int32_t>(pair % s.kv.n_kv_head);
        const int64_t offset = (i * n_head + kv_h * group) * s.kv.head_dim;
        const int32_t n_ctx = s.q_positions[i] + 1;
        AttentionInitState(group, s.kv.head_dim, state.data());
        for (int32_t t0 = s.kv.FirstVisible(s.q_positions[i]); t0 < n_ctx;) {
          const int32_t segment_end = (t0 / kAttentionSegment + 1) * kAttentionSegment;
          kernels_.attention_partial(s.q + offset, kv_h, group, t0, std::min(n_ctx, segment_end),
                                     s.kv, scale, partial.data());
          kernels_.attention_fold(partial.data(), group, s.kv.head_dim, state.data());
          t0 = segment_end;
        }
        if (sinks != nullptr) {
          AttentionFoldSinks(sinks + kv_h * group, group, s.kv.head_dim, state.data());
        }
        kernels_.attention_finish(state.data(), group, s.kv.head_dim, s.out + offset);
      }
    });
  }

  // The scalar reference, one (query, kv head) pair per task: where the level has no attention
  // kernel or the head dimension does not suit it.
  void AttentionReference(const float* q, const int32_t* q_positions, int64_t n_q,
                          int32_t n_head, const KvLayerView& kv, float scale, const float* sinks,
                          float* out) {
    const int32_t group = n_head / kv.n_kv_head;
    const int64_t d = kv.head_dim;
    pool_.ParallelFor(n_q * kv.n_kv_head, [&](int64_t begin, int64_t end, int) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t i = Spread(task / kv.n_kv_head, n_q);
        const int32_t kv_h = static_cast<int32_t>(task % kv.n_kv_head);
        for (int32_t g = 0; g < group; ++g) {
          const int64_t offset = (i * n_head + kv_h * group + g) * d;
          reference::AttentionHead(q + offset, q_positions[i], kv_h * group + g, n_head, kv,
                                   scale, sinks, out + offset);
        }
      }
    });
  }

  // Enough (query, kv head) pairs to share out: a task is a block of queries against one kv
  // head's group of heads, which go through each segment together (its K and V rows read once
  // for all of them) and fold their own partials in segment order; or against one head of the
  // group, where that bounds a thread's work better (below). Each head's result is the same
  // either way.
  void AttentionInQueryBlocks(const float* q, const int32_t* q_positions, int64_t n_q,
                              int32_t n_head, const KvLayerView& kv, float scale,
                              const float* sinks, float* out) {
    const int32_t group = n_head / kv.n_kv_head;
    const int64_t d = kv.head_dim;
    const int64_t block = std::clamp<int64_t>(n_q * kv.n_kv_head / (4 * pool_.n_threads()), 1,
                                              kAttentionQueryBlock);
    const int64_t n_blocks = (n_q + block - 1) / block;
    // A task of one head where that bounds a thread's work better: alone, a head costs about
    // twice its share of a group's task (the group's heads share their K and V loads and
    // overlap their chains).
    const int64_t threads = pool_.n_threads();
    const int64_t group_cost = (n_blocks * kv.n_kv_head + threads - 1) / threads * group;
    const int64_t head_cost = (n_blocks * n_head + threads - 1) / threads * 2;
    const int32_t heads = head_cost < group_cost ? 1 : group;
    const int64_t tasks_per_block = n_head / heads;
    const int64_t size = heads * AttentionPartialSize(kv.head_dim);
    pool_.ParallelFor(n_blocks * tasks_per_block, [&](int64_t begin, int64_t end, int) {
      std::vector<float> partial(block * size), state(block * size);
      std::vector<int32_t> t_end(block);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t i0 = Spread(task / tasks_per_block, n_blocks) * block;
        const int32_t h0 = static_cast<int32_t>(task % tasks_per_block) * heads;
        const int64_t n = std::min(block, n_q - i0);
        const int64_t offset = (i0 * n_head + h0) * d;
        int32_t n_ctx = 0;
        for (int64_t j = 0; j < n; ++j) {
          AttentionInitState(heads, kv.head_dim, state.data() + j * size);
          n_ctx = std::max(n_ctx, q_positions[i0 + j] + 1);
        }
        for (int32_t t0 = 0; t0 < n_ctx; t0 += kAttentionSegment) {
          for (int64_t j = 0; j < n; ++j) {
            t_end[j] = std::min(q_positions[i0 + j] + 1, t0 + kAttentionSegment);
          }
          kernels_.attention_partial_queries(q + offset, n_head * d, static_cast<int32_t>(n),
                                             t_end.data(), h0 / group, heads, t0, kv, scale,
                                             partial.data(), size);
          for (int64_t j = 0; j < n; ++j) {
            if (t_end[j] <= t0) continue;
            kernels_.attention_fold(partial.data() + j * size, heads, kv.head_dim,
                                    state.data() + j * size);
          }
        }
        for (int64_t j = 0; j < n; ++j) {
          if (sinks != nullptr) {
            AttentionFoldSinks(sinks + h0, heads, kv.head_dim, state.data() + j * size);
          }
          kernels_.attention_finish(state.data() + j * size, heads, kv.head_dim,
                                    out + offset + j * n_head * d);
        }
      }
    });
  }

  // Few queries over a long context (decode): the segments of every (query, kv head) pair are
  // shared out, then each pair folds its partials in segment order (the same arithmetic).
  void AttentionInSharedSegments(const float* q, const int32_t* q_positions, int64_t n_q,
                                 int32_t n_head, const KvLayerView& kv, float scale,
                                 const float* sinks, float* out, int32_t max_segments) {
    const int32_t group = n_head / kv.n_kv_head;
    const int64_t d = kv.head_dim;
    const int64_t partial_size = group * AttentionPartialSize(kv.head_dim);
    const int64_t n_pairs = n_q * kv.n_kv_head;
    attention_scratch_.resize(static_cast<size_t>(n_pairs * max_segments * partial_size));
    float* scratch = attention_scratch_.data();
    pool_.ParallelFor(n_pairs * max_segments, [&](int64_t begin, int64_t end, int) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t pair = task / max_segments;
        const int32_t segment = static_cast<int32_t>(task % max_segments);
        const int64_t i = pair / kv.n_kv_head;
        const int32_t kv_h = static_cast<int32_t>(pair % kv.n_kv_head);
        const int32_t n_ctx = q_positions[i] + 1;
        const int32_t t0 = segment * kAttentionSegment;
        if (t0 >= n_ctx) continue;
        kernels_.attention_partial(q + (i * n_head + kv_h * group) * d, kv_h, group, t0,
                                   std::min(n_ctx, t0 + kAttentionSegment), kv, scale,
                                   scratch + task * partial_size);
      }
    });
    // Folding is light: a job of its own only when there is much of it.
    ForRows(n_pairs, max_segments * partial_size, [&](int64_t begin, int64_t end) {
      std::vector<float> state(partial_size);
      for (int64_t pair = begin; pair < end; ++pair) {
        const int64_t i = pair / kv.n_kv_head;
        const int32_t kv_h = static_cast<int32_t>(pair % kv.n_kv_head);
        const int32_t n_segments = q_positions[i] / kAttentionSegment + 1;
        AttentionInitState(group, kv.head_dim, state.data());
        for (int32_t segment = 0; segment < n_segments; ++segment) {
          kernels_.attention_fold(scratch + (pair * max_segments + segment) * partial_size, group,
                                  kv.head_dim, state.data());
        }
        if (sinks != nullptr) {
          AttentionFoldSinks(sinks + kv_h * group, group, kv.head_dim, state.data());
        }
        kernels_.attention_finish(state.data(), group, kv.head_dim,
                                  out + (i * n_head + kv_h * group) * d);
      }
    });
  }

  // The arguments (all but x) and the kernel for a MatMul of w, which must have a kernel.
  MatMulArgs KernelArgs(const WeightMatrix& w, int64_t n, float* y, MatMulRowsFn* run) {
    MatMulArgs args;
    args.w = static_cast<const uint8_t*>(w.data);
    args.row_bytes = RowBytes(w.dtype, w.n_cols);
    args.n_rows = w.n_rows;
    args.n_cols = w.n_cols;
    args.n = n;
    args.y = y;
    *run = MatMulKernelFor(kernels_, w.dtype);
    // A registered matrix runs on its packed, lanes or interleaved copy (the same bits, faster).
    const Registered* copy = FindCopy(w);
    if (copy == nullptr) return args;
    args.w = copy->packed.data();
    args.interleave = copy->interleave;
    args.super_block_lanes = copy->super_block_lanes;
    if (args.interleave == 1 && !args.super_block_lanes) {
      *run = PackedMatMulKernelFor(kernels_, w.dtype);
    }
    return args;
  }

  // The RoPE angles (reference::RopeAngles) of the last two position lists and parameters asked
  // for, [n, n_dims] each: a step's layers ask for one list with one or two sets of parameters
  // (Gemma 3's local and global layers alternate their RoPE bases).
  class RopeAngleCache {
   public:
    const float* For(const int32_t* positions, int64_t n, const RopeParams& params) {
      for (Entry& e : entries_) {
        if (e.Holds(positions, n, params)) return e.angles.data();
      }
      Entry& e = entries_[next_];
      next_ = 1 - next_;
      e.Fill(positions, n, params);
      return e.angles.data();
    }

   private:
    struct Entry {
      RopeParams params;
      std::vector<int32_t> positions;
      std::vector<float> factors;
      std::vector<float> angles;

      bool Holds(const int32_t* p, int64_t n, const RopeParams& q) const {
        const int64_t half = q.n_dims / 2;
        const bool same_factors =
            q.freq_factors == nullptr
                ? factors.empty()
                : std::equal(q.freq_factors, q.freq_factors + half, factors.begin(),
                             factors.end());
        return !angles.empty() && q.n_dims == params.n_dims && q.freq_base == params.freq_base &&
               q.freq_scale == params.freq_scale && q.ext_factor == params.ext_factor &&
               q.attn_factor == params.attn_factor && q.beta_fast == params.beta_fast &&
               q.beta_slow == params.beta_slow && q.n_ctx_orig == params.n_ctx_orig &&
               q.truncate == params.truncate &&
               same_factors &&
               std::equal(p, p + n, positions.begin(), positions.end());
      }

      void Fill(const int32_t* p, int64_t n, const RopeParams& q) {
        params = q;
        positions.assign(p, p + n);
        factors.clear();
        if (q.freq_factors != nullptr) {
          factors.assign(q.freq_factors, q.freq_factors + q.n_dims / 2);
        }
        angles.resize(static_cast<size_t>(n * q.n_dims));
        for (int64_t t = 0; t < n; ++t) {
          reference::RopeAngles(p[t], q, angles.data() + t * q.n_dims);
        }
      }
    };
    Entry entries_[2];
    int next_ = 0;
  };
  RopeAngleCache rope_angles_;

  // A registered weight matrix's copy, of a matrix of `dtype` (the registered one's, or Q8_0 for
  // an i-quant): packed (packed_block32.h), in lanes where super_block_lanes
  // (super_block_lanes.h), or interleaved where interleave > 1 (interleaved_rows.h).
  struct Registered {
    int count = 0;
    DType dtype = DType::kF32;
    int64_t n_rows = 0;  // the registered matrix's shape
    int64_t n_cols = 0;
    std::span<uint8_t> packed;  // in weight_arena_
    bool super_block_lanes = false;
    int64_t interleave = 1;
  };

  static bool IsCopyOf(const Registered& copy, const WeightMatrix& w) {
    return copy.n_rows == w.n_rows && copy.n_cols == w.n_cols;
  }
  // w's registered copy; null where w has none.
  const Registered* FindCopy(const WeightMatrix& w) const {
    auto it = registered_.find(w.data);
    return it == registered_.end() || !IsCopyOf(it->second, w) ? nullptr : &it->second;
  }

  // A copy of w in the layout its kernels run fastest on; nullopt where there is none (the
  // kernels on the original rows serve it).
  std::optional<Registered> MakeCopy(const WeightMatrix& w) {
    const bool has_kernel = MatMulKernelFor(kernels_, w.dtype) != nullptr;
    const bool packed = PackedMatMulKernelFor(kernels_, w.dtype) != nullptr;
    const bool lanes = HasSuperBlockLanes(w.dtype) && has_kernel;
    const bool interleaved = HasInterleavedLayout(w.dtype, w.n_cols) && has_kernel;
    if (!packed && !lanes && !interleaved) return std::nullopt;
    const int64_t bytes = packed  ? PackedBytes(w.dtype, w.n_rows, w.n_cols)
                          : lanes ? SuperBlockLanesBytes(w)
                                  : w.n_rows * RowBytes(w.dtype, w.n_cols);
    absl::StatusOr<std::span<uint8_t>> memory =
        weight_arena_.Allocate(static_cast<size_t>(bytes));
    if (!memory.ok()) return std::nullopt;
    Registered r;
    r.count = 1;
    r.dtype = w.dtype;
    r.n_rows = w.n_rows;
    r.n_cols = w.n_cols;
    r.packed = *memory;
    if (packed) {
      Pack(w, r.packed.data());
    } else if (lanes) {
      r.super_block_lanes = true;
      pool_.ParallelFor(LaneGroups(w.n_rows), [&](int64_t begin, int64_t end, int) {
        LayOutLaneGroups(w, begin, end, r.packed.data());
      });
    } else {
      r.interleave = kInterleaveRows;
      pool_.ParallelFor(InterleavedGroups(w), [&](int64_t begin, int64_t end, int) {
        InterleaveGroups(w, begin, end, r.packed.data());
      });
    }
    return r;
  }

  // w's Q8_0 form (iquant_blocks.h), its rows written into `rows`.
  WeightMatrix ToQ8_0(const WeightMatrix& w, std::vector<uint8_t>& rows) {
    const int64_t from_bytes = RowBytes(w.dtype, w.n_cols);
    const int64_t to_bytes = RowBytes(DType::kQ8_0, w.n_cols);
    rows.resize(static_cast<size_t>(w.n_rows * to_bytes));
    pool_.ParallelFor(w.n_rows, [&](int64_t begin, int64_t end, int) {
      IQuantRowsToQ8_0(w.dtype, static_cast<const uint8_t*>(w.data) + begin * from_bytes,
                       end - begin, w.n_cols, rows.data() + begin * to_bytes);
    });
    return {.dtype = DType::kQ8_0, .n_rows = w.n_rows, .n_cols = w.n_cols, .data = rows.data()};
  }

  // w as MatMul multiplies it: an i-quant as its Q8_0 form, registered or not (then written into
  // `rows`), so that registration changes no result.
  WeightMatrix AsMultiplied(const WeightMatrix& w, std::vector<uint8_t>& rows) {
    const Registered* copy = FindCopy(w);
    if (copy == nullptr) return IsIQuantOrMxfp4(w.dtype) ? ToQ8_0(w, rows) : w;
    WeightMatrix m = w;
    m.dtype = copy->dtype;
    return m;
  }

  // Row r of w as w.data stores it, from its registered copy.
  static void CopyRegisteredRow(const WeightMatrix& w, const Registered& copy, int64_t r,
                                uint8_t* row) {
    if (copy.super_block_lanes) {
      CopyLanesRow(w, copy.packed.data(), r, row);
    } else if (copy.interleave > 1) {
      CopyInterleavedRow(w, copy.packed.data(), r, row);
    } else {
      CopyPackedRow(w, copy.packed.data(), r, row);
    }
  }

  void Pack(const WeightMatrix& w, uint8_t* packed) {
    const int64_t groups = (w.n_rows + kPackedGroupRows - 1) / kPackedGroupRows;
    pool_.ParallelFor(groups, [&](int64_t begin, int64_t end, int) {
      PackGroups(w, begin, end, packed);
    });
  }

  // Runs fn(begin, end) over [0, n) rows of `row_cost` elements each, on the pool when the total
  // is worth it.
  template <typename Fn>
  void ForRows(int64_t n, int64_t row_cost, const Fn& fn) {
    if (n <= 0) return;
    if (n * row_cost < kMinParallelElements || pool_.n_threads() == 1) {
      fn(0, n);
      return;
    }
    pool_.ParallelFor(n, [&](int64_t begin, int64_t end, int) { fn(begin, end); });
  }

  // Quantizes x [n, n_cols] into the scratch buffers (or passes f32 through).
  MatMulActivations PrepareActivations(ActivationFormat format, const float* x, int64_t n,
                                       int64_t n_cols) {
    MatMulActivations a;
    if (format == ActivationFormat::kF32) {
      a.f32 = x;
      return a;
    }
    if (format == ActivationFormat::kBF16) {
      const int64_t row_values = Bf16RowValues(n_cols);
      x_bf16_.resize(static_cast<size_t>(n * row_values));
      ForRows(n, n_cols, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          kernels_.to_bf16_row(x + i * n_cols, n_cols, x_bf16_.data() + i * row_values);
        }
      });
      a.bf16 = x_bf16_.data();
      return a;
    }
    const int64_t ss = ActivationScaleStride(format, n_cols);
    a.scale_stride = ss;
    // Rows up to a multiple of 16 are readable (AMX tiles load 16 rows); the extra rows' scales
    // are zero, their values unspecified.
    const int64_t n_padded = (n + 15) / 16 * 16;
    x_qs_.resize(static_cast<size_t>(n_padded * n_cols));
    x_d_.resize(static_cast<size_t>(n_padded * ss));
    std::fill(x_d_.begin() + n * ss, x_d_.end(), 0.0f);
    int8_t* qs = x_qs_.data();
    float* d = x_d_.data();
    if (format == ActivationFormat::kQ8_1) {
      x_s_.resize(static_cast<size_t>(n * ss));
      float* s = x_s_.data();
      const int64_t nb = n_cols / kQ8_1BlockSize;
      x_block_sums_.resize(static_cast<size_t>(n * nb));
      int32_t* block_sums = x_block_sums_.data();
      ForRows(n, n_cols, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          kernels_.quantize_q8_1(x + i * n_cols, n_cols, qs + i * n_cols, d + i * ss, s + i * ss);
          Q8_1BlockSums(qs + i * n_cols, n_cols, block_sums + i * nb);
          std::fill(s + i * ss + nb, s + (i + 1) * ss, 0.0f);
          std::fill(d + i * ss + nb, d + (i + 1) * ss, 0.0f);
        }
        // The scales as GGML's block_q8_1 holds them: f16.
        const RoundToF16Fn round = kernels_.round_to_f16 != nullptr ? kernels_.round_to_f16
                                                                    : RoundToF16Scalar;
        round(d + begin * ss, (end - begin) * ss);
        round(s + begin * ss, (end - begin) * ss);
      });
      a.s = s;
      a.block_sums = block_sums;
    } else {
      const int64_t n_bsums = n_cols / 16;
      x_bsums_.resize(static_cast<size_t>(n * n_bsums));
      int16_t* bsums = x_bsums_.data();
      const int64_t nb = n_cols / kQ8_KBlockSize;
      ForRows(n, n_cols, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          kernels_.quantize_q8_k(x + i * n_cols, n_cols, qs + i * n_cols, d + i * ss,
                                 bsums + i * n_bsums);
          std::fill(d + i * ss + nb, d + (i + 1) * ss, 0.0f);
        }
      });
      a.bsums = bsums;
    }
    a.qs = qs;
    a.d = d;
    return a;
  }

  const IsaKernels& kernels_;
  ThreadPool pool_;
  // Scratch for quantized activations, grown as needed.
  std::vector<int8_t> x_qs_;
  std::vector<float> x_d_;
  std::vector<float> x_s_;
  std::vector<int32_t> x_block_sums_;
  std::vector<uint16_t> x_bf16_;
  std::vector<int16_t> x_bsums_;
  std::vector<float> attention_scratch_;  // partial results of attention segments
  WeightArena weight_arena_;  // the registered copies, on huge pages where the kernel gives them
  std::map<const void*, Registered> registered_;  // by w.data
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackendForIsa(const CpuBackendOptions& options, CpuIsa isa) {
  return std::make_unique<FastCpuBackend>(options, isa);
}

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options) {
  if (options.reference) return std::make_unique<ReferenceCpuBackend>();
  return std::make_unique<FastCpuBackend>(options, DetectCpuIsa());
}

}  // namespace baton::kernels
