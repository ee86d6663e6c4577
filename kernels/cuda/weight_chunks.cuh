// Device-side dequantization of weight rows, 32 consecutive elements ("a chunk") at a time: the
// one place that knows GGML's block layouts on the GPU (kernels/cpu/dequantize.cc is the host's).
// Every quantized type's blocks are a whole number of chunks (32 or 256 elements); the float
// operations follow the host reference's order without contraction, so the values are the same.
//
// Each loader is a type with
//   static constexpr bool kPlain;  // one element per block: rows may end in a partial chunk
//   __device__ static void Load(const uint8_t* row, int64_t c, float* y);  // y[0, 32) = chunk c
//   __device__ static float LoadOne(const uint8_t* row, int64_t i);       // element i (kPlain)
#ifndef BATON_KERNELS_CUDA_WEIGHT_CHUNKS_CUH_
#define BATON_KERNELS_CUDA_WEIGHT_CHUNKS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/lane_primitives.h"
#include "kernels/dtype.h"

namespace baton::kernels::cuda {

constexpr int kChunk = 32;

__device__ __forceinline__ float F16At(const uint8_t* p) {  // p is 2-byte aligned
  return __half2float(*reinterpret_cast<const __half*>(p));
}

__device__ __forceinline__ uint32_t U32At(const uint8_t* p) {  // any alignment
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// out[0, kBytes) = p[0, kBytes), read in the widest words p's alignment (kAlign bytes) allows:
// fewer load instructions than bytes one at a time.
template <int kBytes, int kAlign>
__device__ __forceinline__ void CopyBytes(const uint8_t* p, uint8_t* out) {
  if constexpr (kAlign % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) {
      const uint32_t w = reinterpret_cast<const uint32_t*>(p)[i];
#pragma unroll
      for (int k = 0; k < 4; ++k) out[4 * i + k] = static_cast<uint8_t>(w >> (8 * k));
    }
  } else if constexpr (kAlign % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 2; ++i) {
      const uint16_t w = reinterpret_cast<const uint16_t*>(p)[i];
      out[2 * i] = static_cast<uint8_t>(w);
      out[2 * i + 1] = static_cast<uint8_t>(w >> 8);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kBytes; ++i) out[i] = p[i];
  }
}

// Quantized loaders have no single-element access (their rows are whole chunks).
struct QuantizedChunk {
  static constexpr bool kPlain = false;
  __device__ static float LoadOne(const uint8_t*, int64_t) { return 0.0f; }
};

struct ChunkF32 {
  static constexpr bool kPlain = true;
  __device__ static float LoadOne(const uint8_t* row, int64_t i) {
    return reinterpret_cast<const float*>(row)[i];
  }
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    for (int j = 0; j < kChunk; ++j) y[j] = LoadOne(row, c * kChunk + j);
  }
};

struct ChunkF16 {
  static constexpr bool kPlain = true;
  __device__ static float LoadOne(const uint8_t* row, int64_t i) {
    return __half2float(reinterpret_cast<const __half*>(row)[i]);
  }
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    for (int j = 0; j < kChunk; ++j) y[j] = LoadOne(row, c * kChunk + j);
  }
};

struct ChunkBF16 {
  static constexpr bool kPlain = true;
  __device__ static float LoadOne(const uint8_t* row, int64_t i) {
    return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
  }
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    for (int j = 0; j < kChunk; ++j) y[j] = LoadOne(row, c * kChunk + j);
  }
};

// Q4_0 (18 bytes / 32): f16 d; u8 qs[16]; (nibble - 8) * d.
struct ChunkQ4_0 : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 18 * c;
    const float d = F16At(b);
    uint8_t qs[16];
    CopyBytes<16, 2>(b + 2, qs);
    for (int j = 0; j < 16; ++j) {
      y[j] = __fmul_rn(static_cast<float>((qs[j] & 0x0f) - 8), d);
      y[j + 16] = __fmul_rn(static_cast<float>((qs[j] >> 4) - 8), d);
    }
  }
};

// Q4_1 (20 bytes / 32): f16 d, m; u8 qs[16]; nibble * d + m.
struct ChunkQ4_1 : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 20 * c;
    const float d = F16At(b), m = F16At(b + 2);
    uint8_t qs[16];
    CopyBytes<16, 4>(b + 4, qs);
    for (int j = 0; j < 16; ++j) {
      y[j] = __fadd_rn(__fmul_rn(static_cast<float>(qs[j] & 0x0f), d), m);
      y[j + 16] = __fadd_rn(__fmul_rn(static_cast<float>(qs[j] >> 4), d), m);
    }
  }
};

