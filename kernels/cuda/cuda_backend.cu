#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/iquant_blocks.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_matmul.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/host_copy_engine.cuh"
#include "kernels/cuda/index_pack.h"
#include "kernels/cuda/index_uploader.cuh"
#include "kernels/cuda/product_variants.h"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/split_blocks.cuh"
#include "kernels/cuda/step_graphs.cuh"

namespace baton::kernels::cuda {
namespace {

int64_t MatrixBytes(const WeightMatrix& w) { return w.n_rows * RowBytes(w.dtype, w.n_cols); }

// w as the device multiplies it: an i-quant's or MXFP4's Q8_0 form (iquant_blocks.h), written
// into `rows`; w itself otherwise.
WeightMatrix AsMultiplied(const WeightMatrix& w, std::vector<uint8_t>& rows) {
  if (!IsIQuantOrMxfp4(w.dtype)) return w;
  rows.resize(static_cast<size_t>(w.n_rows * RowBytes(DType::kQ8_0, w.n_cols)));
  IQuantRowsToQ8_0(w.dtype, static_cast<const uint8_t*>(w.data), w.n_rows, w.n_cols, rows.data());
  return {.dtype = DType::kQ8_0, .n_rows = w.n_rows, .n_cols = w.n_cols, .data = rows.data()};
}

KvLayout LayoutOf(const KvLayerView& kv) {
  return {.block_stride = kv.block_stride,
          .block_size = kv.block_size,
          .n_kv_head = kv.n_kv_head,
          .head_dim = kv.head_dim,
          .window = kv.window};
}

// A stream, destroyed with its owner: declared before the members that enqueue on it, it goes
// after them.
class OwnedStream {
 public:
  explicit OwnedStream(cudaStream_t stream) : stream_(stream) {}
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() { cudaStreamDestroy(stream_); }
  operator cudaStream_t() const { return stream_; }  // NOLINT: used where a stream is

 private:
  cudaStream_t stream_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, std::string device_name, cudaStream_t stream,
              const CudaBackendOptions& options, std::vector<ProductChoice> product_table)
      : device_(device),
        exact_products_(options.exact_products),
        flash_attention_(options.flash_attention),
        name_(absl::StrCat("cuda:", device, " (", device_name, ")")),
        stream_(stream),
        product_table_(std::move(product_table)),
        matmul_(stream, product_table_),
        uploader_(stream),
        host_copies_(device, stream),
        steps_(stream, options.step_graphs) {}

  ~CudaBackend() override {
    Activate();
    cudaStreamSynchronize(stream_);
    for (auto& [host, copy] : weights_) cudaFree(const_cast<void*>(copy.matrix.data));
  }

  std::string name() const override { return name_; }
  bool host_memory() const override { return false; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    Activate();
    void* pointer = nullptr;
    const cudaError_t err = cudaMalloc(&pointer, std::max<size_t>(bytes, 1));
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear it: the device is still usable
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return absl::ResourceExhaustedError(absl::StrCat(
          name_, ": cannot allocate ", bytes, " bytes (", free_bytes, " of ", total_bytes,
          " free): ", cudaGetErrorString(err)));
    }
    return pointer;
  }

  void Free(void* pointer) override {
    Activate();
    BATON_CUDA_CHECK(cudaFree(pointer));
  }

  void CopyToDevice(void* device_dst, const void* host_src, size_t bytes) override {
    Activate();
    const StepExcluded excluded(*this, "CopyToDevice");
    BATON_CUDA_CHECK(
        cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    BATON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void CopyToHost(void* host_dst, const void* device_src, size_t bytes) override {
    Activate();
    const StepExcluded excluded(*this, "CopyToHost");
    BATON_CUDA_CHECK(
        cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
    BATON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    Activate();
    void* pointer = nullptr;
    const cudaError_t err = cudaHostAlloc(&pointer, std::max<size_t>(bytes, 1),
                                          cudaHostAllocDefault);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          name_, ": cannot allocate ", bytes, " bytes of page-locked host memory: ",
          cudaGetErrorString(err)));
    }
    return pointer;
  }

  void FreeHost(void* pointer) override {
    Activate();
    BATON_CUDA_CHECK(cudaFreeHost(pointer));
  }

  std::unique_ptr<CopyFence> CopyToHostAsync(std::span<const HostCopy> copies) override {
    Activate();
    const StepExcluded excluded(*this, "CopyToHostAsync");
    return host_copies_.Queue(copies);
  }

