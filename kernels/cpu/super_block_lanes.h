// Super-block lanes: a registered Q2_K..Q6_K matrix re-laid out so that one 32-byte load holds
// the same 4 bytes of 8 rows' super-blocks, one row per 32-bit lane.
//
// The kernels on rows as stored unpack one row at a time: per super-block each row's scales are
// decoded on their own, and every 32 products take three instructions (vpmaddubsw, vpmaddwd by
// the group's multiplier, an add). In lanes, the scales of 8 rows decode together, and a u8 x s8
// dot product (vpdpbusd) of a lane vector with a broadcast activation dword leaves each row's
// sums in its own lane: one instruction per 32 products, each group's multipliers applied once
// for its 8 rows (super_block_tiles.inc). A group streams from memory front to back, in the
// order the kernels read it (LaneDwordSlot), and the kernels ask for the super-blocks ahead
// (PrefetchLaneBlockAhead).
//
// Layout: rows in groups of kLaneRows, the last group padded with zero rows. Group g starts at
// byte g * kLaneRows * row_bytes and holds its super-blocks in order, kLaneRows * block_bytes
// bytes each: dword q (q < block_bytes / 4) of the group's row j at byte
// (kLaneRows * LaneDwordSlot(dtype, q) + j) * 4, then the rest of each row's block (Q3_K and
// Q6_K: the 2 bytes of their f16 d) row after row. The same bytes as the rows hold, in another
// order.
//
// Thread-safety: pure functions; LayOutLaneGroups writes disjoint bytes for disjoint groups.
#ifndef BATON_KERNELS_CPU_SUPER_BLOCK_LANES_H_
#define BATON_KERNELS_CPU_SUPER_BLOCK_LANES_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/dtype.h"

namespace baton::kernels {

// Rows per lane group: the int32 lanes of a 256-bit vector.
inline constexpr int kLaneRows = 8;

// The super-block types: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool HasSuperBlockLanes(DType dtype);

// The slot of a block's dword q among its group's: the order in which the kernels read them, so
// that a group streams from memory front to back. As stored for all but Q6_K, whose kernels read
// its scales (dwords 48..51) first and then each run's low bits (ql, dwords 0..31) beside its
// high bits (qh, 32..47): scales, ql 0..7, qh 32..39, ql 8..23, qh 40..47, ql 24..31. (Read as
// stored, Q6_K decoded 45% slower per byte from memory on a 2-core AMD EPYC.)
constexpr int LaneDwordSlot(DType dtype, int q) {
  if (dtype != DType::kQ6_K) return q;
  if (q >= 48) return q - 48;      // scales
  if (q < 8) return 4 + q;         // ql of runs 0, 2
  if (q < 24) return 12 + q;       // ql of runs 1, 3 (8..15); 4, 6 (16..23)
  if (q < 32) return 20 + q;       // ql of runs 5, 7
  if (q < 40) return q - 20;       // qh of runs 0..3
  return q - 4;                    // qh of runs 4..7
}

inline int64_t LaneGroups(int64_t n_rows) { return (n_rows + kLaneRows - 1) / kLaneRows; }

// Bytes of w's lanes layout: its rows' bytes and the padding of a last partial group.
int64_t SuperBlockLanesBytes(const WeightMatrix& w);

// Writes groups [g_begin, g_end) of w's lanes layout into out (SuperBlockLanesBytes(w) bytes for
// the whole matrix).
void LayOutLaneGroups(const WeightMatrix& w, int64_t g_begin, int64_t g_end, uint8_t* out);

// Writes row r of w as w.data stores it (RowBytes(w.dtype, w.n_cols) bytes) into row, from lanes,
// w's lanes layout (w.data is not read).
void CopyLanesRow(const WeightMatrix& w, const uint8_t* lanes, int64_t r, uint8_t* row);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_SUPER_BLOCK_LANES_H_
