#include "kernels/cuda/matvec_sweep.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_matmul.cuh"
#include "kernels/cuda/matvec_variants.h"
#include "kernels/cuda/quantized_matvec.cuh"
#include "kernels/cuda/split_blocks.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr int64_t kUniqueRows = 128;             // distinct rows; the matrix repeats them
constexpr size_t kRotatedBytes = size_t{256} << 20;  // copies of a matrix timed in turn
constexpr int kMaxCopies = 1024;
constexpr double kExactTolerance = 1e-4;  // the baseline's f32 products
constexpr double kGemmTolerance = 1e-2;   // its f16 GEMM, past 8 rows

// Device memory freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { BATON_CUDA_CHECK(cudaMalloc(&data_, bytes)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data_); }
  uint8_t* get() const { return static_cast<uint8_t*>(data_); }

 private:
  void* data_ = nullptr;
};

// A stream and two events, destroyed on scope exit.
struct Timer {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  Timer() {
    BATON_CUDA_CHECK(cudaStreamCreate(&stream));
    BATON_CUDA_CHECK(cudaEventCreate(&start));
    BATON_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
  }
  // Seconds per call of launch(copy) over `repeats` calls rotating through `copies`, after one
  // warm-up call.
  template <typename Launch>
  double Time(int repeats, int copies, const Launch& launch) {
    launch(0);
    BATON_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < repeats; ++r) launch(r % copies);
    BATON_CUDA_CHECK(cudaEventRecord(stop, stream));
    BATON_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    BATON_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms / 1e3 / repeats;
  }
};

// One type and shape on the device: the stored and split copies, x, y and the reference.
class SweepCase {
 public:
  SweepCase(DType dtype, const MatVecSweepShape& shape, uint64_t seed)
      : dtype_(dtype), shape_(shape), geometry_(*SplitGeometryOf(dtype)) {
    const int64_t row_bytes = RowBytes(dtype, shape.n_cols);
    const int64_t unique = std::min(shape.n_rows, kUniqueRows);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<uint8_t> rows(static_cast<size_t>(unique * row_bytes));
    std::vector<float> values(static_cast<size_t>(shape.n_cols));
    for (int64_t r = 0; r < unique; ++r) {
      for (float& v : values) v = normal(rng);
      QuantizeRow(dtype, values.data(), shape.n_cols, rows.data() + r * row_bytes);
    }
    x_.resize(static_cast<size_t>(kQuantizedMaxRows * shape.n_cols));
    for (float& v : x_) v = uniform(rng);
    reference_.resize(static_cast<size_t>(kQuantizedMaxRows * unique));
    const WeightMatrix sample{.dtype = dtype, .n_rows = unique, .n_cols = shape.n_cols,
                              .data = rows.data()};
    CreateCpuBackend({.reference = true})
        ->MatMul(sample, x_.data(), kQuantizedMaxRows, reference_.data());
    unique_rows_ = unique;

    stored_bytes_ = static_cast<size_t>(shape.n_rows * row_bytes);
    n_blocks_ = shape.n_rows * (shape.n_cols / geometry_.block_values);
    split_bytes_ = (SplitMatrixBytes(geometry_, n_blocks_) + 255) / 256 * 256;
    stored_bytes_ = (stored_bytes_ + 255) / 256 * 256;
    copies_ = static_cast<int>(std::clamp<size_t>((kRotatedBytes + split_bytes_ - 1) /
                                                      split_bytes_, 1, kMaxCopies));
    stored_ = std::make_unique<DeviceBuffer>(stored_bytes_ * copies_);
    split_ = std::make_unique<DeviceBuffer>(split_bytes_ * copies_);
    std::vector<uint8_t> full(static_cast<size_t>(shape.n_rows * row_bytes));
    for (int64_t r = 0; r < shape.n_rows; ++r) {
      std::memcpy(full.data() + r * row_bytes, rows.data() + (r % unique) * row_bytes,
                  row_bytes);
    }
    BATON_CUDA_CHECK(cudaMemcpy(stored_->get(), full.data(), full.size(), cudaMemcpyHostToDevice));
    LaunchSplitBlocks(geometry_, stored_->get(), n_blocks_, split_->get(), nullptr);
    for (int c = 1; c < copies_; ++c) {
      BATON_CUDA_CHECK(cudaMemcpy(stored_->get() + c * stored_bytes_, stored_->get(),
                                  stored_bytes_, cudaMemcpyDeviceToDevice));
      BATON_CUDA_CHECK(cudaMemcpy(split_->get() + c * split_bytes_, split_->get(), split_bytes_,
                                  cudaMemcpyDeviceToDevice));
    }
    x_device_ = std::make_unique<DeviceBuffer>(x_.size() * sizeof(float));
    BATON_CUDA_CHECK(cudaMemcpy(x_device_->get(), x_.data(), x_.size() * sizeof(float),
                                cudaMemcpyHostToDevice));
    y_device_ = std::make_unique<DeviceBuffer>(
        static_cast<size_t>(kQuantizedMaxRows * shape.n_rows) * sizeof(float));
    q8_ = std::make_unique<DeviceBuffer>(Q8RowsBytes(kQuantizedMaxRows, shape.n_cols));
    BATON_CUDA_CHECK(cudaDeviceSynchronize());
  }

