// CPU kernel micro-benchmarks: MatMul at the default model's shapes (SmolLM2-135M: Q4_1 linear
// layers 1536x576 and 576x1536, the Q8_0 49152x576 tied output projection) for decode (n=1) and
// prefill (n=512), reference vs fast backend; Attention over a paged f16 cache at a few lengths.
//
// Registered: the backend runs the matrix on its packed (packed_block32.h), lanes
// (super_block_lanes.h) or interleaved (interleaved_rows.h) copy where the dtype has one, as it
// does for a loaded model's matrices.
// Counters: weight_GB/s = weight bytes read per MatMul / time (the decode roofline quantity),
// GFLOP/s = 2 * n * rows * cols / time; attention: GFLOP/s of the q·k and p·v products.
// impl: 0 = scalar reference backend, else the fast backend at ISA level 1 = avx2,
// 2 = avx512-vnni, 3 = amx (skipped where the CPU lacks it).
// Threads: "threads:0" is every CPU of the affinity mask. Times are wall-clock (UseRealTime), as the
// work runs on the backend's own threads.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/packed_block32.h"
#include "kernels/cpu/super_block_lanes.h"
#include "kernels/dtype.h"
#include "kernels/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels {
namespace {

// impl as in the header comment; null when this CPU lacks the level.
std::unique_ptr<Backend> MakeBackend(int64_t impl, int threads) {
  if (impl == 0) return CreateCpuBackend({.reference = true});
  const auto isa = static_cast<CpuIsa>(impl);
  if (isa > DetectCpuIsaUncapped()) return nullptr;
  return CreateCpuBackendForIsa({.n_threads = threads}, isa);
}

void SetLabel(benchmark::State& state, const Backend& backend, int threads) {
  state.SetLabel(backend.name() + " threads:" + std::to_string(threads));
}

// Fast-backend levels worth comparing on this machine (the best and the one below it).
std::vector<int64_t> FastImpls() {
  const int64_t best = static_cast<int64_t>(DetectCpuIsaUncapped());
  if (best <= 1) return {best};
  return {best - 1, best};
}

// Args: dtype, n_rows, n_cols, n, impl, threads, registered (1: the matrix is registered with
// the backend, which runs it on packed weights where the dtype has a packed layout).
void BM_MatMul(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const int64_t n_rows = state.range(1), n_cols = state.range(2), n = state.range(3);
  const int threads = static_cast<int>(state.range(5));
  auto backend = MakeBackend(state.range(4), threads);
  if (backend == nullptr) {
    state.SkipWithError("ISA level not supported by this CPU");
    return;
  }
  const testing::TestWeights w = testing::MakeWeights(dtype, n_rows, n_cols, 1);
  if (state.range(6) != 0) backend->RegisterWeights(w.matrix());
  const std::vector<float> x = testing::RandomFloats(n * n_cols, 2);
  std::vector<float> y(n * n_rows);
  for (auto _ : state) {
    backend->MatMul(w.matrix(), x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  if (state.range(6) != 0) backend->ReleaseWeights(w.matrix());
  const double bytes = static_cast<double>(w.bytes.size());
  const double flops = 2.0 * n * n_rows * n_cols;
  state.counters["weight_GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  SetLabel(state, *backend, threads);
}

void MatMulArgs(benchmark::internal::Benchmark* b) {
  const int64_t q4_1 = static_cast<int64_t>(DType::kQ4_1);
  const int64_t q8_0 = static_cast<int64_t>(DType::kQ8_0);
  b->ArgNames({"dtype", "rows", "cols", "n", "impl", "threads", "registered"});
  // The default model's shapes: reference (1 thread) and the fast levels (all threads).
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1536, 576}, {576, 1536}}) {
    for (int64_t n : {1, 512}) {
      b->Args({q4_1, rows, cols, n, 0, 1, 0});
      for (int64_t impl : FastImpls()) b->Args({q4_1, rows, cols, n, impl, 0, 0});
    }
  }
  b->Args({q8_0, 49152, 576, 1, 0, 1, 0});  // the reference at n = 512 would take a minute
  for (int64_t n : {1, 512}) {
    for (int64_t impl : FastImpls()) b->Args({q8_0, 49152, 576, n, impl, 0, 0});
  }
  // Single-thread figures of the best level.
  const int64_t best = FastImpls().back();
  for (int64_t n : {1, 512}) b->Args({q4_1, 1536, 576, n, best, 1, 0});
  b->Args({q8_0, 49152, 576, 1, best, 1, 0});
  // ... and registered: the packed kernels' speed per core (batched decode, prefill).
  for (int64_t n : {32, 512}) b->Args({q4_1, 1536, 576, n, best, 1, 1});
  b->Args({q8_0, 49152, 576, 32, best, 1, 1});
  // Registered (packed) against original rows, best level: decode, speculative verification
  // (2..4 rows), batched decode, prefill.
  for (int64_t n : {1, 2, 4, 8, 32, 512}) {
    for (int64_t registered : {0, 1}) {
      b->Args({q4_1, 1536, 576, n, best, 0, registered});
      b->Args({q8_0, 49152, 576, n, best, 0, registered});
    }
  }
  // Every weight type at the 576x1536 shape (1536 fits K-quant blocks), best level.
  for (DType dtype : {DType::kQ4_0, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                      DType::kQ6_K, DType::kF16, DType::kBF16, DType::kF32}) {
    for (int64_t n : {1, 512}) b->Args({static_cast<int64_t>(dtype), 576, 1536, n, best, 0, 0});
  }
  // Decode of every weight type at a shape beyond L2 (8192x2048: 9.4-34 MB), as the matrices of
  // a 1B+ model are; weight_GB/s against the machine's read bandwidth.
  for (DType dtype : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ2_K,
                      DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16,
                      DType::kBF16}) {
    for (int64_t registered : {0, 1}) {
      if (registered == 1 && !HasPackedLayout(dtype) && !HasSuperBlockLanes(dtype)) continue;
      b->Args({static_cast<int64_t>(dtype), 8192, 2048, 1, best, 0, registered});
    }
  }
  // Beyond the last-level cache (16384x2048: 18-27 MB; 8192x2048 fits a large L3): decode and
  // 8 rows of the super-block types on their original rows and registered (in lanes).
  for (DType dtype : {DType::kQ4_K, DType::kQ6_K}) {
    for (int64_t n : {1, 8}) {
      for (int64_t registered : {0, 1}) {
        b->Args({static_cast<int64_t>(dtype), 16384, 2048, n, best, 0, registered});
      }
    }
  }
  // Batches of the super-block types at a 1B model's square shape, registered: the kernel that
  // unpacks rows in registers (n < 16) and the panel kernel (n >= 16).
  for (DType dtype :
       {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int64_t n : {4, 8, 16, 32, 512}) {
      b->Args({static_cast<int64_t>(dtype), 2048, 2048, n, best, 0, 1});
    }
  }
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_MatMul)->Apply(MatMulArgs);

