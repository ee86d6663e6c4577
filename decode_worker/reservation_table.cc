#include "decode_worker/reservation_table.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/block_hash.h"
#include "engine/kv_budget.h"
#include "kernels/backend.h"
#include "kernels/host_copy.h"
#include "kvtransfer/kv_wire.h"
#include "metrics/metrics.h"
#include "metrics/prefix_cache_metrics.h"

namespace baton::decode_worker {
namespace {

struct ReceiveMetrics {
  metrics::Counter& blocks_received;
  metrics::Counter& bytes_received;
  metrics::Counter& expired;
};

const ReceiveMetrics& Metrics() {
  static const ReceiveMetrics m{
      .blocks_received = metrics::Registry::Global().GetCounter(
          "baton:kv_blocks_received_total", "KV layer blocks received from prefill workers."),
      .bytes_received = metrics::Registry::Global().GetCounter(
          "baton:kv_bytes_received_total", "KV bytes received from prefill workers."),
      .expired = metrics::Registry::Global().GetCounter(
          "baton:reservations_expired_total",
          "KV reservations freed because their lease passed before decoding claimed them."),
  };
  return m;
}

}  // namespace

ReservationTable::ReservationTable(engine::KvCache* cache, ReservationTableOptions options)
    : cache_(*cache),
      options_(std::move(options)),
      kv_dim_(options_.kv_shards != nullptr ? options_.kv_shards->kv_dim() : cache->kv_dim()),
      layer_block_elements_(options_.kv_shards != nullptr
                                ? options_.kv_shards->layer_block_elements()
                                : cache->layer_block_elements()),
      staging_(cache->backend().host_memory()
                   ? nullptr
                   : std::make_unique<kernels::HostBufferPool>(
                         cache->backend(), options_.host_staging_idle_bytes)) {
  Metrics();  // exported from the start, at 0
}

ReservationTable::~ReservationTable() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, r] : reservations_) cache_.Free(r.table);
  reservations_.clear();
}

int32_t ReservationTable::PromptBlocks(const Reservation& r) const {
  return static_cast<int32_t>(engine::KvBlocksFor(r.n_prompt_tokens, cache_.block_size()));
}

int32_t ReservationTable::FirstBlockSent(const Reservation& r, int32_t layer) const {
  return std::max(r.first_block,
                  cache_.FirstHeldBlock(layer, static_cast<int32_t>(r.n_prompt_tokens)));
}

void ReservationTable::FreeLocked(absl::flat_hash_map<std::string, Reservation>::iterator it) {
  Reservation& r = it->second;
  if (r.writing) {
    r.doomed = true;  // WriteBlocks frees it once its copy is done
    return;
  }
  // KV that arrived whole stays useful after its request (e.g. one that ended at its first
  // token and was never claimed).
  if (r.state == State::kReceived && !r.prompt_tokens.empty()) {
    r.table.n_tokens = r.n_prompt_tokens;
    options_.prefix_cache->Publish(r.prompt_tokens, r.table, r.cache_salt);
  }
  cache_.Free(r.table);
  reservations_.erase(it);
}