// Q5_0 (22 bytes / 32): f16 d; u32 qh; u8 qs[16]; (nibble | bit << 4) - 16, times d.
struct ChunkQ5_0 : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 22 * c;
    const float d = F16At(b);
    const uint32_t qh = U32At(b + 2);
    uint8_t qs[16];
    CopyBytes<16, 2>(b + 6, qs);
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = __fmul_rn(static_cast<float>(lo - 16), d);
      y[j + 16] = __fmul_rn(static_cast<float>(hi - 16), d);
    }
  }
};

// Q5_1 (24 bytes / 32): f16 d, m; u32 qh; u8 qs[16]; q * d + m.
struct ChunkQ5_1 : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 24 * c;
    const float d = F16At(b), m = F16At(b + 2);
    const uint32_t qh = U32At(b + 4);
    uint8_t qs[16];
    CopyBytes<16, 4>(b + 8, qs);
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = __fadd_rn(__fmul_rn(static_cast<float>(lo), d), m);
      y[j + 16] = __fadd_rn(__fmul_rn(static_cast<float>(hi), d), m);
    }
  }
};

// Q8_0 (34 bytes / 32): f16 d; i8 qs[32]; q * d.
struct ChunkQ8_0 : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 34 * c;
    const float d = F16At(b);
    uint8_t qs[32];
    CopyBytes<32, 2>(b + 2, qs);
    for (int j = 0; j < kChunk; ++j) {
      y[j] = __fmul_rn(static_cast<float>(static_cast<int8_t>(qs[j])), d);
    }
  }
};

// The K-quants: chunk c is sub-range j = c % 8 (32 elements) of super-block c / 8 (256).

// Q2_K (84 bytes / 256): u8 scales[16]; u8 qs[64]; f16 d, dmin. Element 32 j + l: 2-bit field
// j % 4 of qs[32 (j / 4) + l]; sub-block 2 j + l / 16 gives scale (low nibble) and min (high).
struct ChunkQ2_K : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 84 * (c >> 3);
    const int j = static_cast<int>(c & 7);
    const float d = F16At(b + 80), dmin = F16At(b + 82);
    const uint8_t* qs = b + 16 + 32 * (j / 4);
    for (int l = 0; l < kChunk; ++l) {
      const uint8_t sc = b[2 * j + l / 16];
      const float dl = __fmul_rn(d, static_cast<float>(sc & 0x0f));
      const float ml = __fmul_rn(dmin, static_cast<float>(sc >> 4));
      const int q = (qs[l] >> (2 * (j % 4))) & 3;
      y[l] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
    }
  }
};

// Q3_K (110 bytes / 256): u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d. Signed 6-bit scales
// (stored + 32) packed as the host reference describes; bit j of hmask[l] clear means q - 4.
struct ChunkQ3_K : QuantizedChunk {
  __device__ static int Scale(const uint8_t* packed, int i) {
    const int low = i < 8 ? (packed[i] & 0x0f) : (packed[i - 8] >> 4);
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (low | (high << 4)) - 32;
  }
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 110 * (c >> 3);
    const int j = static_cast<int>(c & 7);
    const float d = F16At(b + 108);
    const uint8_t* qs = b + 32 + 32 * (j / 4);
    const float dl0 = __fmul_rn(d, static_cast<float>(Scale(b + 96, 2 * j)));
    const float dl1 = __fmul_rn(d, static_cast<float>(Scale(b + 96, 2 * j + 1)));
    for (int l = 0; l < kChunk; ++l) {
      const int low = (qs[l] >> (2 * (j % 4))) & 3;
      const int minus = ((b[l] >> j) & 1) ? 0 : 4;
      y[l] = __fmul_rn(l < 16 ? dl0 : dl1, static_cast<float>(low - minus));
    }
  }
};

// Q4_K (144 bytes / 256): f16 d, dmin; u8 scales[12]; u8 qs[128]. Sub-block j takes the low
// (j even) or high (j odd) nibbles of qs[32 (j / 2) + l]; (d * scale) * q - dmin * min.
struct ChunkQ4_K : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 144 * (c >> 3);
    const int j = static_cast<int>(c & 7);
    int sc, m;
    ScaleMinK4(b + 4, j, &sc, &m);
    const float dl = __fmul_rn(F16At(b), static_cast<float>(sc));
    const float ml = __fmul_rn(F16At(b + 2), static_cast<float>(m));
    uint8_t qs[32];
    CopyBytes<32, 16>(b + 16 + 32 * (j / 2), qs);
    const int shift = (j & 1) * 4;
    for (int l = 0; l < kChunk; ++l) {
      y[l] = __fsub_rn(__fmul_rn(dl, static_cast<float>((qs[l] >> shift) & 0x0f)), ml);
    }
  }
};