// Args: n_tokens in the cache, n_q (1: decode at the last position; n_tokens: causal prefill),
// impl, threads. SmolLM2-135M heads: 9 query heads over 3 kv heads of 64.
void BM_Attention(benchmark::State& state) {
  const int32_t n_tokens = static_cast<int32_t>(state.range(0));
  const int64_t n_q = state.range(1);
  const int threads = static_cast<int>(state.range(3));
  auto backend = MakeBackend(state.range(2), threads);
  if (backend == nullptr) {
    state.SkipWithError("ISA level not supported by this CPU");
    return;
  }
  constexpr int32_t kHeads = 9, kKvHeads = 3, kDim = 64, kBlock = 16;
  const int32_t n_blocks = (n_tokens + kBlock - 1) / kBlock;
  const int64_t stride = static_cast<int64_t>(kBlock) * kKvHeads * kDim;
  std::vector<uint16_t> k(n_blocks * stride), v(n_blocks * stride);
  const std::vector<float> kv_values = testing::RandomFloats(2 * n_blocks * stride, 3);
  for (int64_t i = 0; i < n_blocks * stride; ++i) {
    k[i] = F32ToF16(kv_values[i]);
    v[i] = F32ToF16(kv_values[n_blocks * stride + i]);
  }
  std::vector<int32_t> table(n_blocks);
  for (int32_t b = 0; b < n_blocks; ++b) table[b] = n_blocks - 1 - b;  // not contiguous
  const KvLayerView kv{.k_base = k.data(), .v_base = v.data(), .block_stride = stride,
                       .block_table = table.data(), .n_tokens = n_tokens, .block_size = kBlock,
                       .n_kv_head = kKvHeads, .head_dim = kDim};
  std::vector<int32_t> positions(n_q);
  std::iota(positions.begin(), positions.end(), n_tokens - static_cast<int32_t>(n_q));
  const std::vector<float> q = testing::RandomFloats(n_q * kHeads * kDim, 4);
  std::vector<float> out(q.size());
  for (auto _ : state) {
    backend->Attention(q.data(), positions.data(), n_q, kHeads, kv, 0.125f, nullptr, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  double keys = 0;  // (query, key) pairs
  for (int32_t p : positions) keys += p + 1;
  state.counters["GFLOP/s"] = benchmark::Counter(keys * kHeads * kDim * 4 * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  SetLabel(state, *backend, threads);
}
void AttentionArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tokens", "n_q", "impl", "threads"});
  const int64_t best = FastImpls().back();
  for (auto [tokens, n_q] : {std::pair<int64_t, int64_t>{128, 1}, {2048, 1}, {512, 512}}) {
    b->Args({tokens, n_q, 0, 1});
    b->Args({tokens, n_q, best, 1});
    b->Args({tokens, n_q, best, 0});
  }
  b->Args({8192, 1, best, 0});
  // A cache of 48 MiB, larger than the last-level cache: the rows come from memory.
  b->Args({65536, 1, best, 0});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_Attention)->Apply(AttentionArgs);

}  // namespace
}  // namespace baton::kernels
