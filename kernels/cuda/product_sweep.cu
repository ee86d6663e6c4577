#include "kernels/cuda/product_sweep.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_matmul.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/product_variants.h"
#include "kernels/cuda/quantized_matmul.cuh"
#include "kernels/cuda/quantized_matvec.cuh"
#include "kernels/cuda/split_blocks.cuh"

namespace baton::kernels::cuda {
namespace {

constexpr int64_t kUniqueRows = 128;             // distinct rows; the matrix repeats them
constexpr int64_t kUniqueTokens = 8;             // distinct rows of x; x repeats them
constexpr int64_t kCheckedTokens = 64;           // y's first and last rows compared
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

// One type and shape on the device: the stored and split copies (and the f16 one past 8 rows),
// x for up to max_n rows (kUniqueTokens distinct rows repeated), y and the reference.
class SweepCase {
 public:
  SweepCase(DType dtype, const ProductSweepShape& shape, int64_t max_n, uint64_t seed)
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
    std::vector<float> x(static_cast<size_t>(kUniqueTokens * shape.n_cols));
    for (float& v : x) v = uniform(rng);
    reference_.resize(static_cast<size_t>(kUniqueTokens * unique));
    const WeightMatrix sample{.dtype = dtype, .n_rows = unique, .n_cols = shape.n_cols,
                              .data = rows.data()};
    CreateCpuBackend({.reference = true})
        ->MatMul(sample, x.data(), kUniqueTokens, reference_.data());
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
    if (max_n > kQuantizedMaxRows) {
      weights_f16_ = std::make_unique<DeviceBuffer>(
          static_cast<size_t>(shape.n_rows * shape.n_cols) * sizeof(uint16_t));
      LaunchDequantizeToF16(dtype, stored_->get(), shape.n_rows, shape.n_cols,
                            reinterpret_cast<uint16_t*>(weights_f16_->get()), nullptr);
      x_f16_ = std::make_unique<DeviceBuffer>(
          static_cast<size_t>(max_n * shape.n_cols) * sizeof(uint16_t));
    }
    UploadRepeated(x, max_n);
    y_device_ = std::make_unique<DeviceBuffer>(
        static_cast<size_t>(max_n * shape.n_rows) * sizeof(float));
    q8_ = std::make_unique<DeviceBuffer>(Q8RowsBytes(max_n, shape.n_cols));
    BATON_CUDA_CHECK(cudaDeviceSynchronize());
  }