absl::StatusOr<ReserveResult> ReservationTable::Reserve(const std::string& request_id,
                                                        const std::string& model_fingerprint,
                                                        int32_t n_prompt_tokens,
                                                        int32_t max_tokens,
                                                        std::chrono::milliseconds lease,
                                                        std::span<const engine::TokenId> prompt_tokens,
                                                        absl::string_view cache_salt) {
  if (model_fingerprint != options_.model_fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat("model fingerprint '", model_fingerprint,
                                                   "' does not match this worker's '",
                                                   options_.model_fingerprint, "'"));
  }
  if (n_prompt_tokens <= 0 || max_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("reserve: n_prompt_tokens (", n_prompt_tokens,
                                                   ") and max_tokens (", max_tokens,
                                                   ") must be positive"));
  }
  if (int64_t{n_prompt_tokens} + max_tokens > options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("reserve: ", n_prompt_tokens, " prompt + ",
                                                   max_tokens, " new tokens exceed the context of ",
                                                   options_.max_context));
  }
  if (lease <= std::chrono::milliseconds(0) || lease > options_.max_lease) {
    return absl::InvalidArgumentError(absl::StrCat("reserve: lease ", lease.count(),
                                                   " ms outside (0, ", options_.max_lease.count(),
                                                   "] ms"));
  }
  if (!prompt_tokens.empty() && static_cast<int64_t>(prompt_tokens.size()) != n_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("reserve: ", prompt_tokens.size(),
                                                   " prompt tokens given for n_prompt_tokens ",
                                                   n_prompt_tokens));
  }
  if (cache_salt.size() > engine::kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrCat("reserve: cache_salt of ", cache_salt.size(),
                                                   " bytes exceeds ", engine::kMaxCacheSaltBytes));
  }
  Reservation r;
  r.request_id = request_id;
  r.cache_salt = std::string(cache_salt);
  engine::PrefixCache* prefix = options_.prefix_cache;
  if (prefix != nullptr && prefix->enabled() && !prompt_tokens.empty()) {
    const int32_t cached = prefix->Match(
        prompt_tokens, engine::MaxCachedTokens(n_prompt_tokens, cache_.block_size()), r.table,
        cache_salt, static_cast<int32_t>(n_prompt_tokens));
    metrics::RecordPrefixLookup(n_prompt_tokens, cached, cache_.block_size());
    r.first_block = cached / cache_.block_size();
    r.prompt_tokens.assign(prompt_tokens.begin(), prompt_tokens.end());
  }
  r.n_prompt_tokens = n_prompt_tokens;
  r.max_tokens = max_tokens;
  r.lease = lease;
  r.lease_deadline = options_.clock->Now() + absl::FromChrono(lease);
  const int64_t n_tokens =
      engine::KvTokensAtAdmission(n_prompt_tokens, max_tokens, options_.reserve_ahead_tokens);
  if (absl::Status s = cache_.Reserve(r.table, static_cast<int32_t>(n_tokens),
                                      static_cast<int32_t>(n_prompt_tokens));
      !s.ok()) {
    cache_.Free(r.table);
    return s;
  }
  // Cached blocks, and those a windowed layer does not keep, count as received: the push brings
  // the rest.
  const int32_t prompt_blocks = PromptBlocks(r);
  r.received.assign(static_cast<size_t>(cache_.n_layer()) * prompt_blocks, 0);
  r.n_received = 0;
  for (int32_t layer = 0; layer < cache_.n_layer(); ++layer) {
    const int32_t first = FirstBlockSent(r, layer);
    std::fill_n(r.received.begin() + static_cast<size_t>(layer) * prompt_blocks, first, 1);
    r.n_received += first;
  }
  absl::MutexLock lock(&mu_);
  // Ids are unguessable so that one client cannot write into another's reservation.
  static thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = absl::StrFormat("r%d-%016x", next_id_++, rng());
  ReserveResult result{.reservation_id = id,
                       .n_blocks = cache_.HeldBlocks(r.table),
                       .n_cached_tokens = r.first_block * cache_.block_size()};
  reservations_.emplace(std::move(id), std::move(r));
  return result;
}

absl::StatusOr<ReservationTable::Reservation*> ReservationTable::FindLocked(
    const std::string& reservation_id) {
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end() || it->second.doomed) {
    return absl::NotFoundError(
        absl::StrCat("reservation '", reservation_id, "' is unknown, expired or released"));
  }
  return &it->second;
}

absl::StatusOr<ClaimedSequence> ReservationTable::Claim(
    const std::string& reservation_id, int32_t n_prompt_tokens,
    std::span<const engine::TokenId> prompt_tokens) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Reservation*> found = FindLocked(reservation_id);
  if (!found.ok()) return found.status();
  Reservation& r = **found;
  if (r.state != State::kReceived) {
    return absl::FailedPreconditionError(
        absl::StrCat("reservation '", reservation_id, "' has not received all of its KV"));
  }
  if (n_prompt_tokens != r.n_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("decode: ", n_prompt_tokens,
                                                   " prompt tokens given, the reservation holds KV "
                                                   "for ", r.n_prompt_tokens));
  }
  if (!r.prompt_tokens.empty()) {
    if (!prompt_tokens.empty() &&
        !std::equal(prompt_tokens.begin(), prompt_tokens.end(), r.prompt_tokens.begin(),
                    r.prompt_tokens.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "decode: the prompt tokens differ from those reservation '", reservation_id,
          "' was made for"));
    }
    r.table.n_tokens = r.n_prompt_tokens;
    options_.prefix_cache->Publish(r.prompt_tokens, r.table, r.cache_salt);
  }
  ClaimedSequence claimed{.request_id = r.request_id,
                          .cache_salt = std::move(r.cache_salt),
                          .table = std::move(r.table),
                          .max_tokens = r.max_tokens};
  claimed.table.n_tokens = r.n_prompt_tokens;
  reservations_.erase(reservation_id);
  return claimed;
}

