#include "engine/tensor_parallel_group.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace baton::engine {

int RankThreads(int n_threads, int32_t size) {
  const int threads =
      n_threads > 0 ? n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, threads / std::max(1, size));
}

absl::StatusOr<std::unique_ptr<TensorParallelGroup>> TensorParallelGroup::Create(
    const ModelConfig& config, const ModelWeights& weights, const TensorParallelOptions& options) {
  if (!options.backend) {
    return absl::InvalidArgumentError("tensor-parallel group: no backend for its ranks");
  }
  absl::StatusOr<std::unique_ptr<kernels::SharedMemoryGroup>> communicators =
      kernels::SharedMemoryGroup::Create(
          {.size = options.size, .timeout = options.collective_timeout});
  if (!communicators.ok()) return communicators.status();
  std::unique_ptr<TensorParallelGroup> group(new TensorParallelGroup(config));
  group->communicators_ = *std::move(communicators);
  group->ranks_.resize(options.size);
  for (int32_t r = 0; r < options.size; ++r) {
    Rank& rank = group->ranks_[r];
    absl::StatusOr<std::unique_ptr<ModelShard>> shard =
        ShardModel(config, weights, r, options.size, options.mode);
    if (!shard.ok()) return shard.status();
    rank.shard = *std::move(shard);
    absl::StatusOr<std::unique_ptr<kernels::Backend>> backend = options.backend(r);
    if (!backend.ok()) return backend.status();
    rank.backend = *std::move(backend);
    if (!rank.backend->host_memory()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor parallelism in one process runs on backends that compute in host memory; ",
          rank.backend->name(), " does not"));
    }
    absl::StatusOr<std::unique_ptr<KvCache>> cache =
        KvCache::Create(rank.shard->config, options.cache, *rank.backend);
    if (!cache.ok()) return cache.status();
    rank.cache = *std::move(cache);
    rank.transformer = std::make_unique<Transformer>(
        &rank.shard->config, &rank.shard->weights, rank.backend.get(), rank.cache.get(),
        &group->communicators_->communicator(r), options.mode);
  }
  std::vector<KvShards::Rank> kv_ranks;
  for (int32_t r = 0; r < options.size; ++r) {
    kv_ranks.push_back({.cache = group->ranks_[r].cache.get(),
                        .first_kv_head = FirstKvHead(config, r, options.size)});
  }
  group->kv_shards_ =
      std::make_unique<KvShards>(std::move(kv_ranks), config.n_head_kv, config.head_dim);
  group->rank_status_.resize(options.size);
  group->rank_logits_.resize(options.size);
  for (int32_t r = 1; r < options.size; ++r) {
    group->threads_.emplace_back([g = group.get(), r] { g->RankLoop(r); });
  }
  return group;
}

TensorParallelGroup::~TensorParallelGroup() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status TensorParallelGroup::Prefill(std::span<const SequenceInput> sequences,
                                          std::vector<float>& logits,
                                          const LayerDoneCallback& on_layer_done) {
  return Run(sequences, logits, on_layer_done, /*decode=*/false);
}

absl::Status TensorParallelGroup::Decode(std::span<const SequenceInput> sequences,
                                         std::vector<float>& logits) {
  return Run(sequences, logits, nullptr, /*decode=*/true);
}

absl::Status TensorParallelGroup::Run(std::span<const SequenceInput> sequences,
                                      std::vector<float>& logits,
                                      const LayerDoneCallback& on_layer_done, bool decode) {
  const int32_t n = size();
  job_.decode = decode;
  job_.tables.assign(n - 1, {});
  job_.inputs.assign(n - 1, {});
  for (int32_t r = 1; r < n; ++r) {
    std::vector<BlockTable>& tables = job_.tables[r - 1];
    tables.reserve(sequences.size());
    for (const SequenceInput& seq : sequences) {
      tables.push_back(seq.kv != nullptr ? *seq.kv : BlockTable{});
    }
    for (size_t s = 0; s < sequences.size(); ++s) {
      SequenceInput input = sequences[s];
      if (input.kv != nullptr) input.kv = &tables[s];
      job_.inputs[r - 1].push_back(input);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    ++job_id_;
    pending_ = n - 1;
  }
  Transformer& own = *ranks_[0].transformer;
  absl::Status status = decode ? own.Decode(sequences, logits)
                               : own.Prefill(sequences, logits, on_layer_done);
  // A rank that fails outside a collective leaves the others waiting in their next one: its
  // failure ends their wait.
  if (!status.ok()) communicators_->Abort(status.message());
  {
    absl::MutexLock lock(&mu_);
    auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
    mu_.Await(absl::Condition(&finished));
  }
  for (int32_t r = 1; r < n && status.ok(); ++r) status = rank_status_[r];
  // No rank is inside a collective now: the next pass starts on a clean group.
  if (!status.ok()) communicators_->Reset();
  return status;
}

void TensorParallelGroup::RankLoop(int32_t rank) {
  uint64_t done = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto handed_out = [this, done]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || job_id_ != done;
      };
      mu_.Await(absl::Condition(&handed_out));
      if (stopping_) return;
      done = job_id_;
    }
    Transformer& transformer = *ranks_[rank].transformer;
    const std::span<const SequenceInput> inputs = job_.inputs[rank - 1];
    absl::Status status = job_.decode ? transformer.Decode(inputs, rank_logits_[rank])
                                      : transformer.Prefill(inputs, rank_logits_[rank]);
    if (!status.ok()) communicators_->Abort(status.message());
    rank_status_[rank] = std::move(status);
    absl::MutexLock lock(&mu_);
    --pending_;
  }
}

}  // namespace baton::engine
