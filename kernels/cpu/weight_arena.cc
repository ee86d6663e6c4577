#include "kernels/cpu/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

#include "absl/log/check.h"
#include "absl/strings/str_cat.h"

namespace baton::kernels {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

WeightArena::WeightArena(size_t slab_bytes)
    : slab_bytes_(RoundUp(std::max<size_t>(slab_bytes, 1), kHugePageBytes)) {}

WeightArena::~WeightArena() {
  for (const Slab& s : slabs_) ::munmap(s.base, s.bytes);
}

absl::StatusOr<WeightArena::Slab> WeightArena::MapSlab(size_t bytes) {
  // Map a huge page more than asked and trim both ends, so the slab starts on a 2 MiB boundary.
  const size_t mapped = bytes + kHugePageBytes;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", bytes, " bytes for weight copies"));
  }
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = RoundUp(start, kHugePageBytes);
  if (aligned > start) ::munmap(p, aligned - start);
  const uintptr_t end = start + mapped;
  if (end > aligned + bytes) {
    ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  }
  auto* base = reinterpret_cast<uint8_t*>(aligned);
  // Advice only: where transparent huge pages are off, the slab stays on small pages.
  ::madvise(base, bytes, MADV_HUGEPAGE);
  return Slab{.base = base, .bytes = bytes};
}

absl::StatusOr<std::span<uint8_t>> WeightArena::Allocate(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("WeightArena: a piece of 0 bytes");
  if (bytes > kMaxPieceBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("WeightArena: a piece of ", bytes, " bytes is past the limit of ",
                     kMaxPieceBytes));
  }
  const size_t size = RoundUp(bytes, kPieceAlignment);
  if (slabs_.empty() || slabs_.back().bytes - slabs_.back().used < size) {
    absl::StatusOr<Slab> slab = MapSlab(std::max(slab_bytes_, RoundUp(size, kHugePageBytes)));
    if (!slab.ok()) return slab.status();
    slabs_.push_back(*slab);
  }
  Slab& s = slabs_.back();
  std::span<uint8_t> piece(s.base + s.used, bytes);
  s.used += size;
  ++s.live;
  return piece;
}

void WeightArena::Release(std::span<uint8_t> piece) {
  auto it = std::find_if(slabs_.begin(), slabs_.end(), [&](const Slab& s) {
    return piece.data() >= s.base && piece.data() < s.base + s.bytes;
  });
  CHECK(it != slabs_.end()) << "WeightArena::Release: not a piece of this arena";
  CHECK_GT(it->live, 0) << "WeightArena::Release: piece released twice";
  if (--it->live > 0) return;
  ::munmap(it->base, it->bytes);
  slabs_.erase(it);
}

size_t WeightArena::mapped_bytes() const {
  size_t total = 0;
  for (const Slab& s : slabs_) total += s.bytes;
  return total;
}

}  // namespace baton::kernels
