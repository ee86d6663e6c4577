// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 weights re-laid out for the fast MatMul kernels
// (packed_matmul_avx512.cc; packed_matmul_avx2.cc takes each 64-byte vector as two 32-byte halves
// of 8 rows):
// 16 weight rows ("a group") side by side, block by block, so that one 64-byte vector holds one
// dword (4 consecutive values) of each of the 16 rows -- the layout of an AMX B tile, and the one
// that lets a vpdpbusd leave each row's block sum in its own lane.
//
// Layout: groups g = 0 .. ceil(n_rows / 16) - 1, each nb = n_cols / 32 blocks, each block
// GroupBlockBytes(dtype) bytes at (g * nb + b) * GroupBlockBytes:
//   Q4_0, Q4_1  4 vectors of 64 bytes; vector v, byte 4j + t = byte 4v + t of row j's 16 nibble
//               bytes, i.e. low nibble = value 4v + t, high nibble = value 16 + 4v + t (GGML's
//               nibble order); values unsigned 0..15
//   Q5_0, Q5_1  the 4 vectors of Q4_0, Q4_1, then the nibbles' fifth bits: 8 u64 masks, mask 2v
//               for vector v's low nibbles (bit 4j + t = the fifth bit of value 4v + t of row j),
//               mask 2v + 1 for its high nibbles (value 16 + 4v + t); values 0..31
//   Q8_0        8 vectors of 64 bytes; vector v, byte 4j + t = value 4v + t of row j (int8)
//   then        d[16] f16 (each row's scale), and for Q4_1, Q5_1 m[16] f16 (each row's minimum)
// Rows past n_rows in the last group are zero (their results are never stored).
//
// The MatMul arithmetic on packed weights is the whole-block arithmetic of every SIMD level
// (isa_kernels.h), the same bits as the kernels on the original rows (matmul_tiles.inc): for
// output y[i, r], with w the signed weights (Q4_0 nibble - 8, Q4_1 nibble, Q5_0 value - 16, Q5_1
// value, Q8_0 int8) and per block b in order,
//   P = sum of the block's 32 products                                exact int32
//   acc = fma(d_w[r, b] * d_x[i, b], f32(P), acc)                     f32 from 0
//   y = acc
//   and for Q4_1, Q5_1: summs = fma(m_w[r, b], s_x[i, b], summs) (f32 from 0); y += summs.
// In the packed layout, one u8 x s8 dot product of vector l with the broadcast activation dword l
// adds dword l's 4 products of all 16 rows (8 in an AVX2 half), each in its row's lane, so the
// rows stay in the lanes to the end.
// MatMulPackedScalar is the portable definition.
//
// Thread-safety: pure functions over caller-owned memory; disjoint groups may be packed
// concurrently.
#ifndef BATON_KERNELS_CPU_PACKED_BLOCK32_H_
#define BATON_KERNELS_CPU_PACKED_BLOCK32_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/dtype.h"

namespace baton::kernels {

inline constexpr int kPackedGroupRows = 16;

// The layout above as compile-time constants, for the kernels on packed weights.
template <DType kDType>
struct PackedGroupBlock {
  static constexpr bool kQ8 = kDType == DType::kQ8_0;
  static constexpr bool kHasMin = kDType == DType::kQ4_1 || kDType == DType::kQ5_1;
  static constexpr bool kFifthBit = kDType == DType::kQ5_0 || kDType == DType::kQ5_1;
  // Subtracted from the unsigned values: Q4_0's and Q5_0's weights are value - kOffset.
  static constexpr int kOffset = kDType == DType::kQ4_0 ? 8 : kDType == DType::kQ5_0 ? 16 : 0;
  static constexpr int kValueBytes = kQ8 ? 512 : 256;  // the 64-byte vectors
  static constexpr int kFifthOffset = kValueBytes;     // Q5: the 8 u64 masks
  static constexpr int kScaleOffset = kValueBytes + (kFifthBit ? 64 : 0);  // d[16] f16
  static constexpr int kMinOffset = kScaleOffset + 32;                     // m[16] f16
  static constexpr int kBlockBytes = kScaleOffset + (kHasMin ? 64 : 32);
};

// Whether weights of dtype have a packed layout (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
bool HasPackedLayout(DType dtype);

// Bytes of one block of one group; 0 for other dtypes.
int64_t GroupBlockBytes(DType dtype);

// Bytes of the whole packed matrix of n_rows x n_cols.
int64_t PackedBytes(DType dtype, int64_t n_rows, int64_t n_cols);

// Writes groups [g_begin, g_end) of w's packed form into packed (the whole matrix's buffer).
void PackGroups(const WeightMatrix& w, int64_t g_begin, int64_t g_end, uint8_t* packed);

// Writes row r of w as w.data stores it (RowBytes(w.dtype, w.n_cols) bytes) into row, from
// packed, w's packed form (w.data is not read).
void CopyPackedRow(const WeightMatrix& w, const uint8_t* packed, int64_t r, uint8_t* row);

// The arithmetic above, y[i, r] for i < args.n and r in [row_begin, row_end) (a
// MatMulRowsFn): args.w is the packed matrix, args.x kQ8_1 activations; args.row_bytes unused.
template <DType kDType>
void MatMulPackedScalar(const MatMulArgs& args, int64_t row_begin, int64_t row_end);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_PACKED_BLOCK32_H_