bool ReservationTable::Release(const std::string& reservation_id) {
  absl::MutexLock lock(&mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end() || it->second.doomed) return false;
  FreeLocked(it);
  return true;
}

int ReservationTable::ExpireLeases() {
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  int expired = 0;
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    auto next = std::next(it);
    if (it->second.lease_deadline <= now && !it->second.doomed) {
      FreeLocked(it);
      ++expired;
    }
    it = next;
  }
  if (expired > 0) Metrics().expired.Increment(expired);
  return expired;
}

int32_t ReservationTable::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(reservations_.size());
}

absl::Status ReservationTable::BeginPush(const kvtransfer::KvPushSpec& spec) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Reservation*> found = FindLocked(spec.reservation_id);
  if (!found.ok()) return found.status();
  Reservation& r = **found;
  auto mismatch = [&](absl::string_view field, auto expected, auto actual) {
    return absl::InvalidArgumentError(absl::StrCat("KV push for '", spec.reservation_id, "': ",
                                                   field, " is ", actual, ", expected ", expected));
  };
  if (spec.model_fingerprint != options_.model_fingerprint) {
    return mismatch("model fingerprint", options_.model_fingerprint, spec.model_fingerprint);
  }
  if (spec.n_layer != cache_.n_layer()) return mismatch("n_layer", cache_.n_layer(), spec.n_layer);
  if (spec.kv_dim != kv_dim_) return mismatch("kv_dim", kv_dim_, spec.kv_dim);
  if (spec.kv_planes != cache_.kv_planes()) {
    return mismatch("kv_planes", cache_.kv_planes(), spec.kv_planes);
  }
  if (spec.block_size != cache_.block_size()) {
    return mismatch("block_size", cache_.block_size(), spec.block_size);
  }
  if (spec.n_tokens != r.n_prompt_tokens) {
    return mismatch("n_tokens", r.n_prompt_tokens, spec.n_tokens);
  }
  if (spec.first_block != r.first_block) {
    return mismatch("first_block (blocks held from the prefix cache)", r.first_block,
                    spec.first_block);
  }
  for (int32_t layer = 0; layer < cache_.n_layer(); ++layer) {
    const int32_t window = spec.layer_windows.empty() ? 0 : spec.layer_windows[layer];
    if (window != cache_.window(layer)) {
      return mismatch(absl::StrCat("layer ", layer, "'s sliding window"),
                      cache_.window(layer), window);
    }
  }
  if (r.state != State::kReserved) {
    return absl::FailedPreconditionError(
        absl::StrCat("reservation '", spec.reservation_id, "' already received a KV push"));
  }
  r.state = State::kReceiving;
  r.push_dtype = spec.dtype;
  r.lease_deadline = options_.clock->Now() + absl::FromChrono(options_.push_stall_timeout);
  return absl::OkStatus();
}