  ProductMeasurement Measure(int variant, int64_t n, int repeats, double tolerance, Timer& t,
                             DeviceMatMul& exact_or_f16) {
    const float* x = reinterpret_cast<const float*>(x_device_->get());
    auto* y = reinterpret_cast<float*>(y_device_->get());
    ProductMeasurement m{.shape = shape_.name, .dtype = dtype_, .n_rows = shape_.n_rows,
                         .n_cols = shape_.n_cols, .n = n, .variant = variant};
    std::function<void(int)> launch;
    if (variant == kBaselineVariant) {  // the exact kernel on the stored blocks
      m.tolerance = kExactTolerance;
      launch = [&](int copy) {
        exact_or_f16.Run({.dtype = dtype_, .data = stored_->get() + copy * stored_bytes_,
                          .n_rows = shape_.n_rows, .n_cols = shape_.n_cols},
                         x, n, y);
      };
    } else if (variant == kF16GemmVariant) {  // dequantize the split matrix, then cuBLAS
      m.tolerance = kGemmTolerance;
      launch = [&](int copy) {
        exact_or_f16.Run({.dtype = dtype_, .data = split_->get() + copy * split_bytes_,
                          .n_rows = shape_.n_rows, .n_cols = shape_.n_cols, .split = true},
                         x, n, y);
      };
    } else if (variant == kCublasAloneVariant) {  // f16 weights ready, x converted beforehand
      m.tolerance = kGemmTolerance;
      auto* x16 = reinterpret_cast<uint16_t*>(x_f16_->get());
      LaunchF32ToF16(x, n * shape_.n_cols, x16, t.stream);
      launch = [&, x16](int) {
        BATON_CUBLAS_CHECK(GemmWithWeightRows(exact_or_f16.cublas(), CUDA_R_16F,
                                              weights_f16_->get(), x16, y, shape_.n_rows,
                                              shape_.n_cols, n));
      };
    } else {  // a quantized variant, x's quantization included
      m.tolerance = tolerance;
      launch = [&](int copy) {
        const Q8Rows xq = LaunchQuantizeActivations(x, n, shape_.n_cols, q8_->get(), t.stream);
        const void* w = split_->get() + copy * split_bytes_;
        if (n <= kQuantizedMaxRows) {
          LaunchQuantizedMatVec(dtype_, variant, w, shape_.n_rows, shape_.n_cols, xq, n, y,
                                t.stream);
        } else {
          LaunchQuantizedMatMul(dtype_, variant, w, shape_.n_rows, shape_.n_cols, xq, n, y,
                                t.stream);
        }
      };
    }
    BATON_CUDA_CHECK(cudaMemsetAsync(y, 0xff, static_cast<size_t>(n * shape_.n_rows) * 4,
                                     t.stream));  // NaN: a row never written fails
    launch(0);
    m.max_error = ErrorOf(n, t.stream);
    m.seconds = t.Time(repeats, copies_, launch);
    return m;
  }

 private:
  // x_device_ [max_n, n_cols] = the kUniqueTokens rows of x, repeated.
  void UploadRepeated(const std::vector<float>& x, int64_t max_n) {
    const size_t row_bytes = static_cast<size_t>(shape_.n_cols) * sizeof(float);
    const int64_t rows = std::max<int64_t>(max_n, kUniqueTokens);
    x_device_ = std::make_unique<DeviceBuffer>(rows * row_bytes);
    BATON_CUDA_CHECK(cudaMemcpy(x_device_->get(), x.data(), kUniqueTokens * row_bytes,
                                cudaMemcpyHostToDevice));
    for (int64_t have = kUniqueTokens; have < rows; have *= 2) {
      const int64_t more = std::min(have, rows - have);
      BATON_CUDA_CHECK(cudaMemcpy(x_device_->get() + have * row_bytes, x_device_->get(),
                                  more * row_bytes, cudaMemcpyDeviceToDevice));
    }
  }

