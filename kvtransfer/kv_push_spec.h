// What one KV push carries and where it lands: a request's prompt KV, all layers, sent to its
// reservation on a decode worker.
//
// Layout of the data: for each layer, the sequence's blocks in block-table order; each block of
// one layer is `layer_block_bytes()` bytes: f16 [K|V][block_size][kv_dim] (engine/kv_cache.h).
// Thread-safety: plain value type.
#ifndef BATON_KVTRANSFER_KV_PUSH_SPEC_H_
#define BATON_KVTRANSFER_KV_PUSH_SPEC_H_

#include <cstdint>
#include <string>

namespace baton::kvtransfer {

struct KvPushSpec {
  std::string reservation_id;
  std::string model_fingerprint;
  int32_t n_layer = 0;
  int32_t kv_dim = 0;       // n_kv_head * head_dim
  int32_t block_size = 0;   // tokens per block
  int32_t n_tokens = 0;     // prompt tokens whose KV is pushed

  int32_t n_blocks() const { return (n_tokens + block_size - 1) / block_size; }
  int64_t layer_block_bytes() const { return int64_t{2} * block_size * kv_dim * 2; }
  int64_t total_bytes() const { return layer_block_bytes() * n_blocks() * n_layer; }
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_PUSH_SPEC_H_