absl::Status ReservationTable::CheckWriteLocked(const Reservation& r,
                                                const std::string& reservation_id, int32_t layer,
                                                int32_t first_block, int32_t n_blocks,
                                                int64_t data_bytes) const {
  if (r.state != State::kReceiving) {
    return absl::FailedPreconditionError(
        absl::StrCat("reservation '", reservation_id, "' is not receiving KV"));
  }
  const int32_t prompt_blocks = PromptBlocks(r);
  if (layer < 0 || layer >= cache_.n_layer()) {
    return absl::InvalidArgumentError(absl::StrCat("KV chunk for '", reservation_id, "': layer ",
                                                   layer, " outside [0, ", cache_.n_layer(), ")"));
  }
  if (first_block < FirstBlockSent(r, layer) || n_blocks <= 0 ||
      int64_t{first_block} + n_blocks > prompt_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV chunk for '", reservation_id, "': layer ", layer, " blocks [", first_block, ", ",
        int64_t{first_block} + n_blocks, ") outside the layer's blocks [",
        FirstBlockSent(r, layer), ", ", prompt_blocks, ")"));
  }
  const int64_t block_bytes = layer_block_elements_ * kvtransfer::KvDtypeBytes(r.push_dtype);
  if (data_bytes != block_bytes * n_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV chunk for '", reservation_id, "': ", data_bytes, " bytes for ", n_blocks,
        " blocks of ", block_bytes, " (", std::string(kvtransfer::KvDtypeName(r.push_dtype)), ")"));
  }
  for (int32_t i = 0; i < n_blocks; ++i) {
    if (r.received[static_cast<size_t>(layer) * prompt_blocks + first_block + i]) {
      return absl::InvalidArgumentError(absl::StrCat("KV chunk for '", reservation_id,
                                                     "': layer ", layer, " block ",
                                                     first_block + i, " sent twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReservationTable::WriteBlocks(const std::string& reservation_id, int32_t layer,
                                           int32_t first_block, int32_t n_blocks,
                                           const kvtransfer::KvBytePieces& data) {
  int64_t data_bytes = 0;
  for (std::span<const uint8_t> piece : data) data_bytes += static_cast<int64_t>(piece.size());
  return WriteChunk(reservation_id, layer, first_block, n_blocks, data_bytes,
                    [&](const std::vector<uint8_t*>& blocks, kvtransfer::KvDtype from) {
                      return WriteIntoBlocks(data, from, blocks);
                    });
}

absl::Status ReservationTable::FillBlocks(const std::string& reservation_id, int32_t layer,
                                          int32_t first_block, int32_t n_blocks,
                                          const BlockFill& fill) {
  if (options_.kv_shards != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV chunk for '", reservation_id,
        "': a link writes into one device's blocks; this cache is a tensor-parallel group's"));
  }
  const int64_t block_bytes = layer_block_elements_ * kvtransfer::KvDtypeBytes(kCacheDtype);
  return WriteChunk(
      reservation_id, layer, first_block, n_blocks, block_bytes * n_blocks,
      [&](const std::vector<uint8_t*>& blocks, kvtransfer::KvDtype from) {
        if (from != kCacheDtype) {
          return absl::InvalidArgumentError(absl::StrCat(
              "KV chunk for '", reservation_id, "': a link carries bytes as they are, but the "
              "push's dtype is ", std::string(kvtransfer::KvDtypeName(from)), " and this cache's ",
              std::string(kvtransfer::KvDtypeName(kCacheDtype))));
        }
        return fill(blocks, static_cast<size_t>(block_bytes));
      });
}

absl::Status ReservationTable::WriteChunk(const std::string& reservation_id, int32_t layer,
                                          int32_t first_block, int32_t n_blocks,
                                          int64_t data_bytes, const ChunkWrite& write) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Reservation*> found = FindLocked(reservation_id);
  if (!found.ok()) return found.status();
  const Reservation& r = **found;
  if (absl::Status bad = CheckWriteLocked(r, reservation_id, layer, first_block, n_blocks,
                                          data_bytes);
      !bad.ok()) {
    return bad;
  }
  std::vector<uint8_t*> blocks(n_blocks);
  // A group's blocks are written whole here first, then scattered to the ranks.
  std::unique_ptr<uint8_t[]> whole;
  std::vector<engine::BlockId> ids;
  engine::KvShards* const shards = options_.kv_shards;
  if (shards != nullptr) {
    const int64_t bytes = shards->layer_block_bytes();
    whole = std::make_unique<uint8_t[]>(static_cast<size_t>(bytes * n_blocks));
    const std::vector<engine::BlockId>& group_blocks =
        r.table.groups[cache_.groups().group_of[layer]];
    for (int32_t i = 0; i < n_blocks; ++i) {
      blocks[i] = whole.get() + i * bytes;
      ids.push_back(group_blocks[first_block + i]);
    }
  } else {
    for (int32_t i = 0; i < n_blocks; ++i) {
      blocks[i] =
          reinterpret_cast<uint8_t*>(cache_.LayerBlock(layer, r.table, first_block + i));
    }
  }
  const kvtransfer::KvDtype from = r.push_dtype;
  const int32_t prompt_blocks = PromptBlocks(r);
  return CopyOutsideLock(
      reservation_id,
      [&] {
        absl::Status written = write(blocks, from);
        if (written.ok() && shards != nullptr) {
          for (int32_t i = 0; i < n_blocks; ++i) shards->Scatter(layer, ids[i], blocks[i]);
        }
        return written;
      },
      [&](Reservation& written) {
        for (int32_t i = 0; i < n_blocks; ++i) {
          written.received[static_cast<size_t>(layer) * prompt_blocks + first_block + i] = 1;
        }
        written.n_received += n_blocks;
        Metrics().blocks_received.Increment(n_blocks);
        Metrics().bytes_received.Increment(static_cast<double>(data_bytes));
      });
}

