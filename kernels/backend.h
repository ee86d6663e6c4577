// The kernel interface: the operations the decoders' forward passes need, implemented by the
// CPU backend (kernels/cpu/) and the CUDA backend (kernels/cuda/). Knows nothing of models.
//
// Conventions: activations are f32, row-major; "[a, b]" means a rows of b contiguous values.
// Weight matrices are [n_rows, n_cols] in any dtype whose rows are stored contiguously.
// Memory: activations, f32 vectors (norm weights, biases) and the KV cache's blocks live in memory
// the backend computes on, which Allocate hands out (any host memory, for the CPU backend:
// host_memory() is true); CopyToDevice / CopyToHost move bytes in and out. Weight matrices are
// host memory, of which a backend may keep its own copy (RegisterWeights). Index arrays (token
// ids, positions, block tables) are host memory; a device backend uploads them itself.
// The CPU backend's operations are batch-invariant: the result for one row of x is bitwise the
// same whatever the other rows are and however many there are (same reduction order per row).
// The CUDA backend's agree with them within rounding and are not (kernels/cuda/cuda_backend.h).
//
// Thread-safety: a Backend's operations are used by one thread at a time (it owns a thread pool
// that it uses internally); create one per worker loop. Its memory calls (Allocate, Free,
// AllocateHost, FreeHost, CopyToDevice, CopyToHost, CopyToDeviceUnordered) may come from any
// thread, as the KV hand-off's do.
#ifndef BATON_KERNELS_BACKEND_H_
#define BATON_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/host_copy.h"
#include "kernels/kv_block_layout.h"

namespace baton::kernels {

// W [n_rows, n_cols] in `dtype`; n_cols is a multiple of the dtype's block size.
struct WeightMatrix {
  DType dtype = DType::kF32;
  int64_t n_rows = 0;  // output features
  int64_t n_cols = 0;  // input features
  const void* data = nullptr;
};

struct RopeParams {
  int32_t n_dims = 0;          // leading dims of each head that rotate (rope.dimension_count)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;     // 1 / linear scaling factor
  bool neox = false;           // NeoX style rotates (i, i + n_dims/2); normal style (2i, 2i+1)
  const float* freq_factors = nullptr;  // [n_dims / 2] or null (Llama 3 rope scaling)
  // YaRN (rope.scaling.type yarn), GGML's rope_yarn: where ext_factor != 0, pair i's angle mixes
  // the scaled angle (freq_scale * theta) and the unscaled one by ramp(i) * ext_factor, the ramp
  // 1 below the pairs RopeYarnCorrDims gives and 0 above them, and cos and sin are multiplied by
  // attn_factor * (1 + 0.1 ln(1 / freq_scale)). With ext_factor 0, by attn_factor alone.
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;  // the ramp's ends, in rotations over n_ctx_orig positions
  float beta_slow = 1.0f;
  int32_t n_ctx_orig = 0;   // the context the model was trained at before scaling
  // The ramp's ends rounded outward to whole pairs (GGML's, and transformers' default); false:
  // where they fall (transformers' `truncate: false`, gpt-oss's).
  bool truncate = true;
};

// YaRN's correction dims (GGML's ggml_rope_yarn_corr_dims): the pair indices [dims[0], dims[1]]
// over which the ramp falls from 1 to 0 (rounded outward where params.truncate).
void RopeYarnCorrDims(const RopeParams& params, float dims[2]);
// The factor of cos and sin: attn_factor, times 1 + 0.1 ln(1 / freq_scale) where ext_factor != 0.
float RopeMagnitudeScale(const RopeParams& params);

// One layer of one sequence's paged KV cache, in the backend's memory (Attention reads it, WriteKv
// writes it). Block b (a physical block id from block_table) holds K at k_base + b * block_stride
// and V at v_base + b * block_stride, each f16 [n_kv_head, block_size, head_dim]
// (kv_block_layout.h). Token t of the sequence is slot t % block_size of block
// block_table[t / block_size] (block_table in host memory).
struct KvLayerView {
  uint16_t* k_base = nullptr;
  uint16_t* v_base = nullptr;
  int64_t block_stride = 0;  // elements
  const int32_t* block_table = nullptr;
  int32_t n_tokens = 0;      // tokens of the sequence present in the cache
  int32_t block_size = 0;
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  // Sliding-window attention (a local layer): > 0, the query at position p sees only the cached
  // tokens (p - window, p] (llama.cpp's standard window: p - t < window); 0, all of 0..p.
  int32_t window = 0;