  // max |y - reference| / rms(reference) over the first and last kCheckedTokens of y's n rows.
  double ErrorOf(int64_t n, cudaStream_t stream) {
    BATON_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<int64_t> tokens;
    for (int64_t i = 0; i < n; ++i) {
      if (i < kCheckedTokens || i >= n - kCheckedTokens) tokens.push_back(i);
    }
    std::vector<float> y(static_cast<size_t>(shape_.n_rows));
    double max_error = 0.0, squares = 0.0;
    for (const int64_t i : tokens) {
      BATON_CUDA_CHECK(cudaMemcpy(y.data(), y_device_->get() + i * shape_.n_rows * sizeof(float),
                                  y.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < shape_.n_rows; ++r) {
        const double want = reference_[(i % kUniqueTokens) * unique_rows_ + r % unique_rows_];
        const double error = std::fabs(y[r] - want);
        max_error = std::isnan(error) ? INFINITY : std::max(max_error, error);
        squares += want * want;
      }
    }
    const double count = static_cast<double>(tokens.size() * shape_.n_rows);
    return max_error / std::sqrt(squares / count + 1e-30);
  }

  const DType dtype_;
  const ProductSweepShape shape_;
  const SplitGeometry geometry_;
  std::vector<float> reference_;  // [kUniqueTokens, unique_rows_]
  int64_t unique_rows_ = 0;
  int64_t n_blocks_ = 0;
  size_t stored_bytes_ = 0, split_bytes_ = 0;
  int copies_ = 1;
  std::unique_ptr<DeviceBuffer> stored_, split_, weights_f16_, x_device_, x_f16_, y_device_, q8_;
};

// The variants measured for n rows of `dtype`: the matrix-vector ones and the baseline up to
// 8 rows; past them the tensor-core ones (where the type has them), the f16 GEMM and cuBLAS
// alone.
std::vector<int> VariantsFor(DType dtype, int64_t n) {
  std::vector<int> variants;
  if (n <= kQuantizedMaxRows) {
    variants.push_back(kBaselineVariant);
    for (int v = 0; v < static_cast<int>(kMatVecVariants.size()); ++v) variants.push_back(v);
    return variants;
  }
  variants = {kCublasAloneVariant, kF16GemmVariant};
  if (HasMmaProduct(dtype)) {
    for (int v = 0; v < static_cast<int>(kMmaVariants.size()); ++v) variants.push_back(v);
  }
  return variants;
}

// Fewer repeats for the products that take milliseconds.
int RepeatsFor(int repeats, int64_t n) {
  return n <= 256 ? repeats : std::max<int>(3, static_cast<int>(repeats * 256 / n));
}

}  // namespace

std::vector<ProductSweepShape> Llama3_8bProductShapes() {
  return {{"llama-3-8b attn_q/attn_output", 4096, 4096},
          {"llama-3-8b attn_k/attn_v", 1024, 4096},
          {"llama-3-8b ffn_gate/ffn_up", 14336, 4096},
          {"llama-3-8b ffn_down", 4096, 14336},
          {"llama-3-8b output", 128256, 4096}};
}

std::vector<ProductSweepShape> SmolLm2ProductShapes() {
  return {{"smollm2-135m attn_q/attn_output", 576, 576},
          {"smollm2-135m attn_k/attn_v", 192, 576},
          {"smollm2-135m ffn_gate/ffn_up", 1536, 576},
          {"smollm2-135m ffn_down", 576, 1536},
          {"smollm2-135m output", 49152, 576}};
}

absl::StatusOr<std::vector<ProductMeasurement>> RunProductSweep(
    const ProductSweepOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || options.device >= count) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no CUDA device ", options.device));
  }
  BATON_CUDA_CHECK(cudaSetDevice(options.device));
  for (const int64_t n : options.batch_rows) {
    if (n < 1 || n > kProductRowBuckets.back()) {
      return absl::InvalidArgumentError(absl::StrCat("batch rows must be in [1, ",
                                                     kProductRowBuckets.back(), "], got ", n));
    }
  }
  Timer timer;
  // Up to 8 rows it runs the exact kernel (stored matrices); past them, with no table, the
  // f16 GEMM (split matrices).
  DeviceMatMul exact_or_f16(timer.stream, /*table=*/{});
  std::vector<ProductMeasurement> measured;
  uint64_t seed = 1;
  for (const DType dtype : options.dtypes) {
    if (!HasQuantizedMatVec(dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("no quantized kernels for ", std::string(DTypeName(dtype))));
    }
    for (const ProductSweepShape& shape : options.shapes) {
      if (shape.n_cols % Traits(dtype).block_size != 0) continue;
      const bool output = shape.name.ends_with(" output");
      int64_t max_n = 0;
      for (const int64_t n : options.batch_rows) {
        if (!output || n <= kMaxOutputRows) max_n = std::max(max_n, n);
      }
      if (max_n == 0) continue;
      SweepCase c(dtype, shape, max_n, seed++);
      for (const int64_t n : options.batch_rows) {
        if (n > max_n) continue;
        for (const int variant : VariantsFor(dtype, n)) {
          measured.push_back(c.Measure(variant, n, RepeatsFor(options.repeats, n),
                                       options.tolerance, timer, exact_or_f16));
        }
      }
    }
  }
  return measured;
}

}  // namespace baton::kernels::cuda