  void CopyToDeviceUnordered(std::span<const HostCopy> copies) override {
    host_copies_.Upload(copies);
  }

  void BeginStep(uint64_t shape, int64_t rows) override {
    Activate();
    step_lock_ = std::unique_lock(step_mutex_);
    step_thread_ = std::this_thread::get_id();
    // The stream is idle (the step's inputs were copied in with a wait): the index arrays start
    // over at the ring's start, where a replayed graph's copies read them.
    uploader_.Restart();
    // Up to kQuantizedMaxRows rows a step's products are this backend's own kernels; past that
    // they are cuBLAS's, which a step does not record.
    steps_.Begin(shape, /*record=*/rows <= kQuantizedMaxRows);
    uploader_.set_stage_only(!steps_.launching());
    uploader_.set_may_wrap(steps_.mode() == StepGraphs::Mode::kEager);
  }

  bool EndStep() override {
    Activate();
    const bool ran = steps_.End();
    uploader_.set_stage_only(false);
    uploader_.set_may_wrap(true);
    step_thread_ = std::thread::id();
    step_lock_.unlock();
    return ran;
  }

  void Add(float* x, const float* y, int64_t n) override {
    Activate();
    if (!steps_.Record(Op::kAdd, x, y, n)) return;
    LaunchAdd(x, y, n, stream_);
  }

  void Scale(float* x, float s, int64_t n) override {
    Activate();
    if (!steps_.Record(Op::kScale, x, s, n)) return;
    LaunchScale(x, s, n, stream_);
  }

  void AddRowBias(float* x, const float* bias, int64_t n_rows, int64_t dim) override {
    Activate();
    if (!steps_.Record(Op::kAddRowBias, x, bias, n_rows, dim)) return;
    LaunchAddRowBias(x, bias, n_rows, dim, stream_);
  }

  void RoundToF16(float* x, int64_t n) override {
    Activate();
    if (!steps_.Record(Op::kRoundToF16, x, n)) return;
    LaunchRoundToF16(x, n, stream_);
  }

  void GatherRows(const float* x, const int64_t* rows, int64_t n, int64_t dim,
                  float* out) override {
    Activate();
    const int64_t* device_rows = uploader_.Upload(rows, n);
    if (!steps_.Record(Op::kGatherRows, x, device_rows, n, dim, out)) return;
    LaunchGatherRows(x, device_rows, n, dim, out, stream_);
  }

  void CopyColumns(const float* x, int64_t x_stride, int64_t rows, int64_t width, float* y,
                   int64_t y_stride) override {
    Activate();
    if (!steps_.Record(Op::kCopyColumns, x, x_stride, rows, width, y, y_stride)) return;
    BATON_CUDA_CHECK(cudaMemcpy2DAsync(y, y_stride * sizeof(float), x, x_stride * sizeof(float),
                                       width * sizeof(float), rows, cudaMemcpyDeviceToDevice,
                                       stream_));
  }

  void WeightedSumOfRows(const float* x, const int64_t* rows, const float* weights, int64_t n,
                         int64_t k, int64_t dim, float* out) override {
    Activate();
    const int64_t* device_rows = uploader_.Upload(rows, n * k);
    const float* device_weights = uploader_.Upload(weights, n * k);
    if (!steps_.Record(Op::kWeightedSumOfRows, x, device_rows, device_weights, n, k, dim, out)) {
      return;
    }
    LaunchWeightedSumOfRows(x, device_rows, device_weights, n, k, dim, out, stream_);
  }

  void MatMul(const WeightMatrix& w, const float* x, int64_t n, float* y) override {
    Activate();
    const DeviceMatrix m = DeviceCopyOf(w);
    if (!steps_.Record(Op::kMatMul, m.data, x, n, y)) return;
    matmul_.Run(m, x, n, y);
  }

  void MatMulMany(std::span<const WeightMatrix* const> ws, const float* x, int64_t n,
                  std::span<float* const> ys) override {
    Activate();
    many_.clear();
    steps_.Record(Op::kMatMulMany, x, n, ws.size());
    for (size_t k = 0; k < ws.size(); ++k) {
      many_.push_back(DeviceCopyOf(*ws[k]));
      steps_.Record(many_.back().data, ys[k]);
    }
    if (!steps_.launching()) return;
    matmul_.RunMany(many_, x, n, ys);
  }