  // The first cached token the query at position p sees.
  int32_t FirstVisible(int32_t p) const { return FirstVisibleToken(window, p); }

  // Elements from k_base (or v_base) to the row of token t, kv head kv_h.
  int64_t RowOffset(int32_t t, int32_t kv_h) const {
    return block_table[t / block_size] * block_stride +
           KvRowInBlock(t % block_size, kv_h, block_size, head_dim);
  }

  // RowOffset of tokens [t0, t0 + count) into out[0..count), walking the blocks (one division).
  void RowOffsets(int32_t t0, int32_t count, int32_t kv_h, int64_t* out) const {
    if (count <= 0) return;
    const int64_t row_stride = KvRowInBlock(1, kv_h, block_size, head_dim) -
                               KvRowInBlock(0, kv_h, block_size, head_dim);
    int32_t block = t0 / block_size;
    int32_t in_block = t0 % block_size;
    int64_t row = RowOffset(t0, kv_h);
    for (int32_t c = 0;;) {
      out[c] = row;
      if (++c == count) return;
      if (++in_block < block_size) {
        row += row_stride;
      } else {
        in_block = 0;
        row = block_table[++block] * block_stride + KvRowInBlock(0, kv_h, block_size, head_dim);
      }
    }
  }
};

// One sequence's queries for Backend::AttentionMany: Attention's arguments but n_head, scale and
// sinks.
struct AttentionQueries {
  const float* q = nullptr;
  const int32_t* q_positions = nullptr;
  int64_t n_q = 0;
  KvLayerView kv;
  float* out = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- Memory ----

  // Whether this backend computes on host memory, so that any host pointer is an operand.
  virtual bool host_memory() const = 0;
  // `bytes` of memory on the backend's device, 64-byte aligned, contents undefined, until
  // Free(pointer). RESOURCE_EXHAUSTED naming the size when the device has not that much.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* pointer) = 0;
  // Bytes from host memory to the backend's memory, and back; both complete before returning.
  virtual void CopyToDevice(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* device_src, size_t bytes) = 0;

  // ---- Copies beside the computation (the KV hand-off) ----

  // `bytes` of host memory that this backend copies to at full speed (page-locked, for a GPU),
  // 64-byte aligned, until FreeHost(pointer). RESOURCE_EXHAUSTED naming the size when there is
  // not that much. Default: ordinary host memory.
  virtual absl::StatusOr<void*> AllocateHost(size_t bytes);
  virtual void FreeHost(void* pointer);

  // Queues `copies` (this backend's memory to host memory) to start once every operation queued
  // before the call has completed, without holding up the operations queued after it (a GPU
  // copies on a stream of its own while it computes). Sources and destinations must stay valid,
  // and the sources unchanged, until the fence has passed or is destroyed. Called from the
  // thread that queues the operations. With no copies, the fence passes once the operations
  // queued before the call have completed. Default: the copies made at once, a fence already
  // passed.
  virtual std::unique_ptr<CopyFence> CopyToHostAsync(std::span<const HostCopy> copies);

  // Copies host memory into this backend's memory without being ordered after the operations
  // queued, so without waiting for them: none of them may read or write the destinations (KV
  // blocks of a reservation that no sequence uses yet). Complete on return; any thread. Default:
  // CopyToDevice one after the other.
  virtual void CopyToDeviceUnordered(std::span<const HostCopy> copies);

  // ---- Host work between forward passes ----

  // Runs fn(begin, end, thread) over a split of [0, n_tasks) into ranges on the host threads
  // this backend owns (the CPU backend's pool), returning once every range is done; `thread` is
  // the index of the thread running the call, below host_threads() and unique among concurrent
  // calls, so it can index per-thread scratch (one thread may run several ranges in turn). For
  // work on the forward pass's results that each row does alone (sampling a decode step's
  // sequences); from the thread that queues the operations, never from inside fn. Default: one
  // range, on the calling thread.
  virtual int host_threads() const { return 1; }
  virtual void ParallelForOnHost(
      int64_t n_tasks, absl::FunctionRef<void(int64_t begin, int64_t end, int thread)> fn) {
    if (n_tasks > 0) fn(0, n_tasks, 0);
  }

