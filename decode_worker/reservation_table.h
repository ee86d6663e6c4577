// A decode worker's KV reservations: blocks held for requests whose KV is on its way from a
// prefill worker, each under a lease. Pushed KV lands here (it is the worker's KvReceiver).
//
// A reservation goes reserved -> kv-sending (BeginPush) -> kv-received (EndPush) and is then
// claimed by the decode batch, which takes over its blocks. It is freed, every block returned,
// when its lease passes before it is claimed, when its push aborts, or on Release.
//
// Leases: a reserved reservation must see its push begin within its lease (from Reserve). While
// its KV arrives the lease is paused: the push is bounded by its own deadline (the transport
// aborts it past that), and every write renews a stall guard of push_stall_timeout, so a push
// whose sender went silent for longer than that (no KV chunk) is freed too. Once the KV has arrived the reservation
// must be claimed within its lease again (from EndPush). Long prompts therefore need no longer
// leases: the lease covers the waits before and after the hand-off, not the prefill itself.
//
// Pushed KV may come as f16 (the cache's type), bf16 or f32 (KvPushSpec::dtype): other types are
// converted to f16 as they are written (round to nearest even). KV that comes over a link
// (FillBlocks, kv_link.h) lands as it was sent, so it must be f16 already.
//
// Prefix caching (with options.prefix_cache): Reserve with the prompt's tokens starts the
// reservation from the longest cached prefix of the prompt (engine/prefix_cache.h); the push then
// carries only the blocks after it (KvPushSpec::first_block must equal n_cached_tokens /
// block_size). Claim publishes the prompt's full blocks for later requests, once the decode call
// has shown the same prompt; so does freeing a reservation whose KV had all arrived.
//
// Thread-safety: thread-safe (one mutex). Pushed KV is copied into the blocks outside the mutex,
// so pushes to different reservations copy in parallel; a reservation freed while its copy runs
// (lease, abort, release) keeps its blocks until the copy is done, so a block is never written
// after it was freed.
#ifndef BATON_DECODE_WORKER_RESERVATION_TABLE_H_
#define BATON_DECODE_WORKER_RESERVATION_TABLE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "engine/kv_budget.h"
#include "engine/kv_cache.h"
#include "engine/kv_shards.h"
#include "engine/prefix_cache.h"
#include "kernels/host_buffer_pool.h"
#include "kvtransfer/kv_dtype.h"
#include "kvtransfer/kv_receiver.h"

namespace baton::decode_worker {

struct ReservationTableOptions {
  std::string model_fingerprint;
  int32_t max_context = 0;  // prompt + max_tokens must fit
  std::chrono::milliseconds max_lease{120000};  // longest lease
  // A push that writes nothing for this long (its prefill worker stalled) is freed.
  std::chrono::milliseconds push_stall_timeout{30000};
  // Generated tokens whose KV is held at admission (engine/kv_budget.h, the rule the router's
  // placement shares); the decode batch grows the sequence block by block after that
  // (decode_batch.h). Negative: all of max_tokens up front (no growth, no preemption ever needed).
  int32_t reserve_ahead_tokens = engine::kDefaultReserveAheadTokens;
  // Where leases read the time; tests inject a fake one. Must outlive the table.
  const Clock* clock = &Clock::Real();
  // The KV cache's prefix cache; null: none. Must outlive the table.
  engine::PrefixCache* prefix_cache = nullptr;
  // Idle page-locked host buffers kept for KV on its way into a device's memory.
  size_t host_staging_idle_bytes = size_t{256} << 20;
  // A tensor-parallel group's caches (engine/kv_shards.h), `cache` being rank 0's: pushes carry
  // whole-model blocks, each written into every rank as its heads. Null: the cache is the
  // whole model's. Must outlive the table.
  engine::KvShards* kv_shards = nullptr;
};

struct ReserveResult {
  std::string reservation_id;
  int32_t n_blocks = 0;
  int32_t n_cached_tokens = 0;  // the prompt's first tokens whose KV the reservation holds already
};

// What the decode batch takes over from a reservation whose KV arrived.
struct ClaimedSequence {
  std::string request_id;
  std::string cache_salt;    // the prefix-cache salt it was reserved with
  engine::BlockTable table;  // n_tokens = the prompt length
  int32_t max_tokens = 0;
};

class ReservationTable : public kvtransfer::KvReceiver {
 public:
  // The type of the KV cache's elements; pushes of another type are converted as they land.
  static constexpr kvtransfer::KvDtype kCacheDtype = kvtransfer::KvDtype::kF16;

  ReservationTable(engine::KvCache* cache, ReservationTableOptions options);
  ~ReservationTable() override;  // frees every block still held

  // Blocks for the prompt and the first generated tokens (see reserve_ahead_tokens), under
  // `lease`, starting from the cached prefix of `prompt_tokens` (under `cache_salt`,
  // engine/block_hash.h) when they are given (empty: no lookup). RESOURCE_EXHAUSTED when the
  // cache cannot hold them now; INVALID_ARGUMENT for bad sizes, prompt tokens that are not
  // n_prompt_tokens long, a salt longer than engine::kMaxCacheSaltBytes, or a fingerprint
  // mismatch.
  absl::StatusOr<ReserveResult> Reserve(const std::string& request_id,
                                        const std::string& model_fingerprint,
                                        int32_t n_prompt_tokens, int32_t max_tokens,
                                        std::chrono::milliseconds lease,
                                        std::span<const engine::TokenId> prompt_tokens = {},
                                        absl::string_view cache_salt = "");

