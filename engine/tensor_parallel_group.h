// A model run by a tensor-parallel group of ranks in one process: each rank a thread with its
// own backend, its shard of the weights (engine/model_shard.h), its KV cache (its KV heads of
// every block) and its Transformer, joined by a Communicator (kernels/cpu/shared_memory_group.h:
// the ranks' backends compute in host memory). Prefill and Decode run every rank's pass at once
// and return rank 0's logits (every rank's are the same: the logits are gathered). In the
// default, exact mode they are the whole model's bit for bit on the CPU.
//
// The block tables are the group's, not a rank's: blocks are reserved and freed in rank 0's cache
// (cache()), and every rank's cache holds its heads of the same block ids (each has as many
// blocks), so one table addresses a sequence's KV on every rank. Each rank other than 0 runs its
// pass over a copy of the tables; rank 0's pass advances the sequences' token counts.
//
// Thread-safety: as Transformer: one caller at a time. The rank threads belong to the group.
#ifndef BATON_ENGINE_TENSOR_PARALLEL_GROUP_H_
#define BATON_ENGINE_TENSOR_PARALLEL_GROUP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/forward_pass.h"
#include "engine/kv_cache.h"
#include "engine/kv_shards.h"
#include "engine/model_shard.h"
#include "engine/transformer.h"
#include "kernels/backend.h"
#include "kernels/cpu/shared_memory_group.h"

namespace baton::engine {

struct TensorParallelOptions {
  int32_t size = 2;  // ranks
  KvCacheOptions cache;  // every rank's cache: block size and blocks
  // The backend of rank r (each rank needs its own: a backend serves one thread).
  std::function<absl::StatusOr<std::unique_ptr<kernels::Backend>>(int32_t rank)> backend;
  absl::Duration collective_timeout = absl::Seconds(60);
  TensorParallelMode mode = TensorParallelMode::kExact;  // model_shard.h
};

// The CPU threads each of `size` ranks gets when they share `n_threads` (0: every core): at
// least 1.
int RankThreads(int n_threads, int32_t size);

class TensorParallelGroup final : public ForwardPass {
 public:
  // Shards the model, makes each rank's backend, cache and Transformer, and starts the rank
  // threads. The model's config and weights must outlive the group. FAILED_PRECONDITION where
  // the model does not split over `size` ranks (ShardModel), or a backend's or cache's error.
  static absl::StatusOr<std::unique_ptr<TensorParallelGroup>> Create(
      const ModelConfig& config, const ModelWeights& weights,
      const TensorParallelOptions& options);
  ~TensorParallelGroup();
  TensorParallelGroup(const TensorParallelGroup&) = delete;
  TensorParallelGroup& operator=(const TensorParallelGroup&) = delete;

  // As Transformer's, for the whole model: logits [n_out, n_vocab]. A rank's failure fails the
  // pass on every rank (the communicator's) and is returned.
  using ForwardPass::Prefill;
  absl::Status Prefill(std::span<const SequenceInput> sequences, std::vector<float>& logits,
                       const LayerDoneCallback& on_layer_done) override;
  absl::Status Decode(std::span<const SequenceInput> sequences,
                      std::vector<float>& logits) override;
  const ModelConfig& config() const override { return *config_; }

  int32_t size() const { return static_cast<int32_t>(ranks_.size()); }
  // The cache whose pool owns the group's blocks (rank 0's), and rank r's.
  KvCache& cache() { return *ranks_[0].cache; }
  KvCache& cache(int32_t rank) { return *ranks_[rank].cache; }
  const ModelShard& shard(int32_t rank) const { return *ranks_[rank].shard; }
  // The ranks' caches as the whole model's blocks, for the KV hand-off.
  KvShards& kv_shards() { return *kv_shards_; }

 private:
  struct Rank {
    std::unique_ptr<ModelShard> shard;
    std::unique_ptr<kernels::Backend> backend;
    std::unique_ptr<KvCache> cache;
    std::unique_ptr<Transformer> transformer;
  };
  // One pass for ranks 1..size-1 to run, over their own copies of the tables.
  struct Job {
    bool decode = false;
    std::vector<std::vector<BlockTable>> tables;       // [rank - 1][sequence]
    std::vector<std::vector<SequenceInput>> inputs;    // [rank - 1][sequence]
  };

  explicit TensorParallelGroup(const ModelConfig& config) : config_(&config) {}
  absl::Status Run(std::span<const SequenceInput> sequences, std::vector<float>& logits,
                   const LayerDoneCallback& on_layer_done, bool decode);
  void RankLoop(int32_t rank);

  const ModelConfig* const config_;  // the whole model's
  std::unique_ptr<kernels::SharedMemoryGroup> communicators_;
  std::vector<Rank> ranks_;
  std::unique_ptr<KvShards> kv_shards_;
  std::vector<std::thread> threads_;  // ranks 1..size-1

  absl::Mutex mu_;
  uint64_t job_id_ ABSL_GUARDED_BY(mu_) = 0;  // the latest job handed out
  int pending_ ABSL_GUARDED_BY(mu_) = 0;      // ranks still running it
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Job job_;  // written by the caller before a job is handed out, read by the ranks during it
  std::vector<absl::Status> rank_status_;  // [rank]: each rank writes its own during a job
  std::vector<std::vector<float>> rank_logits_;  // [rank]: the other ranks' (same values)
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_TENSOR_PARALLEL_GROUP_H_