  MatVecMeasurement Measure(int variant, int64_t n, int repeats, double tolerance, Timer& t,
                            DeviceMatMul& matmul) {
    const float* x = reinterpret_cast<const float*>(x_device_->get());
    auto* y = reinterpret_cast<float*>(y_device_->get());
    MatVecMeasurement m{.shape = shape_.name, .dtype = dtype_, .n_rows = shape_.n_rows,
                        .n_cols = shape_.n_cols, .n = n, .variant = variant};
    if (variant == kBaselineVariant) {
      auto launch = [&](int copy) {
        const DeviceMatrix w{.dtype = dtype_, .data = stored_->get() + copy * stored_bytes_,
                             .n_rows = shape_.n_rows, .n_cols = shape_.n_cols};
        matmul.Run(w, x, n, y);
      };
      launch(0);
      m.max_error = ErrorOf(n, t.stream);
      m.tolerance = n <= kGemvMaxRows ? kExactTolerance : kGemmTolerance;
      m.seconds = t.Time(repeats, copies_, launch);
      return m;
    }
    const Q8Rows xq = LaunchQuantizeActivations(x, n, shape_.n_cols, q8_->get(), t.stream);
    auto launch = [&](int copy) {
      LaunchQuantizedMatVec(dtype_, variant, split_->get() + copy * split_bytes_, shape_.n_rows,
                            shape_.n_cols, xq, n, y, t.stream);
    };
    launch(0);
    m.max_error = ErrorOf(n, t.stream);
    m.tolerance = tolerance;
    m.seconds = t.Time(repeats, copies_, launch);
    return m;
  }

 private:
  // max |y - reference| / rms(reference) over y's n rows.
  double ErrorOf(int64_t n, cudaStream_t stream) {
    std::vector<float> y(static_cast<size_t>(n * shape_.n_rows));
    BATON_CUDA_CHECK(cudaStreamSynchronize(stream));
    BATON_CUDA_CHECK(cudaMemcpy(y.data(), y_device_->get(), y.size() * sizeof(float),
                                cudaMemcpyDeviceToHost));
    double max_error = 0.0, squares = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < shape_.n_rows; ++r) {
        const double want = reference_[i * unique_rows_ + r % unique_rows_];
        const double got = y[i * shape_.n_rows + r];
        const double error = std::fabs(got - want);
        max_error = std::isnan(error) ? INFINITY : std::max(max_error, error);
        squares += want * want;
      }
    }
    return max_error / std::sqrt(squares / static_cast<double>(n * shape_.n_rows) + 1e-30);
  }

  const DType dtype_;
  const MatVecSweepShape shape_;
  const SplitGeometry geometry_;
  std::vector<float> x_;          // [kQuantizedMaxRows, n_cols]
  std::vector<float> reference_;  // [kQuantizedMaxRows, unique_rows_]
  int64_t unique_rows_ = 0;
  int64_t n_blocks_ = 0;
  size_t stored_bytes_ = 0, split_bytes_ = 0;
  int copies_ = 1;
  std::unique_ptr<DeviceBuffer> stored_, split_, x_device_, y_device_, q8_;
};

}  // namespace

std::vector<MatVecSweepShape> Llama3_8bMatVecShapes() {
  return {{"llama-3-8b attn_q/attn_output", 4096, 4096},
          {"llama-3-8b attn_k/attn_v", 1024, 4096},
          {"llama-3-8b ffn_gate/ffn_up", 14336, 4096},
          {"llama-3-8b ffn_down", 4096, 14336},
          {"llama-3-8b output", 128256, 4096}};
}

std::vector<MatVecSweepShape> SmolLm2MatVecShapes() {
  return {{"smollm2-135m attn_q/attn_output", 576, 576},
          {"smollm2-135m attn_k/attn_v", 192, 576},
          {"smollm2-135m ffn_gate/ffn_up", 1536, 576},
          {"smollm2-135m ffn_down", 576, 1536},
          {"smollm2-135m output", 49152, 576}};
}

absl::StatusOr<std::vector<MatVecMeasurement>> RunMatVecSweep(const MatVecSweepOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || options.device >= count) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no CUDA device ", options.device));
  }
  BATON_CUDA_CHECK(cudaSetDevice(options.device));
  for (const int64_t n : options.batch_rows) {
    if (n < 1 || n > kQuantizedMaxRows) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch rows must be in [1, ", kQuantizedMaxRows, "], got ", n));
    }
  }
  Timer timer;
  DeviceMatMul matmul(timer.stream);
  std::vector<MatVecMeasurement> measured;
  uint64_t seed = 1;
  for (const DType dtype : options.dtypes) {
    if (!HasQuantizedMatVec(dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("no quantized matrix-vector kernel for ", std::string(DTypeName(dtype))));
    }
    for (const MatVecSweepShape& shape : options.shapes) {
      if (shape.n_cols % Traits(dtype).block_size != 0) continue;
      SweepCase c(dtype, shape, seed++);
      for (const int64_t n : options.batch_rows) {
        measured.push_back(
            c.Measure(kBaselineVariant, n, options.repeats, 0.0, timer, matmul));
        for (int v = 0; v < static_cast<int>(kMatVecVariants.size()); ++v) {
          measured.push_back(c.Measure(v, n, options.repeats, options.tolerance, timer, matmul));
        }
      }
    }
  }
  return measured;
}

}  // namespace baton::kernels::cuda
