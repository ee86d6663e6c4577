#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_matmul.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/host_copy_engine.cuh"
#include "kernels/cuda/index_pack.h"
#include "kernels/cuda/index_uploader.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace baton::kernels::cuda {
namespace {

int64_t MatrixBytes(const WeightMatrix& w) { return w.n_rows * RowBytes(w.dtype, w.n_cols); }

int32_t BlocksOf(const KvLayerView& kv) {
  return (kv.n_tokens + kv.block_size - 1) / kv.block_size;
}

KvLayout LayoutOf(const KvLayerView& kv) {
  return {.block_stride = kv.block_stride,
          .block_size = kv.block_size,
          .n_kv_head = kv.n_kv_head,
          .head_dim = kv.head_dim};
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
  CudaBackend(int device, std::string device_name, cudaStream_t stream)
      : device_(device),
        name_(absl::StrCat("cuda:", device, " (", device_name, ")")),
        stream_(stream),
        matmul_(stream),
        uploader_(stream),
        host_copies_(device, stream) {}

  ~CudaBackend() override {
    Activate();
    cudaStreamSynchronize(stream_);
    for (auto& [host, copy] : weights_) cudaFree(copy.device);
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
    BATON_CUDA_CHECK(
        cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    BATON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void CopyToHost(void* host_dst, const void* device_src, size_t bytes) override {
    Activate();
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
    return host_copies_.Queue(copies);
  }

  void CopyToDeviceUnordered(std::span<const HostCopy> copies) override {
    host_copies_.Upload(copies);
  }

  void Add(float* x, const float* y, int64_t n) override {
    Activate();
    LaunchAdd(x, y, n, stream_);
  }

  void AddRowBias(float* x, const float* bias, int64_t n_rows, int64_t dim) override {
    Activate();
    LaunchAddRowBias(x, bias, n_rows, dim, stream_);
  }

  void RoundToF16(float* x, int64_t n) override {
    Activate();
    LaunchRoundToF16(x, n, stream_);
  }

  void GatherRows(const float* x, const int64_t* rows, int64_t n, int64_t dim,
                  float* out) override {
    Activate();
    LaunchGatherRows(x, uploader_.Upload(rows, n), n, dim, out, stream_);
  }

  void MatMul(const WeightMatrix& w, const float* x, int64_t n, float* y) override {
    Activate();
    matmul_.Run(w.dtype, DeviceCopyOf(w), w.n_rows, w.n_cols, x, n, y);
  }

  bool RegisterWeights(const WeightMatrix& w) override {
    Activate();
    auto [it, inserted] = weights_.try_emplace(w.data);
    ++it->second.references;
    if (!inserted) return true;
    const size_t bytes = static_cast<size_t>(MatrixBytes(w));
    absl::StatusOr<void*> copy = Allocate(bytes);
    if (!copy.ok()) {
      // At load, before any request: the model does not fit this GPU beside what it holds.
      CudaFailed("RegisterWeights", std::string(copy.status().message()).c_str(), __FILE__,
                 __LINE__);
    }
    it->second.device = *copy;
    BATON_CUDA_CHECK(cudaMemcpy(it->second.device, w.data, bytes, cudaMemcpyHostToDevice));
    return true;
  }

  void ReleaseWeights(const WeightMatrix& w) override {
    Activate();
    auto it = weights_.find(w.data);
    if (it == weights_.end() || --it->second.references > 0) return;
    BATON_CUDA_CHECK(cudaFree(it->second.device));  // waits for the kernels that read it
    weights_.erase(it);
  }

  void GetRows(const WeightMatrix& w, const int32_t* ids, int64_t n, float* out) override {
    Activate();
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
    LaunchRmsNorm(x, weight, n, dim, eps, y, stream_);
  }

  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& params) override {
    Activate();
    const RopeLaunch rope{
        .n_dims = params.n_dims,
        .theta_scale =
            std::pow(params.freq_base, -2.0f / static_cast<float>(std::max(params.n_dims, 1))),
        .freq_scale = params.freq_scale,
        .neox = params.neox,
        .freq_factors = params.freq_factors,
    };
    LaunchRope(x, n, n_heads, head_dim, uploader_.Upload(positions, n), rope, stream_);
  }

  void SiluMul(const float* gate, const float* up, int64_t count, float* y) override {
    Activate();
    LaunchSiluMul(gate, up, count, y, stream_);
  }

  void WriteKv(const KvLayerView& kv, const int32_t* positions, int64_t n, const float* k,
               const float* v) override {
    Activate();
    pack_.Clear();
    const size_t table = pack_.Add(kv.block_table, BlocksOf(kv));
    const size_t rows = pack_.Add(positions, n);
    const void* base = uploader_.Upload(pack_);
    LaunchWriteKv(kv.k_base, kv.v_base, LayoutOf(kv), IndexPack::At<int32_t>(base, table),
                  IndexPack::At<int32_t>(base, rows), n, k, v, stream_);
  }

  void Attention(const float* q, const int32_t* q_positions, int64_t n_q, int32_t n_head,
                 const KvLayerView& kv, float scale, float* out) override {
    const AttentionQueries seq{
        .q = q, .q_positions = q_positions, .n_q = n_q, .kv = kv, .out = out};
    AttentionMany({&seq, 1}, n_head, scale);
  }

  void AttentionMany(std::span<const AttentionQueries> seqs, int32_t n_head,
                     float scale) override {
    Activate();
    if (seqs.empty()) return;
    const KvLayout layout = LayoutOf(seqs[0].kv);
    const bool tiled = TiledAttentionSupports(layout);
    attention_seqs_.clear();
    attention_tables_.clear();
    decode_queries_.clear();
    prefill_queries_.clear();
    prefill_tiles_.clear();
    for (size_t s = 0; s < seqs.size(); ++s) {
      const AttentionQueries& in = seqs[s];
      attention_seqs_.push_back({.q = in.q,
                                 .out = in.out,
                                 .k_base = in.kv.k_base,
                                 .v_base = in.kv.v_base,
                                 .table_begin = static_cast<int32_t>(attention_tables_.size())});
      attention_tables_.insert(attention_tables_.end(), in.kv.block_table,
                               in.kv.block_table + BlocksOf(in.kv));
      // A sequence of several queries (a prefill) goes to the tiled kernel, in tiles.
      const bool prefill = tiled && in.n_q > 1;
      std::vector<AttentionQuery>& queries = prefill ? prefill_queries_ : decode_queries_;
      for (int64_t i = 0; i < in.n_q; ++i) {
        if (prefill && i % kAttentionTileQueries == 0) {
          const int64_t count = std::min<int64_t>(kAttentionTileQueries, in.n_q - i);
          prefill_tiles_.push_back({.seq = static_cast<int32_t>(s),
                                    .first_query = static_cast<int32_t>(queries.size()),
                                    .count = static_cast<int32_t>(count)});
        }
        queries.push_back({.seq = static_cast<int32_t>(s),
                           .row = static_cast<int32_t>(i),
                           .position = in.q_positions[i]});
      }
    }
    pack_.Clear();
    const size_t at_seqs = pack_.Add(attention_seqs_.data(), attention_seqs_.size());
    const size_t at_tables = pack_.Add(attention_tables_.data(), attention_tables_.size());
    const size_t at_decode = pack_.Add(decode_queries_.data(), decode_queries_.size());
    const size_t at_tiles = pack_.Add(prefill_tiles_.data(), prefill_tiles_.size());
    const size_t at_prefill = pack_.Add(prefill_queries_.data(), prefill_queries_.size());
    const void* base = uploader_.Upload(pack_);
    const auto* device_seqs = IndexPack::At<AttentionSeq>(base, at_seqs);
    const auto* device_tables = IndexPack::At<int32_t>(base, at_tables);
    if (!decode_queries_.empty()) {
      LaunchAttention(device_seqs, IndexPack::At<AttentionQuery>(base, at_decode),
                      static_cast<int64_t>(decode_queries_.size()), device_tables, n_head, layout,
                      scale, stream_);
    }
    if (!prefill_tiles_.empty()) {
      LaunchTiledAttention(device_seqs, IndexPack::At<AttentionTile>(base, at_tiles),
                           static_cast<int64_t>(prefill_tiles_.size()),
                           IndexPack::At<AttentionQuery>(base, at_prefill), device_tables, n_head,
                           layout, scale, stream_);
    }
  }

 private:
  struct DeviceWeights {
    void* device = nullptr;
    int references = 0;
  };

  // The calling thread's current device is this backend's (memory calls come from any thread).
  void Activate() const { BATON_CUDA_CHECK(cudaSetDevice(device_)); }

  // The registered copy of w, or w uploaded now into scratch (an unregistered matrix).
  const void* DeviceCopyOf(const WeightMatrix& w) {
    auto it = weights_.find(w.data);
    if (it != weights_.end()) return it->second.device;
    const size_t bytes = static_cast<size_t>(MatrixBytes(w));
    void* scratch = unregistered_.Reserve(bytes);
    CopyToDevice(scratch, w.data, bytes);
    return scratch;
  }

  const int device_;
  const std::string name_;
  const OwnedStream stream_;  // before what enqueues on it, so destroyed after
  DeviceMatMul matmul_;
  IndexUploader uploader_;
  HostCopyEngine host_copies_;
  ScratchBuffer unregistered_;
  std::unordered_map<const void*, DeviceWeights> weights_;  // by the host matrix's address
  std::vector<float> rows_;                                 // GetRows' staging
  IndexPack pack_;                                          // an operation's index arrays
  std::vector<AttentionSeq> attention_seqs_;
  std::vector<int32_t> attention_tables_;
  std::vector<AttentionQuery> decode_queries_;   // one per block of the decode kernel
  std::vector<AttentionQuery> prefill_queries_;  // the tiles' queries, tile by tile
  std::vector<AttentionTile> prefill_tiles_;
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
  return std::unique_ptr<Backend>(new CudaBackend(options.device, prop.name, stream));
}

}  // namespace baton::kernels::cuda
