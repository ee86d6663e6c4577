#include "kernels/cuda/split_blocks.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch_helpers.cuh"
#include "kernels/cuda/weight_chunks.cuh"

namespace baton::kernels::cuda {
namespace {

// One thread per block: its header and bits to their places.
__global__ void SplitBlocksKernel(SplitGeometry g, const uint8_t* stored, int64_t n_blocks,
                                  uint8_t* bits, uint8_t* headers) {
  const int64_t block = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (block >= n_blocks) return;
  const uint8_t* from = stored + block * g.block_bytes;
  uint8_t* to_bits = bits + block * g.bits_bytes;
  uint8_t* to_header = headers + block * g.header_bytes();
  for (int o = 0; o < g.block_bytes; ++o) {
    if (o < g.bits_offset) {
      to_header[o] = from[o];
    } else if (o < g.bits_offset + g.bits_bytes) {
      to_bits[o - g.bits_offset] = from[o];
    } else {
      to_header[o - g.bits_bytes] = from[o];
    }
  }
}

// A CTA dequantizes kThreads chunks: it copies its blocks' bits and headers (two contiguous
// runs) into shared memory a word at a time, puts the blocks back together there in the stored
// layout, and each thread then reads its chunk with the stored type's loader (the values are
// the same bits as from the stored matrix), written out as DequantizeChunksKernel's are.
constexpr int kThreads = 256;
constexpr int kMaxStagedBytes = kThreads * 34;  // 256 Q8_0 blocks; 32 Q6_K blocks take 6,720
constexpr int kMaxBitsBytes = kThreads * 32;     // 256 Q8_0 blocks' bits
constexpr int kMaxHeaderBytes = kThreads * 4;    // 256 Q4_1 blocks' headers (32 Q6_K: 576)

// to[0, bytes) = from[0, bytes): words where both are 4-byte aligned (from is: the runs start at
// a multiple of 4 bytes), the tail byte by byte.
__device__ void CopyRun(const uint8_t* from, int bytes, uint8_t* to) {
  const int words = bytes / 4;
  for (int i = threadIdx.x; i < words; i += kThreads) {
    reinterpret_cast<uint32_t*>(to)[i] = reinterpret_cast<const uint32_t*>(from)[i];
  }
  for (int i = 4 * words + threadIdx.x; i < bytes; i += kThreads) to[i] = from[i];
}

template <typename Loader>
__global__ void DequantizeSplitKernel(SplitGeometry g, SplitView w, int64_t n_chunks_total,
                                      __half* out) {
  __shared__ __align__(16) uint8_t bits[kMaxBitsBytes];
  __shared__ __align__(16) uint8_t headers[kMaxHeaderBytes];
  __shared__ __align__(16) uint8_t blocks[kMaxStagedBytes];
  __shared__ __align__(16) __half staged[kThreads * kChunk];
  const int chunks_per_block = g.block_values / kChunk;
  const int64_t first_chunk = static_cast<int64_t>(blockIdx.x) * kThreads;
  const int64_t first_block = first_chunk / chunks_per_block;
  const int64_t n_blocks_total = n_chunks_total / chunks_per_block;
  const int n_blocks =
      static_cast<int>(min(static_cast<int64_t>(kThreads / chunks_per_block),
                           n_blocks_total - first_block));
  const int header = g.header_bytes();
  CopyRun(w.bits + first_block * g.bits_bytes, n_blocks * g.bits_bytes, bits);
  CopyRun(w.headers + first_block * header, n_blocks * header, headers);
  __syncthreads();
  for (int idx = threadIdx.x; idx < n_blocks * g.block_bytes; idx += kThreads) {
    const int k = idx / g.block_bytes, o = idx % g.block_bytes;
    uint8_t byte;
    if (o < g.bits_offset) {
      byte = headers[k * header + o];
    } else if (o < g.bits_offset + g.bits_bytes) {
      byte = bits[k * g.bits_bytes + o - g.bits_offset];
    } else {
      byte = headers[k * header + o - g.bits_bytes];
    }
    blocks[idx] = byte;
  }
  __syncthreads();
  const int64_t chunk = first_chunk + threadIdx.x;
  if (chunk < n_chunks_total) {
    const int64_t block = chunk / chunks_per_block;
    float v[kChunk];
    Loader::Load(blocks + (block - first_block) * g.block_bytes, chunk % chunks_per_block, v);
    StageChunkAsHalves(v, staged + threadIdx.x * kChunk);
  }
  __syncthreads();
  const int64_t chunks = min(static_cast<int64_t>(kThreads), n_chunks_total - first_chunk);
  WriteStagedChunks(staged, chunks, kThreads, out + first_chunk * kChunk);
}

// The loaders of the types SplitGeometryOf splits (only they get a dequantization kernel).
template <typename Loader>
constexpr bool kIsSplitLoader =
    std::is_same_v<Loader, ChunkQ4_0> || std::is_same_v<Loader, ChunkQ4_1> ||
    std::is_same_v<Loader, ChunkQ8_0> || std::is_same_v<Loader, ChunkQ4_K> ||
    std::is_same_v<Loader, ChunkQ6_K>;

}  // namespace

void LaunchSplitBlocks(const SplitGeometry& g, const uint8_t* stored, int64_t n_blocks,
                       uint8_t* out, cudaStream_t stream) {
  if (n_blocks == 0) return;
  SplitBlocksKernel<<<BlocksFor(n_blocks, 256), 256, 0, stream>>>(
      g, stored, n_blocks, out, out + SplitHeadersOffset(g, n_blocks));
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchDequantizeSplitToF16(DType dtype, const void* matrix, int64_t n_rows, int64_t n_cols,
                                uint16_t* out, cudaStream_t stream) {
  const std::optional<SplitGeometry> g = SplitGeometryOf(dtype);
  if (!g.has_value()) {
    const std::string reason = "no split layout for " + std::string(DTypeName(dtype));
    CudaFailed("LaunchDequantizeSplitToF16", reason.c_str(), __FILE__, __LINE__);
  }
  const int64_t n_blocks = n_rows * (n_cols / g->block_values);
  const int64_t n_chunks = n_rows * (n_cols / kChunk);
  const SplitView w = SplitViewOf(*g, matrix, n_blocks);
  WithChunkLoader(dtype, [&](auto loader) {
    using Loader = decltype(loader);
    if constexpr (kIsSplitLoader<Loader>) {
      DequantizeSplitKernel<Loader><<<BlocksFor(n_chunks, kThreads), kThreads, 0, stream>>>(
          *g, w, n_chunks, reinterpret_cast<__half*>(out));
    }
  });
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::kernels::cuda