// Q5_K (176 bytes / 256): f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]. As Q4_K, with the
// fifth bit of element l of sub-block j in bit j of qh[l].
struct ChunkQ5_K : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 176 * (c >> 3);
    const int j = static_cast<int>(c & 7);
    int sc, m;
    ScaleMinK4(b + 4, j, &sc, &m);
    const float dl = __fmul_rn(F16At(b), static_cast<float>(sc));
    const float ml = __fmul_rn(F16At(b + 2), static_cast<float>(m));
    uint8_t qh[32], qs[32];
    CopyBytes<32, 16>(b + 16, qh);
    CopyBytes<32, 16>(b + 48 + 32 * (j / 2), qs);
    const int shift = (j & 1) * 4;
    for (int l = 0; l < kChunk; ++l) {
      const int q = ((qs[l] >> shift) & 0x0f) | (((qh[l] >> j) & 1) << 4);
      y[l] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
    }
  }
};

// Q6_K (210 bytes / 256): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d. Sub-range j is s = j % 4
// of half j / 4: the low (s < 2) or high nibbles of ql[64 half + 32 (s % 2) + l], bits 2 s of
// qh[32 half + l] above them; (d * scale) * (q - 32) with the scale of 16 elements.
struct ChunkQ6_K : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 210 * (c >> 3);
    const int j = static_cast<int>(c & 7);
    const int half = j / 4, s = j % 4;
    uint8_t ql[32], qh[32];
    CopyBytes<32, 2>(b + 64 * half + 32 * (s % 2), ql);
    CopyBytes<32, 2>(b + 128 + 32 * half, qh);
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * s;
    const float d = F16At(b + 208);
    const int nibble_shift = (s / 2) * 4;
    for (int l = 0; l < kChunk; ++l) {
      const int q = (((ql[l] >> nibble_shift) & 0x0f) | (((qh[l] >> (2 * s)) & 3) << 4)) - 32;
      const float dl = __fmul_rn(d, static_cast<float>(scales[l / 16]));
      y[l] = __fmul_rn(dl, static_cast<float>(q));
    }
  }
};

// Q8_K (292 bytes / 256): f32 d; i8 qs[256]; i16 bsums[16]; q * d.
struct ChunkQ8_K : QuantizedChunk {
  __device__ static void Load(const uint8_t* row, int64_t c, float* y) {
    const uint8_t* b = row + 292 * (c >> 3);
    const float d = *reinterpret_cast<const float*>(b);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 4) + 32 * (c & 7);
    for (int l = 0; l < kChunk; ++l) y[l] = __fmul_rn(static_cast<float>(qs[l]), d);
  }
};

// Dequantizing CTAs (device_matmul.cu, split_blocks.cu) stage their threads' chunks as halves
// in shared memory, then write them out 16 bytes per thread, consecutive threads to consecutive
// addresses (a thread writing its own 64 bytes would leave every store scattered over 32
// segments). `mine`: the calling thread's 32 halves of the staging, 16-byte aligned.
__device__ __forceinline__ void StageChunkAsHalves(const float* v, __half* mine) {
  __align__(16) __half2 halves[kChunk / 2];
#pragma unroll
  for (int j = 0; j < kChunk / 2; ++j) halves[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    reinterpret_cast<uint4*>(mine)[k] = reinterpret_cast<const uint4*>(halves)[k];
  }
}
// out[0, chunks * kChunk) = staged[...], by the CTA's `threads` threads (after a barrier).
__device__ __forceinline__ void WriteStagedChunks(const __half* staged, int64_t chunks,
                                                  int threads, __half* out) {
  const int pieces = static_cast<int>(chunks) * kChunk * 2 / 16;  // 16-byte pieces
  const uint4* from = reinterpret_cast<const uint4*>(staged);
  uint4* to = reinterpret_cast<uint4*>(out);
  for (int p = threadIdx.x; p < pieces; p += threads) to[p] = from[p];
}

// Calls fn(Loader{}) with the loader of `dtype`; false for a type with none (not
// can_dequantize).
template <typename Fn>
bool WithChunkLoader(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: fn(ChunkF32{}); return true;
    case DType::kF16: fn(ChunkF16{}); return true;
    case DType::kBF16: fn(ChunkBF16{}); return true;
    case DType::kQ4_0: fn(ChunkQ4_0{}); return true;
    case DType::kQ4_1: fn(ChunkQ4_1{}); return true;
    case DType::kQ5_0: fn(ChunkQ5_0{}); return true;
    case DType::kQ5_1: fn(ChunkQ5_1{}); return true;
    case DType::kQ8_0: fn(ChunkQ8_0{}); return true;
    case DType::kQ2_K: fn(ChunkQ2_K{}); return true;
    case DType::kQ3_K: fn(ChunkQ3_K{}); return true;
    case DType::kQ4_K: fn(ChunkQ4_K{}); return true;
    case DType::kQ5_K: fn(ChunkQ5_K{}); return true;
    case DType::kQ6_K: fn(ChunkQ6_K{}); return true;
    case DType::kQ8_K: fn(ChunkQ8_K{}); return true;
    default: return false;
  }
}

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_WEIGHT_CHUNKS_CUH_
