// Memory for a CPU backend's copies of weight matrices, on transparent huge pages.
//
// A decode step streams every weight byte once (96 MB on the default model). On 4 KiB pages that
// is a TLB miss and a page walk every 4 KiB of each stream, and the hardware prefetchers stop at
// every page's end. The arena cuts its pieces from slabs that start on 2 MiB boundaries and are
// marked MADV_HUGEPAGE, so that where the kernel's transparent huge pages are "always" or
// "madvise" (/sys/kernel/mm/transparent_hugepage/enabled), the copies lie on 2 MiB pages. Pieces
// follow one another in a slab (each 64-byte aligned), so a layer's small matrices share pages
// and the waste is at most the unused tail of each slab's last touched page. A slab is unmapped
// when the last piece cut from it is released.
//
// Memory is mapped, not touched: a page becomes resident when its piece is first written.
//
// Thread-safety: none; one owner (a backend, itself single-threaded) calls it.
#ifndef BATON_KERNELS_CPU_WEIGHT_ARENA_H_
#define BATON_KERNELS_CPU_WEIGHT_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::kernels {

class WeightArena {
 public:
  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  static constexpr size_t kPieceAlignment = 64;
  static constexpr size_t kMaxPieceBytes = size_t{1} << 48;  // keeps the rounding from wrapping

  // Slabs of `slab_bytes` (rounded up to whole huge pages); a larger piece gets a slab of its own.
  explicit WeightArena(size_t slab_bytes = size_t{32} << 20);
  ~WeightArena();  // unmaps every slab; pieces still held become invalid
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;

  // A piece of `bytes`, 64-byte aligned, zero-filled (pieces come from fresh mappings and are
  // never reused). INVALID_ARGUMENT for 0 bytes; RESOURCE_EXHAUSTED, naming the size, past
  // kMaxPieceBytes or when no memory can be mapped.
  absl::StatusOr<std::span<uint8_t>> Allocate(size_t bytes);
  // Gives back a piece from Allocate (each once); its slab is unmapped when it held the last one.
  void Release(std::span<uint8_t> piece);

  // Bytes mapped for slabs now (for tests and accounting).
  size_t mapped_bytes() const;

 private:
  struct Slab {
    uint8_t* base = nullptr;
    size_t bytes = 0;
    size_t used = 0;   // the next piece starts here
    int64_t live = 0;  // pieces not yet released
  };

  // A fresh slab of at least `bytes`, on a 2 MiB boundary, asked for as huge pages.
  static absl::StatusOr<Slab> MapSlab(size_t bytes);

  const size_t slab_bytes_;
  std::vector<Slab> slabs_;  // pieces are cut from the last one
};

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_WEIGHT_ARENA_H_