  // Hands a kv-received reservation over to decoding (its blocks go with it), publishing its
  // prompt's full blocks to the prefix cache when it was made with its tokens. NOT_FOUND for an
  // unknown, expired or released id; FAILED_PRECONDITION while its KV is incomplete;
  // INVALID_ARGUMENT when n_prompt_tokens differs from the reservation's, or `prompt_tokens`
  // (when given) from the tokens it was made with.
  absl::StatusOr<ClaimedSequence> Claim(const std::string& reservation_id,
                                        int32_t n_prompt_tokens,
                                        std::span<const engine::TokenId> prompt_tokens = {});

  // Frees a reservation that was not claimed yet. Returns whether it existed.
  bool Release(const std::string& reservation_id);

  // Frees every reservation whose lease has passed; returns how many.
  int ExpireLeases();

  int32_t size() const;

  // KvReceiver
  absl::Status BeginPush(const kvtransfer::KvPushSpec& spec) override;
  absl::Status WriteBlocks(const std::string& reservation_id, int32_t layer, int32_t first_block,
                           int32_t n_blocks, const kvtransfer::KvBytePieces& data) override;
  absl::Status FillBlocks(const std::string& reservation_id, int32_t layer, int32_t first_block,
                          int32_t n_blocks, const BlockFill& fill) override;
  absl::Status EndPush(const std::string& reservation_id) override;
  void AbortPush(const std::string& reservation_id, const absl::Status& why) override;

 private:
  enum class State { kReserved, kReceiving, kReceived };
  struct Reservation {
    std::string request_id;
    State state = State::kReserved;
    engine::BlockTable table;
    int32_t n_prompt_tokens = 0;
    int32_t first_block = 0;  // blocks before it came from the prefix cache
    std::vector<engine::TokenId> prompt_tokens;  // for publishing; empty: not published
    std::string cache_salt;
    int32_t max_tokens = 0;
    std::chrono::milliseconds lease{0};
    absl::Time lease_deadline;  // reserved/received: lease; receiving: stall guard
    std::vector<uint8_t> received;  // [n_layer * n_prompt_blocks] block arrived flags
    int64_t n_received = 0;
    kvtransfer::KvDtype push_dtype = kvtransfer::KvDtype::kF16;  // the KV's type as it arrives
    bool writing = false;  // WriteBlocks is copying into its blocks (outside the mutex)
    bool doomed = false;   // freed while writing: gone for every caller, blocks returned after
  };
  int32_t PromptBlocks(const Reservation& r) const;
  // The first of the prompt's blocks of `layer` that the push brings (KvPushSpec::
  // LayerFirstBlock): past the prefix cache's and, for a windowed layer, the blocks that the
  // first generated token's query sees.
  int32_t FirstBlockSent(const Reservation& r, int32_t layer) const;
  // NOT_FOUND (saying so) for an unknown, expired or released id.
  absl::StatusOr<Reservation*> FindLocked(const std::string& reservation_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the blocks and forgets the reservation (deferred to the end of a copy under way).
  void FreeLocked(absl::flat_hash_map<std::string, Reservation>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a chunk may be written: state, block range, size (in the push's dtype), no block
  // twice. INVALID_ARGUMENT / FAILED_PRECONDITION saying which.
  absl::Status CheckWriteLocked(const Reservation& r, const std::string& reservation_id,
                                int32_t layer, int32_t first_block, int32_t n_blocks,
                                int64_t data_bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes a chunk into `blocks` (its blocks of the cache) from data of type `from`.
  using ChunkWrite =
      std::function<absl::Status(const std::vector<uint8_t*>& blocks, kvtransfer::KvDtype from)>;
  // A chunk of `data_bytes` (in the push's dtype): checked (CheckWriteLocked), written with
  // `write` outside the mutex, recorded when that succeeded.
  absl::Status WriteChunk(const std::string& reservation_id, int32_t layer, int32_t first_block,
                          int32_t n_blocks, int64_t data_bytes, const ChunkWrite& write)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A chunk's data (in dtype `from`) into `blocks` (this cache's, in its dtype): straight in when
  // the backend's memory is the host's, through a page-locked host buffer and
  // CopyToDeviceUnordered otherwise (RESOURCE_EXHAUSTED when no such buffer can be had).
  absl::Status WriteIntoBlocks(const kvtransfer::KvBytePieces& data, kvtransfer::KvDtype from,
                       const std::vector<uint8_t*>& blocks);
  // Runs `copy` (into the reservation's blocks) with mu_ released, then, unless the reservation
  // was freed meanwhile (ABORTED) or the copy failed (its error), records the write with
  // `written`.
  absl::Status CopyOutsideLock(const std::string& reservation_id,
                               const std::function<absl::Status()>& copy,
                               const std::function<void(Reservation&)>& written)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  engine::KvCache& cache_;
  const ReservationTableOptions options_;
  // The whole model's KV width and layer block (the kv_shards', else the cache's).
  const int32_t kv_dim_;
  const int64_t layer_block_elements_;
  // Host buffers for KV on its way into a device's memory; null when the cache is the host's.
  const std::unique_ptr<kernels::HostBufferPool> staging_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Reservation> reservations_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace baton::decode_worker

#endif  // BATON_DECODE_WORKER_RESERVATION_TABLE_H_
