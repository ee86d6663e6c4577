// Process-wide heap settings for a server that moves hundreds of megabytes a second in 1 MiB
// messages (KV hand-off chunks, their gRPC slices, the receiver's parsed copies).
//
// glibc's defaults hand such buffers back to the kernel as soon as they are freed (its mmap
// threshold adapts only up to the size of the last freed block, and its trim threshold is twice
// that), so every chunk of every push page-faults fresh zeroed memory in again. Keeping freed
// memory in the heap up to kTrimThresholdBytes avoids that: `baton bench handoff --no-e2e`
// moves 1.7-1.9 GB/s instead of 1.0-1.2 GB/s on a 2-core Xeon (512..8176-token prompts). The
// cost is up to that much freed memory kept mapped per process.
//
// Thread-safety: call once, at the start of main, before other threads exist.
#ifndef BATON_BASE_ALLOCATOR_H_
#define BATON_BASE_ALLOCATOR_H_

#include <cstdint>

namespace baton {

inline constexpr int64_t kMmapThresholdBytes = 32LL << 20;   // larger blocks: own mappings
inline constexpr int64_t kTrimThresholdBytes = 256LL << 20;  // freed memory kept up to this

// Applies the settings above (glibc's mallopt; nothing elsewhere). Environment variables
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ still win when set.
void TuneHeapForBulkTransfers();

}  // namespace baton

#endif  // BATON_BASE_ALLOCATOR_H_
