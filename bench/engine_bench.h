// `baton bench engine`: prefill and decode speed of the engine on one model, with the memory
// bandwidth measured in the same run so that decode can be stated as a fraction of its roofline.
//
// Thread-compatible: runs on the calling thread (and the backend's pool).
#ifndef BATON_BENCH_ENGINE_BENCH_H_
#define BATON_BENCH_ENGINE_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_shard.h"
#include "kernels/device.h"
#include "nlohmann/json.hpp"

namespace baton::bench {

struct EngineBenchOptions {
  std::string model_path;
  kernels::Device device;            // cpu, or cuda:N
  int n_threads = 0;                 // 0: every core (the CPU backend's pool)
  // > 1: a tensor-parallel group of this many ranks (engine/tensor_parallel_group.h), each a
  // CPU backend of n_threads / tensor_parallel threads (at least 1).
  int32_t tensor_parallel = 1;
  engine::TensorParallelMode tensor_parallel_mode = engine::TensorParallelMode::kExact;
  int32_t prompt_tokens = 512;       // prefill benchmark prompt length
  int32_t decode_tokens = 128;       // decode benchmark length (one sequence)
  int32_t decode_context = 16;       // tokens in the cache before one sequence's first decode step
  std::vector<int32_t> batch_sizes = {1, 8, 32};  // batched decode
  int32_t batch_decode_steps = 32;
  int repeats = 3;                   // best of
};

// One JSON object: prefill_tokens_per_s, decode_tokens_per_s (after decode_context tokens; the
// batched runs after 16 each), decode_context, threads, memory_read_gb_per_s
// (on a GPU: its device-to-device copy rate), weight_bytes_per_decode_step,
// decode_roofline_tokens_per_s, decode_roofline_fraction, batched_decode_tokens_per_s and
// batched_decode_roofline_fraction (per batch size), model, device, backend, isa,
// tensor_parallel (and tensor_parallel_mode where > 1); on a GPU also
// prefill_cublas_gemm_s, prefill_s and prefill_fraction_of_cublas (cuBLAS alone on the prefill's
// GEMM shapes, over the whole prefill); on a CPU also decode_paired_read_fraction and
// decode_paired_read_gb_per_s: a run of one sequence whose every step is followed by a plain read
// of as many bytes as the step's weights (of at most 512 MiB, its time scaled up) on the same
// threads, the median over the pairs of read time / step time, and the reads' median bandwidth
// (both halves of a pair see the machine at the same moment, which memory_read_gb_per_s,
// measured once, does not on a shared host).
// UNAVAILABLE / INVALID_ARGUMENT for a device this build or machine cannot use;
// FAILED_PRECONDITION for tensor parallelism on a GPU (not yet) or a model that does not split.
absl::StatusOr<nlohmann::json> RunEngineBench(const EngineBenchOptions& options);

}  // namespace baton::bench

#endif  // BATON_BENCH_ENGINE_BENCH_H_
