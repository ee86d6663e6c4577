// Interleaved rows: a weight matrix of super-block types (Q2_K..Q6_K) re-laid out so that the
// kernels' tiles read memory in one sequential stream.
//
// The kernels on the original rows (matmul_tiles.inc) run a tile of 4 weight rows at once, block
// by block: four streams, each a row of about a kilobyte (a 2048-wide Q4_K row is 1152 bytes).
// Streams that short never get the hardware prefetcher going, and a matrix beyond the last-level
// cache decodes at under half the memory bandwidth (on a 2-core AMD EPYC, 12-14 GB/s against the
// packed Q4_0 layout's 30 GB/s). Interleaved, the rows come in groups of kInterleaveRows: block b
// of each row of a group, then block b + 1 of each, ... The same bytes in another order, so the
// same kernel computes the same bits on either layout; only where it finds a row's blocks
// differs (RowBlocks).
//
// Layout: group g (rows g * G .. g * G + n_g - 1, where n_g = G except for a last partial group)
// starts at byte g * G * row_bytes; within it, block b of the group's row j is at
// (b * n_g + j) * block_bytes.
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

// Whether weights of dtype have an interleaved layout (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
bool HasInterleavedLayout(DType dtype);

// Groups of w's rows.
inline int64_t InterleavedGroups(const WeightMatrix& w) {
  return (w.n_rows + kInterleaveRows - 1) / kInterleaveRows;
}

// Writes groups [g_begin, g_end) of w's interleaved form into out (the whole matrix's buffer, as
// many bytes as w's).
void InterleaveGroups(const WeightMatrix& w, int64_t g_begin, int64_t g_end, uint8_t* out);

// Where row r's blocks are: block b at first + b * stride. args.interleave says the layout
// (1: rows as stored, row_bytes apart; kInterleaveRows: interleaved).
struct RowBlocks {
  const uint8_t* first;
  int64_t stride;
};
inline RowBlocks LocateRow(const MatMulArgs& args, int64_t r, int64_t block_bytes) {
  const int64_t g = args.interleave;
  const int64_t group_first_row = r / g * g;
  const int64_t rows_in_group = std::min(g, args.n_rows - group_first_row);
  return {args.w + group_first_row * args.row_bytes + (r - group_first_row) * block_bytes,
          rows_in_group * block_bytes};
}

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_INTERLEAVED_ROWS_H_
