// Dot products of split weight blocks (split_blocks.cuh) with activations quantized to 8 bits
// (Q8Rows), in integer arithmetic (dp4a: four int8 products summed per instruction), scaled to
// f32 once per 32 activations. The decode products' inner loop (quantized_matvec.cu).
//
// A row of weights is walked in "units", the piece one thread takes at a time: a whole block for
// the 32-value types, a quarter (64 values, 32 bytes of bits) of a Q4_K super-block, an eighth
// (8 values of each of 4 sub-blocks, 24 bytes) of a Q6_K one. Each dot type is
//   static constexpr int kUnitsPerBlock;
//   template <int kN> __device__ static void Accumulate(
//       const uint8_t* bits, const uint8_t* headers,  // the row's first block's
//       int64_t u, const Q8Rows& x, int n, float* acc);  // acc[i] += unit u's dot with x row i
//
// Activations: Q8Rows (q8_rows.h). Quantizing them costs a little accuracy (as the CPU
// backend's integer dot products do, kernels/cpu/); the f32 path stays for exact products.
#ifndef BATON_KERNELS_CUDA_QUANTIZED_DOTS_CUH_
#define BATON_KERNELS_CUDA_QUANTIZED_DOTS_CUH_

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/q8_rows.h"
#include "kernels/cuda/weight_chunks.cuh"

namespace baton::kernels::cuda {


__device__ __forceinline__ int4 Load16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const int4*>(p));
}
__device__ __forceinline__ int2 Load8(const uint8_t* p) {
  return __ldg(reinterpret_cast<const int2*>(p));
}
__device__ __forceinline__ float HalfAt(const uint8_t* p) {
  return __half2float(__ldg(reinterpret_cast<const __half*>(p)));
}

// x row i's 32 int8 of block xb as two int4, and its (d, d * sum).
struct XBlock {
  int4 lo, hi;
  float2 ds;
};
__device__ __forceinline__ XBlock LoadXBlock(const Q8Rows& x, int i, int64_t xb) {
  const uint8_t* q = reinterpret_cast<const uint8_t*>(x.q + i * x.n_cols) + 32 * xb;
  return {Load16(q), Load16(q + 16), x.ds[i * (x.n_cols / 32) + xb]};
}

// sum of nibbles (low or high half of each byte of w) times 4 activations each, over 4 words.
__device__ __forceinline__ int NibbleDot(int4 w, int shift, int4 a, int sum) {
  sum = __dp4a((w.x >> shift) & 0x0f0f0f0f, a.x, sum);
  sum = __dp4a((w.y >> shift) & 0x0f0f0f0f, a.y, sum);
  sum = __dp4a((w.z >> shift) & 0x0f0f0f0f, a.z, sum);
  return __dp4a((w.w >> shift) & 0x0f0f0f0f, a.w, sum);
}
__device__ __forceinline__ int ByteDot(int4 w, int4 a, int sum) {
  sum = __dp4a(w.x, a.x, sum);
  sum = __dp4a(w.y, a.y, sum);
  sum = __dp4a(w.z, a.z, sum);
  return __dp4a(w.w, a.w, sum);
}

// Q4_0: bits qs[16] (element j low nibble, j + 16 high); header f16 d; w = d (q - 8).
struct DotQ4_0 {
  static constexpr int kUnitsPerBlock = 1;
  template <int kN>
  __device__ static void Accumulate(const uint8_t* bits, const uint8_t* headers, int64_t u,
                                    const Q8Rows& x, int n, float* acc) {
    const int4 w = Load16(bits + 16 * u);
    const float d = HalfAt(headers + 2 * u);
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (i < n) {
        const XBlock a = LoadXBlock(x, i, u);
        const int s = NibbleDot(w, 4, a.hi, NibbleDot(w, 0, a.lo, 0));
        acc[i] += d * (a.ds.x * static_cast<float>(s) - 8.0f * a.ds.y);
      }
    }
  }
};

// Q4_1: as Q4_0 with header f16 d, m; w = d q + m.
struct DotQ4_1 {
  static constexpr int kUnitsPerBlock = 1;
  template <int kN>
  __device__ static void Accumulate(const uint8_t* bits, const uint8_t* headers, int64_t u,
                                    const Q8Rows& x, int n, float* acc) {
    const int4 w = Load16(bits + 16 * u);
    const float2 dm = __half22float2(__ldg(reinterpret_cast<const __half2*>(headers + 4 * u)));
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (i < n) {
        const XBlock a = LoadXBlock(x, i, u);
        const int s = NibbleDot(w, 4, a.hi, NibbleDot(w, 0, a.lo, 0));
        acc[i] += dm.x * a.ds.x * static_cast<float>(s) + dm.y * a.ds.y;
      }
    }
  }
};

// Q8_0: bits i8 qs[32]; header f16 d; w = d q.
struct DotQ8_0 {
  static constexpr int kUnitsPerBlock = 1;
  template <int kN>
  __device__ static void Accumulate(const uint8_t* bits, const uint8_t* headers, int64_t u,
                                    const Q8Rows& x, int n, float* acc) {
    const int4 w0 = Load16(bits + 32 * u), w1 = Load16(bits + 32 * u + 16);
    const float d = HalfAt(headers + 2 * u);
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (i < n) {
        const XBlock a = LoadXBlock(x, i, u);
        const int s = ByteDot(w1, a.hi, ByteDot(w0, a.lo, 0));
        acc[i] += d * a.ds.x * static_cast<float>(s);
      }
    }
  }
};