  bool RegisterWeights(const WeightMatrix& w) override {
    Activate();
    auto [it, inserted] = weights_.try_emplace(w.data);
    ++it->second.references;
    if (!inserted) return true;
    it->second.matrix = Upload(w);
    return true;
  }

  void ReleaseWeights(const WeightMatrix& w) override {
    Activate();
    auto it = weights_.find(w.data);
    if (it == weights_.end() || --it->second.references > 0) return;
    // cudaFree waits for the kernels that read it.
    BATON_CUDA_CHECK(cudaFree(const_cast<void*>(it->second.matrix.data)));
    weights_.erase(it);
  }

  void GetRows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out) override {
    Activate();
    if (steps_.mode() != StepGraphs::Mode::kOutside) {
      CudaFailed("GetRows", "called inside a step (it copies with a wait): before BeginStep",
                 __FILE__, __LINE__);
    }
    const int64_t row_bytes = RowBytes(w.dtype, w.n_cols);
    rows_.resize(static_cast<size_t>(n * w.n_cols));
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= w.n_rows) {
        CudaFailed("GetRows", "an id is out of range", __FILE__, __LINE__);
      }
      DequantizeRow(w.dtype, static_cast<const uint8_t*>(w.data) + ids[i] * row_bytes,
                    rows_.data() + i * w.n_cols, w.n_cols);
    }
    CopyToDevice(out, rows_.data(), rows_.size() * sizeof(float));
  }

  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override {
    Activate();
    if (!steps_.Record(Op::kRmsNorm, x, weight, n, dim, eps, y)) return;
    LaunchRmsNorm(x, weight, n, dim, eps, y, stream_);
  }

  void AddRmsNorm(float* x, const float* residual, const float* weight, int64_t n, int64_t dim,
                  float eps, float* out) override {
    Activate();
    if (!steps_.Record(Op::kAddRmsNorm, x, residual, weight, n, dim, eps, out)) return;
    LaunchAddRmsNorm(x, residual, weight, n, dim, eps, out, stream_);
  }

  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& params) override {
    Activate();
    RopeLaunch rope{
        .n_dims = params.n_dims,
        .theta_scale =
            std::pow(params.freq_base, -2.0f / static_cast<float>(std::max(params.n_dims, 1))),
        .freq_scale = params.freq_scale,
        .neox = params.neox,
        .freq_factors = params.freq_factors,
        .ext_factor = params.ext_factor,
        .mscale = RopeMagnitudeScale(params),
    };
    if (params.ext_factor != 0.0f) RopeYarnCorrDims(params, rope.corr_dims);
    const int32_t* device_positions = uploader_.Upload(positions, n);
    if (!steps_.Record(Op::kRope, x, n, n_heads, head_dim, device_positions, rope.n_dims,
                       rope.theta_scale, rope.freq_scale, rope.neox, rope.freq_factors,
                       rope.ext_factor, rope.mscale, rope.corr_dims[0], rope.corr_dims[1])) {
      return;
    }
    LaunchRope(x, n, n_heads, head_dim, device_positions, rope, stream_);
  }

  void SiluMul(const float* gate, const float* up, int64_t count, float* y) override {
    Activate();
    if (!steps_.Record(Op::kSiluMul, gate, up, count, y)) return;
    LaunchSiluMul(gate, up, count, y, stream_);
  }

  void GeluMul(const float* gate, const float* up, int64_t count, float* y) override {
    Activate();
    if (!steps_.Record(Op::kGeluMul, gate, up, count, y)) return;
    LaunchGeluMul(gate, up, count, y, stream_);
  }

  void SwigluOaiMul(const float* gate, const float* up, int64_t count, float* y) override {
    Activate();
    if (!steps_.Record(Op::kSwigluOaiMul, gate, up, count, y)) return;
    LaunchSwigluOaiMul(gate, up, count, y, stream_);
  }

  void WriteKv(const KvLayerView& kv, const int32_t* positions, int64_t n, const float* k,
               const float* v) override {
    Activate();
    pack_.Clear();
    const size_t table = pack_.Add(kv.block_table, BlocksOf(kv));
    const size_t rows = pack_.Add(positions, n);
    const void* base = uploader_.Upload(pack_);
    if (!steps_.Record(Op::kWriteKv, kv.k_base, kv.v_base, kv.block_stride, kv.block_size,
                       kv.n_kv_head, kv.head_dim, base, table, rows, n, k, v)) {
      return;
    }
    LaunchWriteKv(kv.k_base, kv.v_base, LayoutOf(kv), IndexPack::At<int32_t>(base, table),
                  IndexPack::At<int32_t>(base, rows), n, k, v, stream_);
  }

  void Attention(const float* q, const int32_t* q_positions, int64_t n_q, int32_t n_head,
                 const KvLayerView& kv, float scale, const float* sinks, float* out) override {
    const AttentionQueries seq{
        .q = q, .q_positions = q_positions, .n_q = n_q, .kv = kv, .out = out};
    AttentionMany({&seq, 1}, n_head, scale, sinks);
  }

  void AttentionMany(std::span<const AttentionQueries> seqs, int32_t n_head, float scale,
                     const float* sinks) override {
    Activate();
    if (seqs.empty()) return;
    const KvLayout layout = LayoutOf(seqs[0].kv);
    const bool flash = flash_attention_ && FlashAttentionSupports(layout);
    attention_batch_.Build(seqs, flash || TiledAttentionSupports(layout));
    const AttentionBatch& batch = attention_batch_;
    pack_.Clear();
    const size_t at_seqs = pack_.Add(batch.seqs.data(), batch.seqs.size());
    const size_t at_tables = pack_.Add(batch.tables.data(), batch.tables.size());
    const size_t at_decode = pack_.Add(batch.decode_queries.data(), batch.decode_queries.size());
    const size_t at_tiles = pack_.Add(batch.prefill_tiles.data(), batch.prefill_tiles.size());
    const size_t at_prefill =
        pack_.Add(batch.prefill_queries.data(), batch.prefill_queries.size());
    const void* base = uploader_.Upload(pack_);
    if (!steps_.Record(Op::kAttention, base, at_seqs, at_tables, at_decode, at_tiles, at_prefill,
                       batch.decode_queries.size(), batch.prefill_tiles.size(), n_head, scale,
                       sinks,
                       layout.block_stride, layout.block_size, layout.n_kv_head,
                       layout.head_dim, layout.window, batch.bases_16_byte_aligned)) {
      return;
    }
    const auto* device_seqs = IndexPack::At<AttentionSeq>(base, at_seqs);
    const auto* device_tables = IndexPack::At<int32_t>(base, at_tables);
    if (!batch.decode_queries.empty()) {
      LaunchAttention(device_seqs, IndexPack::At<AttentionQuery>(base, at_decode),
                      static_cast<int64_t>(batch.decode_queries.size()), device_tables, n_head,
                      layout, scale, sinks, batch.bases_16_byte_aligned, stream_);
    }
    if (!batch.prefill_tiles.empty()) {
      (flash ? LaunchFlashAttention : LaunchTiledAttention)(
          device_seqs, IndexPack::At<AttentionTile>(base, at_tiles),
          static_cast<int64_t>(batch.prefill_tiles.size()),
          IndexPack::At<AttentionQuery>(base, at_prefill), device_tables, n_head, layout, scale,
          sinks, stream_);
    }
  }

 private:
  struct DeviceWeights {
    DeviceMatrix matrix;
    int references = 0;
  };

  // The operations a step's fingerprint tells apart.
  enum class Op {
    kAdd, kAddRowBias, kRoundToF16, kGatherRows, kMatMul, kMatMulMany, kRmsNorm, kAddRmsNorm,
    kRope, kSiluMul, kWriteKv, kAttention, kScale, kGeluMul, kWeightedSumOfRows,
    kSwigluOaiMul, kCopyColumns
  };

  // The calling thread's current device is this backend's (memory calls come from any thread).
  void Activate() const { BATON_CUDA_CHECK(cudaSetDevice(device_)); }

  // Held by a memory call that queues on the compute stream: from another thread it waits for
  // the step being queued to end (its graph launched), so the copy is queued after the step,
  // never into its capture; from the step's own thread it is a mistake, said so.
  class StepExcluded {
   public:
    StepExcluded(CudaBackend& backend, const char* what)
        : lock_(backend.step_mutex_, std::defer_lock) {
      if (backend.step_thread_ == std::this_thread::get_id()) {
        CudaFailed(what, "called inside a step (it waits for the stream): after EndStep",
                   __FILE__, __LINE__);
      }
      lock_.lock();
    }

   private:
    std::unique_lock<std::mutex> lock_;
  };

  // The registered copy of w, or w uploaded now into scratch, as stored or, for an i-quant, in
  // its Q8_0 form (an unregistered matrix).
  DeviceMatrix DeviceCopyOf(const WeightMatrix& stored) {
    auto it = weights_.find(stored.data);
    if (it != weights_.end()) return it->second.matrix;
    const WeightMatrix w = AsMultiplied(stored, converted_);
    const size_t bytes = static_cast<size_t>(MatrixBytes(w));
    void* scratch = unregistered_.Reserve(bytes);
    CopyToDevice(scratch, w.data, bytes);
    return {.dtype = w.dtype, .data = scratch, .n_rows = w.n_rows, .n_cols = w.n_cols};
  }

  // A device copy of w that the caller frees: split where the decode products read it so, else
  // as stored. Ends the process when the GPU has not the memory (at load, before any request:
  // the model does not fit this GPU beside what it holds).
  DeviceMatrix Upload(const WeightMatrix& stored) {
    std::vector<uint8_t> converted;
    const WeightMatrix w = AsMultiplied(stored, converted);
    const std::optional<SplitGeometry> g = SplitGeometryOf(w.dtype);
    const bool split = !exact_products_ && g.has_value() && w.n_cols % g->block_values == 0;
    const size_t stored_bytes = static_cast<size_t>(MatrixBytes(w));
    const int64_t n_blocks = split ? w.n_rows * (w.n_cols / g->block_values) : 0;
    absl::StatusOr<void*> copy = Allocate(split ? SplitMatrixBytes(*g, n_blocks) : stored_bytes);
    if (!copy.ok()) {
      CudaFailed("RegisterWeights", std::string(copy.status().message()).c_str(), __FILE__,
                 __LINE__);
    }
    if (split) {
      void* staged = unregistered_.Reserve(stored_bytes);
      CopyToDevice(staged, w.data, stored_bytes);
      LaunchSplitBlocks(*g, static_cast<const uint8_t*>(staged), n_blocks,
                        static_cast<uint8_t*>(*copy), stream_);
      BATON_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } else {
      BATON_CUDA_CHECK(cudaMemcpy(*copy, w.data, stored_bytes, cudaMemcpyHostToDevice));
    }
    return {.dtype = w.dtype, .data = *copy, .n_rows = w.n_rows, .n_cols = w.n_cols,
            .split = split};
  }

  const int device_;
  const bool exact_products_;
  const bool flash_attention_;
  const std::string name_;
  const OwnedStream stream_;  // before what enqueues on it, so destroyed after
  const std::vector<ProductChoice> product_table_;  // matmul_ reads it
  DeviceMatMul matmul_;
  IndexUploader uploader_;
  HostCopyEngine host_copies_;
  StepGraphs steps_;
  std::mutex step_mutex_;                // held from BeginStep to EndStep
  std::unique_lock<std::mutex> step_lock_;
  std::atomic<std::thread::id> step_thread_;  // the thread inside a step, if any
  ScratchBuffer unregistered_;  // unregistered matrices, and matrices on their way to a split
  std::vector<uint8_t> converted_;  // an unregistered i-quant's Q8_0 form, on its way up
  std::vector<DeviceMatrix> many_;  // MatMulMany's matrices
  std::unordered_map<const void*, DeviceWeights> weights_;  // by the host matrix's address
  std::vector<float> rows_;                                 // GetRows' staging
  IndexPack pack_;                                          // an operation's index arrays
  AttentionBatch attention_batch_;                          // an attention call's arrays
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  if (absl::StatusOr<const CublasLibrary*> cublas = LoadCublas(); !cublas.ok()) {
    return cublas.status();
  }
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat(
        "no usable CUDA device: ", err != cudaSuccess ? cudaGetErrorString(err) : "none visible"));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", options.device,
                                                   " does not exist: ", count,
                                                   " visible (cuda:0..cuda:", count - 1, ")"));
  }
  cudaDeviceProp prop;
  if (const cudaError_t err = cudaGetDeviceProperties(&prop, options.device);
      err != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cuda:", options.device, ": ",
                                               cudaGetErrorString(err)));
  }
  BATON_CUDA_CHECK(cudaSetDevice(options.device));
  cudaStream_t stream = nullptr;
  BATON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::span<const ProductChoice> compiled = ProductTable();
  return std::unique_ptr<Backend>(new CudaBackend(
      options.device, prop.name, stream, options,
      options.product_table.value_or(
          std::vector<ProductChoice>(compiled.begin(), compiled.end()))));
}

}  // namespace baton::kernels::cuda
