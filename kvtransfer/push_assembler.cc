#include "kvtransfer/push_assembler.h"

#include <algorithm>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace baton::kvtransfer {
namespace {

bool SameSpec(const KvPushSpec& a, const KvPushSpec& b) {
  return a.reservation_id == b.reservation_id && a.model_fingerprint == b.model_fingerprint &&
         a.n_layer == b.n_layer && a.kv_dim == b.kv_dim && a.block_size == b.block_size &&
         a.n_tokens == b.n_tokens && a.chunk_blocks == b.chunk_blocks &&
         a.first_block == b.first_block && a.dtype == b.dtype &&
         a.layer_windows == b.layer_windows;
}

}  // namespace

void RunWakeups(KvStreamWakeups& wakeups) {
  for (KvStreamWakeup& wakeup : wakeups) wakeup.waiter->Wake(wakeup.status);
  wakeups.clear();
}

PushAssembler::PushAssembler(PushRegistry* registry, KvReceiver* receiver,
                             const PushHeaderInfo& info, absl::Time deadline,
                             std::shared_ptr<LinkReceiver> link)
    : registry_(registry),
      receiver_(receiver),
      link_(std::move(link)),
      spec_(info.spec),
      n_streams_(info.n_streams),
      deadline_(deadline),
      streams_(info.n_streams, StreamState::kAbsent),
      cursor_(info.spec) {}

absl::Status PushAssembler::AddStreamLocked(const PushHeaderInfo& info) {
  if (!failure_.ok()) return failure_;
  if (!SameSpec(info.spec, spec_) || info.n_streams != n_streams_) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream ", info.stream_index, " of the push to reservation '",
                     spec_.reservation_id, "': header differs from the push's first stream"));
  }
  if (streams_[info.stream_index] != StreamState::kAbsent) {
    return absl::FailedPreconditionError(absl::StrCat("reservation '", spec_.reservation_id,
                                                      "' is already receiving on stream ",
                                                      info.stream_index));
  }
  streams_[info.stream_index] = StreamState::kLive;
  return absl::OkStatus();
}

absl::Status PushAssembler::CheckAtCursorLocked(const ReceivedChunk& chunk) const {
  if (chunk.layer == cursor_.layer() && chunk.first_block == cursor_.block()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(ChunkName(chunk), " out of order: expected ", cursor_.Describe()));
}

absl::Status PushAssembler::WriteLocked(const ReceivedChunk& chunk, KvStreamWakeups* wakeups) {
  if (absl::Status status = CheckAtCursorLocked(chunk); !status.ok()) return status;
  if (absl::Status status = CheckDeadline(); !status.ok()) return status;
  if (int64_t{chunk.first_block} + chunk.n_blocks > cursor_.range_end()) {
    return absl::InvalidArgumentError(absl::StrCat(ChunkName(chunk), " runs past the end of ",
                                                   cursor_.Describe()));
  }
  if (absl::Status written = WriteChunkLocked(chunk); !written.ok()) return written;
  cursor_.Advance(chunk.n_blocks);
  if (cursor_.done()) {
    // The receiver may have been slow: do not admit a push whose sender has given up.
    if (absl::Status status = CheckDeadline(); !status.ok()) return status;
    if (absl::Status ended = receiver_->EndPush(spec_.reservation_id); !ended.ok()) return ended;
    CompleteLocked(wakeups);
  }
  return absl::OkStatus();
}

absl::Status PushAssembler::WriteChunkLocked(const ReceivedChunk& chunk) {
  if (link_ == nullptr) {
    return receiver_->WriteBlocks(spec_.reservation_id, chunk.layer, chunk.first_block,
                                  chunk.n_blocks, chunk.data);
  }
  const absl::Time deadline = std::min(deadline_, absl::Now() + kLinkTransferTimeout);
  return receiver_->FillBlocks(
      spec_.reservation_id, chunk.layer, chunk.first_block, chunk.n_blocks,
      [&](std::span<uint8_t* const> blocks, size_t block_bytes) {
        return link_->Receive(chunk.link_sequence, blocks, block_bytes, deadline);
      });
}