absl::Status ReservationTable::WriteIntoBlocks(const kvtransfer::KvBytePieces& data,
                                               kvtransfer::KvDtype from,
                                               const std::vector<uint8_t*>& blocks) {
  const int64_t elements = layer_block_elements_;
  kernels::Backend& backend = cache_.backend();
  if (staging_ == nullptr) {
    kvtransfer::ConvertPiecesToBlocks(data, from, blocks, kCacheDtype, elements);
    return absl::OkStatus();
  }
  // Blocks in a device's memory: convert into page-locked host memory, then copy them in beside
  // the decode steps (no sequence uses a reservation's blocks before it is claimed).
  const size_t block_bytes = static_cast<size_t>(elements) * sizeof(uint16_t);
  absl::StatusOr<kernels::HostBuffer> staged = staging_->Take(blocks.size() * block_bytes);
  if (!staged.ok()) return staged.status();
  std::vector<uint8_t*> staged_blocks(blocks.size());
  std::vector<kernels::HostCopy> copies(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    staged_blocks[i] = static_cast<uint8_t*>(staged->data) + i * block_bytes;
    copies[i] = {blocks[i], staged_blocks[i], block_bytes};
  }
  kvtransfer::ConvertPiecesToBlocks(data, from, staged_blocks, kCacheDtype, elements);
  backend.CopyToDeviceUnordered(copies);  // complete on return: the buffer may go back
  staging_->Return(*staged);
  return absl::OkStatus();
}

absl::Status ReservationTable::CopyOutsideLock(const std::string& reservation_id,
                                               const std::function<absl::Status()>& copy,
                                               const std::function<void(Reservation&)>& written) {
  reservations_.find(reservation_id)->second.writing = true;
  mu_.Unlock();
  const absl::Status copied = copy();
  mu_.Lock();
  // Nothing erases a reservation while it is being written (FreeLocked defers to here).
  auto it = reservations_.find(reservation_id);
  Reservation& r = it->second;
  r.writing = false;
  if (r.doomed) {
    FreeLocked(it);
    return absl::AbortedError(absl::StrCat("reservation '", reservation_id,
                                           "' was freed while its KV arrived"));
  }
  if (!copied.ok()) return copied;  // the push fails; its abort frees the reservation
  written(r);
  r.lease_deadline = options_.clock->Now() + absl::FromChrono(options_.push_stall_timeout);
  return absl::OkStatus();
}

absl::Status ReservationTable::EndPush(const std::string& reservation_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Reservation*> found = FindLocked(reservation_id);
  if (!found.ok()) return found.status();
  Reservation& r = **found;
  if (r.state != State::kReceiving || r.n_received != static_cast<int64_t>(r.received.size())) {
    return absl::FailedPreconditionError(absl::StrCat("KV push for '", reservation_id,
                                                      "' ended with ", r.n_received, " of ",
                                                      r.received.size(), " layer blocks"));
  }
  r.state = State::kReceived;
  // Time for the decode call to claim it.
  r.lease_deadline = options_.clock->Now() + absl::FromChrono(r.lease);
  return absl::OkStatus();
}

void ReservationTable::AbortPush(const std::string& reservation_id, const absl::Status& why) {
  Release(reservation_id);
}

}  // namespace baton::decode_worker
