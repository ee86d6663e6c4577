// Interleaved rows: a float weight matrix re-laid out so that the kernels' tiles read memory in
// one sequential stream.
//
// The float kernels (matmul_tiles.inc, bf16_matmul_avx512.cc) run a tile of 4 weight rows at
// once, unit by unit: four streams, each a row of about a kilobyte (a 576-wide F16 row). Streams
// that short never get the hardware prefetcher going, and a matrix beyond the last-level cache
// decodes at under half the memory bandwidth. Interleaved, the rows come in groups of
// kInterleaveRows: unit b of each row of a group, then unit b + 1 of each, ... The same bytes in
// another order, so the same kernel computes the same bits on either layout; only where it finds
// a row's units differs (RowBlocks). (The super-block types have a layout of their own:
// super_block_lanes.h.)
//
// The unit: 64 bytes (a cache line: 16 F32 or 32 F16 / BF16 values); rows must be a whole number
// of units.
//
// Layout: group g (rows g * G .. g * G + n_g - 1, where n_g = G except for a last partial group)
// starts at byte g * G * row_bytes; within it, unit b of the group's row j is at
// (b * n_g + j) * unit_bytes.
//
// Thread-safety: pure functions; InterleaveGroups writes disjoint bytes for disjoint groups.
#ifndef BATON_KERNELS_CPU_INTERLEAVED_ROWS_H_
#define BATON_KERNELS_CPU_INTERLEAVED_ROWS_H_

#include <algorithm>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/dtype.h"

namespace baton::kernels {

// Rows per interleaved group: the kernels' tile of weight rows at every level.
inline constexpr int kInterleaveRows = 4;

// Bytes of the unit a matrix of dtype with rows of n_cols values is interleaved by; 0 where it
// has no interleaved layout (types other than F32, F16, BF16; rows that are not a whole number of
// 64-byte units).
int64_t InterleaveUnitBytes(DType dtype, int64_t n_cols);

// The bytes of the float types' unit.
inline constexpr int64_t kFloatInterleaveUnitBytes = 64;

inline bool HasInterleavedLayout(DType dtype, int64_t n_cols) {
  return InterleaveUnitBytes(dtype, n_cols) > 0;
}

// Groups of w's rows.
inline int64_t InterleavedGroups(const WeightMatrix& w) {
  return (w.n_rows + kInterleaveRows - 1) / kInterleaveRows;
}

// Writes groups [g_begin, g_end) of w's interleaved form into out (the whole matrix's buffer, as
// many bytes as w's).
void InterleaveGroups(const WeightMatrix& w, int64_t g_begin, int64_t g_end, uint8_t* out);

// Writes row r of w as w.data stores it (RowBytes(w.dtype, w.n_cols) bytes) into row, from
// interleaved, w's interleaved form (w.data is not read).
void CopyInterleavedRow(const WeightMatrix& w, const uint8_t* interleaved, int64_t r,
                        uint8_t* row);

// Where row r's units of unit_bytes are: unit b at first + b * stride. args.interleave says the
// layout (1: rows as stored, row_bytes apart; kInterleaveRows: interleaved). The super-block
// kernels use it with interleave 1 and the block as the unit.
struct RowBlocks {
  const uint8_t* first;
  int64_t stride;
};
inline RowBlocks LocateRow(const MatMulArgs& args, int64_t r, int64_t unit_bytes) {
  const int64_t g = args.interleave;
  const int64_t group_first_row = r / g * g;
  const int64_t rows_in_group = std::min(g, args.n_rows - group_first_row);
  return {args.w + group_first_row * args.row_bytes + (r - group_first_row) * unit_bytes,
          rows_in_group * unit_bytes};
}

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_INTERLEAVED_ROWS_H_