void PushAssembler::CompleteLocked(KvStreamWakeups* wakeups) {
  complete_ = true;
  for (Parked& parked : parked_) wakeups->push_back({parked.waiter, absl::OkStatus()});
  parked_.clear();
  ConcludeLocked();
}

absl::Status PushAssembler::CheckDeadline() const {
  if (absl::Now() <= deadline_) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("push to reservation '", spec_.reservation_id, "' passed its deadline at ",
                   cursor_.Describe()));
}

void PushAssembler::DrainLocked(KvStreamWakeups* wakeups) {
  bool progressed = true;
  while (progressed && failure_.ok() && !complete_) {
    progressed = false;
    for (auto it = parked_.begin(); it != parked_.end(); ++it) {
      if (!it->has_chunk || it->chunk.layer != cursor_.layer() ||
          it->chunk.first_block != cursor_.block()) {
        continue;
      }
      Parked parked = std::move(*it);
      parked_.erase(it);
      absl::Status written = WriteLocked(parked.chunk, wakeups);
      if (!written.ok()) {
        wakeups->push_back({parked.waiter, written});
        FailLocked(written, wakeups);
        return;
      }
      wakeups->push_back({parked.waiter, absl::OkStatus()});
      progressed = true;
      break;
    }
  }
}

void PushAssembler::FailLocked(const absl::Status& why, KvStreamWakeups* wakeups,
                               bool link_in_step) {
  if (!failure_.ok() || complete_) return;
  failure_ = why;
  if (link_ != nullptr && !link_in_step) link_->Break(why);
  if (begun_) receiver_->AbortPush(spec_.reservation_id, why);
  for (Parked& parked : parked_) wakeups->push_back({parked.waiter, why});
  parked_.clear();
  ConcludeLocked();
}

void PushAssembler::ConcludeLocked() { registry_->Remove(spec_.reservation_id, this); }

absl::StatusOr<bool> PushAssembler::Offer(int32_t stream_index, KvStreamWaiter* waiter,
                                          ReceivedChunk chunk, KvStreamWakeups* wakeups) {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return failure_;
  absl::Status bad;
  if (complete_) {
    bad = absl::InvalidArgumentError(
        absl::StrCat(ChunkName(chunk), " after every layer of the push arrived"));
    // FailLocked leaves a completed push alone; its link may not be left out of step.
    if (link_ != nullptr) link_->Break(bad);
  } else if (chunk.layer < 0 || chunk.layer >= spec_.n_layer) {
    bad = absl::InvalidArgumentError(
        absl::StrCat(ChunkName(chunk), ": the push has ", spec_.n_layer, " layers"));
  } else if (StreamOfLayer(chunk.layer, n_streams_) != stream_index) {
    bad = absl::InvalidArgumentError(absl::StrCat(ChunkName(chunk), " arrived on stream ",
                                                  stream_index, ", belongs on stream ",
                                                  StreamOfLayer(chunk.layer, n_streams_)));
  } else if (!cursor_.InOneRange(chunk.layer, chunk.first_block, chunk.n_blocks)) {
    bad = absl::InvalidArgumentError(absl::StrCat(
        ChunkName(chunk), " is outside the layer's blocks sent [",
        spec_.LayerFirstBlock(chunk.layer), ", ", spec_.n_blocks(), ") or spans two ranges of ",
        spec_.range_blocks()));
  } else if (cursor_.IsAhead(chunk.layer, chunk.first_block) &&
             StreamOfLayer(cursor_.layer(), n_streams_) != stream_index) {
    // Waits for the other streams to bring the layers before it.
    parked_.push_back({stream_index, waiter, /*has_chunk=*/true, std::move(chunk)});
    return true;
  } else {
    bad = WriteLocked(chunk, wakeups);
  }
  if (!bad.ok()) {
    FailLocked(bad, wakeups);
    return bad;
  }
  DrainLocked(wakeups);
  return false;
}

