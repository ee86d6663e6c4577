#include "kernels/cpu/weight_arena.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton::kernels {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

uintptr_t Address(std::span<uint8_t> piece) { return reinterpret_cast<uintptr_t>(piece.data()); }

std::span<uint8_t> MustAllocate(WeightArena& arena, size_t bytes) {
  absl::StatusOr<std::span<uint8_t>> piece = arena.Allocate(bytes);
  EXPECT_TRUE(piece.ok()) << piece.status();
  return piece.ok() ? *piece : std::span<uint8_t>();
}

TEST(WeightArenaTest, PiecesAreAlignedZeroDisjointAndWritableToTheirEnd) {
  WeightArena arena(4 * kMiB);
  std::vector<std::span<uint8_t>> pieces;
  for (size_t bytes : {1, 63, 64, 65, 1000, 69'120, 207'360}) {
    std::span<uint8_t> piece = MustAllocate(arena, bytes);
    ASSERT_EQ(piece.size(), bytes);
    for (uint8_t b : piece) ASSERT_EQ(b, 0) << "a fresh piece of " << bytes << " bytes";
    EXPECT_EQ(Address(piece) % WeightArena::kPieceAlignment, 0u) << bytes << " bytes";
    std::memset(piece.data(), static_cast<int>(pieces.size() + 1), piece.size());
    pieces.push_back(piece);
  }
  // Each piece still holds its own byte everywhere: none overlaps another.
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (uint8_t b : pieces[i]) ASSERT_EQ(b, i + 1) << "piece " << i;
  }
  // The first piece starts the slab, on a huge page's boundary.
  EXPECT_EQ(Address(pieces[0]) % WeightArena::kHugePageBytes, 0u);
  EXPECT_EQ(arena.mapped_bytes(), 4 * kMiB);
}

TEST(WeightArenaTest, APieceLargerThanASlabGetsOneOfItsOwn) {
  WeightArena arena(2 * kMiB);
  std::span<uint8_t> small = MustAllocate(arena, 1000);
  std::span<uint8_t> large = MustAllocate(arena, 5 * kMiB + 3);
  EXPECT_EQ(Address(large) % WeightArena::kHugePageBytes, 0u);
  EXPECT_EQ(arena.mapped_bytes(), 2 * kMiB + 6 * kMiB);
  large[large.size() - 1] = 7;
  EXPECT_EQ(large[large.size() - 1], 7);
  arena.Release(large);
  EXPECT_EQ(arena.mapped_bytes(), 2 * kMiB);
  arena.Release(small);
}

TEST(WeightArenaTest, ASlabIsUnmappedWithItsLastPiece) {
  WeightArena arena(2 * kMiB);
  std::span<uint8_t> a = MustAllocate(arena, kMiB);
  std::span<uint8_t> b = MustAllocate(arena, kMiB / 2);
  std::span<uint8_t> c = MustAllocate(arena, kMiB);  // does not fit beside a and b
  EXPECT_EQ(arena.mapped_bytes(), 4 * kMiB);
  arena.Release(a);
  EXPECT_EQ(arena.mapped_bytes(), 4 * kMiB);  // b still lives in the first slab
  arena.Release(b);
  EXPECT_EQ(arena.mapped_bytes(), 2 * kMiB);
  arena.Release(c);
  EXPECT_EQ(arena.mapped_bytes(), 0u);
  // The arena goes on after being emptied.
  std::span<uint8_t> d = MustAllocate(arena, 100);
  EXPECT_EQ(Address(d) % WeightArena::kHugePageBytes, 0u);
  arena.Release(d);
}

TEST(WeightArenaTest, EmptyAndImpossiblePiecesAreErrors) {
  WeightArena arena;
  EXPECT_EQ(arena.Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status huge = arena.Allocate(~size_t{0}).status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.message().find("past the limit"), std::string::npos) << huge;
  const absl::Status unmappable = arena.Allocate(WeightArena::kMaxPieceBytes).status();
  EXPECT_EQ(unmappable.code(), absl::StatusCode::kResourceExhausted) << unmappable;
  EXPECT_EQ(arena.mapped_bytes(), 0u);
}

TEST(WeightArenaDeathTest, ReleasingAForeignPieceDies) {
  WeightArena arena;
  std::vector<uint8_t> elsewhere(64);
  EXPECT_DEATH(arena.Release(elsewhere), "not a piece of this arena");
}

// The kernel's transparent-huge-page mode: "always", "madvise" or "never" (the bracketed word).
std::string TransparentHugePageMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t open = line.find('[');
  const size_t close = line.find(']');
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

// The "THPeligible:" field of the mapping that holds `address` in /proc/self/smaps; -1 if absent.
int HugePageEligible(uintptr_t address) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = address >= begin && address < end;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

TEST(WeightArenaTest, SlabsAreAskedForAsHugePages) {
  const std::string mode = TransparentHugePageMode();
  if (mode != "always" && mode != "madvise") {
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' on this machine";
  }
  WeightArena arena(4 * kMiB);
  std::span<uint8_t> piece = MustAllocate(arena, 3 * kMiB);
  std::memset(piece.data(), 1, piece.size());
  const int eligible = HugePageEligible(Address(piece));
  if (eligible < 0) GTEST_SKIP() << "/proc/self/smaps has no THPeligible field here";
  // With mode "madvise", only the advice makes the mapping eligible.
  EXPECT_EQ(eligible, 1);
  arena.Release(piece);
}

}  // namespace
}  // namespace baton::kernels
