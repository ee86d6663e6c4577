#include "kvtransfer/chunk_encoder.h"

#include <utility>

#include "absl/log/check.h"
#include "kvtransfer/kv_chunk_codec.h"

namespace baton::kvtransfer {

ChunkEncoder::ChunkEncoder(int32_t messages_ahead)
    : messages_ahead_(messages_ahead), thread_([this] { Loop(); }) {}

ChunkEncoder::~ChunkEncoder() {
  {
    absl::MutexLock lock(&mu_);
    CHECK(queues_.empty()) << "ChunkEncoder destroyed with streams it was not told to forget";
    stopping_ = true;
  }
  thread_.join();
}

void ChunkEncoder::Submit(GrpcPushStream* stream, ChunkJob job) {
  absl::MutexLock lock(&mu_);
  for (StreamQueue& queue : queues_) {
    if (queue.stream == stream) {
      queue.jobs.push_back(std::move(job));
      return;
    }
  }
  queues_.push_back({stream, {}});
  queues_.back().jobs.push_back(std::move(job));
}

void ChunkEncoder::Wake() {
  // Room in a stream shows up without this mutex changing; releasing it makes the loop's wait
  // evaluate its condition again.
  absl::MutexLock lock(&mu_);
}

void ChunkEncoder::Forget(GrpcPushStream* stream) {
  absl::MutexLock lock(&mu_);
  queues_.remove_if([stream](const StreamQueue& queue) { return queue.stream == stream; });
  auto idle = [this, stream]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return busy_ != stream; };
  mu_.Await(absl::Condition(&idle));
}

std::list<ChunkEncoder::StreamQueue>::iterator ChunkEncoder::ReadyLocked() {
  for (auto it = queues_.begin(); it != queues_.end(); ++it) {
    // A close waits for nothing; a chunk waits for room in its stream's queue.
    if (it->jobs.front().close || it->stream->queued() < messages_ahead_) return it;
  }
  return queues_.end();
}

bool ChunkEncoder::HasWorkLocked() { return stopping_ || ReadyLocked() != queues_.end(); }

bool ChunkEncoder::Run(GrpcPushStream* stream, const ChunkJob& job) {
  if (job.close) {
    stream->Close();
    return true;
  }
  if (job.ready) {
    if (!job.ready(job.deadline).ok()) {
      stream->Cancel();  // the push has recorded why (GrpcKvPush::SendLayer)
      return false;
    }
  }
  return stream->Enqueue(
      EncodeChunkMessage(job.layer, job.first_block, job.blocks, job.block_bytes, *job.loans));
}

void ChunkEncoder::Loop() {
  while (true) {
    GrpcPushStream* stream;
    ChunkJob job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &ChunkEncoder::HasWorkLocked));
      if (stopping_) return;
      auto ready = ReadyLocked();
      stream = ready->stream;
      job = std::move(ready->jobs.front());
      ready->jobs.pop_front();
      if (ready->jobs.empty()) {
        queues_.erase(ready);
      } else {
        queues_.splice(queues_.end(), queues_, ready);  // the other streams' turn next
      }
      busy_ = stream;
    }
    const bool accepted = Run(stream, job);
    absl::MutexLock lock(&mu_);
    busy_ = nullptr;
    // A stream that refused a message has broken; its push learns why from the call's status.
    if (!accepted) {
      queues_.remove_if([stream](const StreamQueue& queue) { return queue.stream == stream; });
    }
  }
}

}  // namespace baton::kvtransfer