  // ---- Steps ----
  // Bracket the operations of one forward pass, after its inputs are in the backend's memory
  // (GetRows) and before its results are read (CopyToHost), neither of which may come between.
  // `shape` names the step's structure (its row counts and block tables' lengths), `rows` the
  // activation rows its products take (a backend may record only small steps): a backend may
  // record a step's operations once and replay the record for later steps of the same shape (a
  // CUDA graph), staging only their index arrays. EndStep returns false when the operations did
  // not run (a replay the backend refused): the caller queues them again, eagerly. Memory calls
  // from other threads that queue on the operations' stream wait for EndStep. Default: nothing,
  // true.
  virtual void BeginStep(uint64_t shape, int64_t rows) {
    (void)shape;
    (void)rows;
  }
  virtual bool EndStep() { return true; }
  // ---- Element-wise operations between the layers' products ----

  // x [n] += y [n]
  virtual void Add(float* x, const float* y, int64_t n) = 0;
  // x [n] *= s (Gemma's embedding scale, a query scale applied before the attention).
  virtual void Scale(float* x, float s, int64_t n) = 0;
  // x [n_rows, dim] += bias [dim], row by row.
  virtual void AddRowBias(float* x, const float* bias, int64_t n_rows, int64_t dim) = 0;
  // x [n] rounded to f16's precision (ties to even), kept as f32: the nearest f16 value of each
  // finite x within f16's range, with f16's spacing below its normal range too; past f16's
  // range a value keeps its exponent rather than becoming infinite; -0 becomes +0. (The
  // attention's product with the f16 K cache takes the queries so, as GGML converts them.)
  virtual void RoundToF16(float* x, int64_t n) = 0;
  // out [n, dim] = x's rows rows[0..n), in that order (rows in host memory); out does not
  // overlap x.
  virtual void GatherRows(const float* x, const int64_t* rows, int64_t n, int64_t dim,
                          float* out) = 0;
  // For each r < rows: y[r * y_stride + c] = x[r * x_stride + c], c < width (a column band of a
  // row-major matrix into another's; e.g. one head's slice of each token's heads). y does not
  // overlap x.
  virtual void CopyColumns(const float* x, int64_t x_stride, int64_t rows, int64_t width,
                           float* y, int64_t y_stride) = 0;
  // out [n, dim]: row i = sum over j < k, in j order, of weights[i * k + j] * x's row
  // rows[i * k + j] (each product rounded, then added: acc = w0 x0, acc = acc + w1 x1, ...), as
  // GGML sums a mixture of experts' outputs. rows and weights [n * k] in host memory; out does not
  // overlap x.
  virtual void WeightedSumOfRows(const float* x, const int64_t* rows, const float* weights,
                                 int64_t n, int64_t k, int64_t dim, float* out) = 0;

  // ---- The layers' operations ----

  // y [n, w.n_rows] = x [n, w.n_cols] · Wᵀ
  virtual void MatMul(const WeightMatrix& w, const float* x, int64_t n, float* y) = 0;

  // MatMul(*ws[k], x, n, ys[k]) for every k (the same x, e.g. the Q, K and V projections), with
  // the same results; a backend may share the work of preparing x and run the products as one
  // parallel job. Default: one MatMul after the other.
  virtual void MatMulMany(std::span<const WeightMatrix* const> ws, const float* x, int64_t n,
                          std::span<float* const> ys) {
    for (size_t k = 0; k < ws.size(); ++k) MatMul(*ws[k], x, n, ys[k]);
  }

  // Declares that w (a model's weight matrix) will be multiplied many times: the backend may keep
  // a re-laid-out copy of it for faster MatMuls (the CPU backend does for Q4_0..Q8_0, Q2_K..Q6_K,
  // F32 / F16 / BF16 rows of whole cache lines, and the i-quants and MXFP4 in their Q8_0 form,
  // kernels/cpu/iquant_blocks.h). The results of MatMul do not depend on
  // registration. w.data must stay valid and unchanged until as many ReleaseWeights(w) calls as
  // RegisterWeights(w) calls. Returns true when the backend keeps its own copy: its MatMuls read
  // w.data no more (GetRows still may), so the owner of w.data may let its pages go from memory.
  // A matrix is known by its address and shape: another at the address of a registered one
  // (fewer rows of it) may get no copy. Default: nothing, false.
  virtual bool RegisterWeights(const WeightMatrix& w) {
    (void)w;
    return false;
  }
  virtual void ReleaseWeights(const WeightMatrix& w) { (void)w; }