// ScaleMinK4 (lane_primitives.h) on a Q4_K header held in registers (scale byte k is byte
// k % 4 of word 1 + k / 4).
__device__ __forceinline__ int ScaleByte(const int4& h, int k) {
  const int word = k < 4 ? h.y : (k < 8 ? h.z : h.w);
  return (word >> (8 * (k % 4))) & 0xff;
}
__device__ __forceinline__ void ScaleMinK4Words(const int4& h, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = ScaleByte(h, j) & 63;
    *min = ScaleByte(h, j + 4) & 63;
  } else {
    *scale = (ScaleByte(h, j + 4) & 0x0f) | ((ScaleByte(h, j - 4) >> 6) << 4);
    *min = (ScaleByte(h, j + 4) >> 4) | ((ScaleByte(h, j) >> 6) << 4);
  }
}

// Q4_K: bits qs[128]: pair j (unit j of the super-block) is qs[32 j, 32 j + 32), low nibbles
// sub-block 2 j, high 2 j + 1; header f16 d, dmin, scales[12] (6-bit scale and min per
// sub-block); w = d sc q - dmin m.
struct DotQ4_K {
  static constexpr int kUnitsPerBlock = 4;
  template <int kN>
  __device__ static void Accumulate(const uint8_t* bits, const uint8_t* headers, int64_t u,
                                    const Q8Rows& x, int n, float* acc) {
    const int64_t block = u / 4;
    const int j = static_cast<int>(u % 4);
    const uint8_t* q = bits + 128 * block + 32 * j;
    const int4 w0 = Load16(q), w1 = Load16(q + 16);
    // The header in one 16-byte load: d and dmin, then the 12 scale bytes in words 1..3.
    const int4 h = Load16(headers + 16 * block);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&h.x));
    const float d = dm.x, dmin = dm.y;
    int sc0, m0, sc1, m1;
    ScaleMinK4Words(h, 2 * j, &sc0, &m0);
    ScaleMinK4Words(h, 2 * j + 1, &sc1, &m1);
    const int64_t xb = 8 * block + 2 * j;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (i < n) {
        const XBlock a0 = LoadXBlock(x, i, xb), a1 = LoadXBlock(x, i, xb + 1);
        const int s0 = NibbleDot(w1, 0, a0.hi, NibbleDot(w0, 0, a0.lo, 0));
        const int s1 = NibbleDot(w1, 4, a1.hi, NibbleDot(w0, 4, a1.lo, 0));
        acc[i] += d * (static_cast<float>(sc0) * a0.ds.x * static_cast<float>(s0) +
                       static_cast<float>(sc1) * a1.ds.x * static_cast<float>(s1)) -
                  dmin * (static_cast<float>(m0) * a0.ds.y + static_cast<float>(m1) * a1.ds.y);
      }
    }
  }
};

// Q6_K: bits ql[128], qh[64]; header i8 scales[16], f16 d. Unit (half h, part p) of the
// super-block holds elements 128 h + 32 k + l for k in 0..3 and l in [8 p, 8 p + 8): low (k even)
// or high nibbles of ql[64 h + 32 (k % 2) + l] with bits 2k of qh[32 h + l] above; the scale of
// 16 elements; w = d sc (q - 32).
struct DotQ6_K {
  static constexpr int kUnitsPerBlock = 8;

  // The four 6-bit values of quarter k for 4 consecutive l, as signed bytes.
  __device__ static int Quarter(int ql_a, int ql_b, int qh, int k) {
    int v;
    switch (k) {
      case 0: v = (ql_a & 0x0f0f0f0f) | ((qh << 4) & 0x30303030); break;
      case 1: v = (ql_b & 0x0f0f0f0f) | ((qh << 2) & 0x30303030); break;
      case 2: v = ((ql_a >> 4) & 0x0f0f0f0f) | (qh & 0x30303030); break;
      default: v = ((ql_b >> 4) & 0x0f0f0f0f) | ((qh >> 2) & 0x30303030); break;
    }
    return __vsubss4(v, 0x20202020);
  }

  template <int kN>
  __device__ static void Accumulate(const uint8_t* bits, const uint8_t* headers, int64_t u,
                                    const Q8Rows& x, int n, float* acc) {
    const int64_t block = u / 8;
    const int half = static_cast<int>(u % 8) / 4, p = static_cast<int>(u % 4);
    const uint8_t* b = bits + 192 * block;
    const int2 ql_a = Load8(b + 64 * half + 8 * p);
    const int2 ql_b = Load8(b + 64 * half + 32 + 8 * p);
    const int2 qh = Load8(b + 128 + 32 * half + 8 * p);
    const uint8_t* h = headers + 18 * block;
    const float d = HalfAt(h + 16);
    const auto* scales = reinterpret_cast<const int8_t*>(h) + 8 * half + p / 2;
    float sc[4];
    int w[4][2];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      sc[k] = static_cast<float>(scales[2 * k]);
      w[k][0] = Quarter(ql_a.x, ql_b.x, qh.x, k);
      w[k][1] = Quarter(ql_a.y, ql_b.y, qh.y, k);
    }
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      if (i < n) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int64_t xb = 8 * block + 4 * half + k;
          const int2 a = Load8(reinterpret_cast<const uint8_t*>(x.q + i * x.n_cols) + 32 * xb +
                               8 * p);
          const int s = __dp4a(w[k][1], a.y, __dp4a(w[k][0], a.x, 0));
          sum += sc[k] * x.ds[i * (x.n_cols / 32) + xb].x * static_cast<float>(s);
        }
        acc[i] += d * sum;
      }
    }
  }
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_QUANTIZED_DOTS_CUH_
