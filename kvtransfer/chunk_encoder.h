// The gRPC transport's encoding thread: it turns queued chunks (block pointers) into messages
// (kv_chunk_codec.h: the blocks hashed, and lent to the message rather than copied) and hands
// them to their streams, so the sender's thread (the prefill forward pass) neither hashes KV nor
// waits for the network. A chunk whose blocks
// are still being filled (ChunkJob::ready) is waited for here, before it is read: that wait
// holds up the other streams' chunks too, which a copy stream's order would hold up anyway. It encodes a stream's
// next chunk only while that stream has fewer than `messages_ahead` messages waiting to be
// written, so a push's encoded bytes stay bounded when the network is slower than compute; the
// blocks wait in the sender's KV cache meanwhile (the push's contract, kv_transport.h).
//
// Streams are served in turn, each stream's items in the order they were submitted.
//
// Thread-safety: thread-safe. Lock order: the encoder's mutex before a stream's.
#ifndef BATON_KVTRANSFER_CHUNK_ENCODER_H_
#define BATON_KVTRANSFER_CHUNK_ENCODER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/block_loans.h"
#include "kvtransfer/grpc_push_stream.h"
#include "kvtransfer/kv_transport.h"

namespace baton::kvtransfer {

// One item of a stream's queue: a chunk to encode and send, or the end of the stream.
struct ChunkJob {
  int32_t layer = 0;
  int32_t first_block = 0;
  std::vector<const uint8_t*> blocks;  // block first_block + i at blocks[i]
  size_t block_bytes = 0;
  BlockLoans* loans = nullptr;  // the push's, which lends the blocks to the message
  BlocksReady ready;  // called before the blocks are read, when set (kv_transport.h)
  std::chrono::system_clock::time_point deadline;  // the push's: ready's bound
  bool close = false;  // no chunk: Close the stream once everything before it was handed over
};

class ChunkEncoder {
 public:
  explicit ChunkEncoder(int32_t messages_ahead = 2);
  ChunkEncoder(const ChunkEncoder&) = delete;
  ChunkEncoder& operator=(const ChunkEncoder&) = delete;
  ~ChunkEncoder();  // every stream must have been forgotten

  // Queues `job` behind the stream's earlier ones.
  void Submit(GrpcPushStream* stream, ChunkJob job);

  // A stream wrote a message (it may have room again). Call from GrpcPushStream's on_written.
  void Wake();

  // Drops the stream's queued items and waits until none of them is being encoded. Afterwards
  // the encoder touches neither the stream nor the blocks of its jobs. Idempotent.
  void Forget(GrpcPushStream* stream);

 private:
  struct StreamQueue {
    GrpcPushStream* stream;
    std::deque<ChunkJob> jobs;
  };

  void Loop();
  // A queue whose stream can take its next item now; end() when none.
  std::list<StreamQueue>::iterator ReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWorkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Encodes (or closes) outside the lock; false when the stream refused the message.
  bool Run(GrpcPushStream* stream, const ChunkJob& job);

  const int32_t messages_ahead_;
  absl::Mutex mu_;
  std::list<StreamQueue> queues_ ABSL_GUARDED_BY(mu_);  // served front to back, then rotated
  GrpcPushStream* busy_ ABSL_GUARDED_BY(mu_) = nullptr;  // the stream whose item runs now
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_CHUNK_ENCODER_H_