  // out [n, w.n_cols] = rows ids[0..n) of W, dequantized (embedding lookup). ids must be in range.
  virtual void GetRows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out) = 0;

  // y [n, dim] = x / sqrt(mean(x²) + eps) * weight [dim], per row. y may alias x.
  virtual void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                       float* y) = 0;
  // x [n, dim] += residual [n, dim], then out = RmsNorm(x, weight): a residual connection and the
  // norm that follows it, which a backend may do in one pass. out may alias residual. Default:
  // Add, then RmsNorm (the same values).
  virtual void AddRmsNorm(float* x, const float* residual, const float* weight, int64_t n,
                          int64_t dim, float eps, float* out) {
    Add(x, residual, n * dim);
    RmsNorm(x, weight, n, dim, eps, out);
  }

  // Rotates x [n, n_heads, head_dim] in place; positions [n].
  virtual void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                    const int32_t* positions, const RopeParams& params) = 0;

  // y [count] = silu(gate) * up. y may alias gate.
  virtual void SiluMul(const float* gate, const float* up, int64_t count, float* y) = 0;
  // y [count] = swiglu_oai(gate, up) (gpt-oss): with g = min(gate, 7) and u = clamp(up, -7, 7),
  // g * sigmoid(1.702 g) * (u + 1), in f32 as GGML's swiglu_oai. y may alias gate.
  virtual void SwigluOaiMul(const float* gate, const float* up, int64_t count, float* y) = 0;
  // y [count] = gelu(gate) * up, GELU's tanh approximation as GGML's CPU computes it: gate
  // rounded to f16, its GELU rounded to f16 (a table of the f16 values), gate <= -10 giving 0 and
  // gate >= 10 gate itself. y may alias gate.
  virtual void GeluMul(const float* gate, const float* up, int64_t count, float* y) = 0;

  // Stores the K and V rows [n, n_kv_head * head_dim] (f32, rounded to f16) of the sequence's
  // tokens at positions[0..n) (host memory) in their slots of kv. Each position must be below
  // kv.n_tokens, whose blocks kv's block table holds (as for Attention).
  virtual void WriteKv(const KvLayerView& kv, const int32_t* positions, int64_t n, const float* k,
                       const float* v) = 0;

  // Causal attention of n_q query tokens of one sequence over its cached K/V:
  // out [n_q, n_head, head_dim] where query i (at position q_positions[i]) attends to the cached
  // tokens kv.FirstVisible(q_positions[i])..q_positions[i] (all must be < kv.n_tokens).
  // q [n_q, n_head, head_dim]; n_head a multiple of kv.n_kv_head (grouped-query attention).
  // scale is usually 1/sqrt(head_dim). sinks: null, or [n_head] in the backend's memory, each
  // head's learned logit that joins its softmax's denominator and adds no value (gpt-oss's
  // attention sinks): out = sum_t exp(s_t) v_t / (exp(sink) + sum_t exp(s_t)).
  virtual void Attention(const float* q, const int32_t* q_positions, int64_t n_q, int32_t n_head,
                         const KvLayerView& kv, float scale, const float* sinks,
                         float* out) = 0;

  // Attention(s.q, s.q_positions, s.n_q, n_head, s.kv, scale, sinks, s.out) for every s of seqs
  // (the sequences of a decode batch, each over its own cache), with the same results bit for
  // bit; a backend may run them as one parallel job. Default: one Attention after the other.
  virtual void AttentionMany(std::span<const AttentionQueries> seqs, int32_t n_head, float scale,
                             const float* sinks) {
    for (const AttentionQueries& s : seqs) {
      Attention(s.q, s.q_positions, s.n_q, n_head, s.kv, scale, sinks, s.out);
    }
  }
};

struct CpuBackendOptions {
  int n_threads = 0;        // 0: all cores of the process's CPU affinity mask
  bool reference = false;   // true: the plain scalar reference kernels (for tests)
};

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_BACKEND_H_