absl::StatusOr<bool> PushAssembler::EndStream(int32_t stream_index, KvStreamWaiter* waiter,
                                              KvStreamWakeups* wakeups) {
  absl::MutexLock lock(&mu_);
  if (streams_[stream_index] == StreamState::kLive) streams_[stream_index] = StreamState::kEnded;
  if (!failure_.ok()) return failure_;
  const bool owes_chunks = cursor_.AnyAhead([&](int32_t layer) {
    return StreamOfLayer(layer, n_streams_) == stream_index;
  });
  if (!complete_ && owes_chunks) {
    absl::Status missing = absl::InvalidArgumentError(
        absl::StrCat("stream ", stream_index, " of the push to reservation '", spec_.reservation_id,
                     "' ended before its chunks arrived (next expected: ", cursor_.Describe(),
                     ")"));
    // The sender stopped cleanly: every transfer it announced on a link was received.
    FailLocked(missing, wakeups, /*link_in_step=*/true);
    return missing;
  }
  if (complete_) return false;
  parked_.push_back({stream_index, waiter, /*has_chunk=*/false, ReceivedChunk()});
  return true;
}

bool PushAssembler::BreakStream(int32_t stream_index, const absl::Status& why,
                                KvStreamWakeups* wakeups) {
  absl::MutexLock lock(&mu_);
  bool was_parked = false;
  for (auto it = parked_.begin(); it != parked_.end(); ++it) {
    if (it->stream_index == stream_index) {
      parked_.erase(it);
      was_parked = true;
      break;
    }
  }
  // A stream that is neither live nor parked has seen the push conclude: this changes nothing.
  streams_[stream_index] = StreamState::kEnded;
  FailLocked(why, wakeups);
  return was_parked;
}

absl::StatusOr<std::shared_ptr<PushAssembler>> PushRegistry::Join(const PushHeaderInfo& info,
                                                                  absl::Time deadline) {
  std::shared_ptr<LinkReceiver> link;
  if (!info.link_id.empty()) {
    if (links_ == nullptr) {
      return absl::FailedPreconditionError(
          "this worker takes no KV over links: push the data in the messages");
    }
    absl::StatusOr<std::shared_ptr<LinkReceiver>> found = links_->Find(info.link_id);
    if (!found.ok()) return found.status();
    link = *std::move(found);
  }
  absl::StatusOr<std::shared_ptr<PushAssembler>> joined = JoinPush(info, deadline, link);
  // The sender may have posted the refused push's first transfers already (a send can complete
  // before this end posts its receive): the two ends are out of step.
  if (!joined.ok() && link != nullptr) link->Break(joined.status());
  return joined;
}

absl::StatusOr<std::shared_ptr<PushAssembler>> PushRegistry::JoinPush(
    const PushHeaderInfo& info, absl::Time deadline, std::shared_ptr<LinkReceiver> link) {
  auto fresh = std::make_shared<PushAssembler>(this, receiver_, info, deadline, std::move(link));
  std::shared_ptr<PushAssembler> existing;
  {
    // Nobody else can see `fresh` yet, so holding its mutex while publishing it keeps the lock
    // order (assembler, then registry) and makes later streams wait for BeginPush's verdict.
    absl::MutexLock fresh_lock(&fresh->mu_);
    {
      absl::MutexLock lock(&mu_);
      auto [it, inserted] = pushes_.try_emplace(info.spec.reservation_id, fresh);
      if (!inserted) existing = it->second;
    }
    if (existing == nullptr) {
      absl::Status begun = receiver_->BeginPush(info.spec);
      if (!begun.ok()) {
        fresh->failure_ = begun;  // later streams of this push get the same verdict
        fresh->ConcludeLocked();
        return begun;
      }
      fresh->begun_ = true;
      absl::Status added = fresh->AddStreamLocked(info);
      if (!added.ok()) return added;  // cannot happen: a fresh push has no streams
      return fresh;
    }
  }
  absl::MutexLock lock(&existing->mu_);
  absl::Status added = existing->AddStreamLocked(info);
  if (!added.ok()) return added;
  return existing;
}

void PushRegistry::Remove(const std::string& reservation_id, const PushAssembler* assembler) {
  absl::MutexLock lock(&mu_);
  auto it = pushes_.find(reservation_id);
  if (it != pushes_.end() && it->second.get() == assembler) pushes_.erase(it);
}

size_t PushRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return pushes_.size();
}

}  // namespace baton::kvtransfer
