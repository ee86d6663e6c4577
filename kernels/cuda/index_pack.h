// Several host arrays packed into one buffer, each at a 16-byte-aligned offset, so that an
// operation hands all the index arrays it needs to IndexUploader in one upload. Plain C++.
//
//   pack.Clear();
//   const size_t table = pack.Add(block_table, n_blocks);
//   const size_t positions = pack.Add(host_positions, n);
//   const void* base = uploader.Upload(pack);
//   Launch(IndexPack::At<int32_t>(base, table), IndexPack::At<int32_t>(base, positions), ...);
//
// Thread-safety: a value; one thread at a time.
#ifndef BATON_KERNELS_CUDA_INDEX_PACK_H_
#define BATON_KERNELS_CUDA_INDEX_PACK_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace baton::kernels::cuda {

class IndexPack {
 public:
  static constexpr size_t kAlignment = 16;

  void Clear() { bytes_.clear(); }

  // Appends a copy of host[0, count); returns its offset in the pack.
  template <typename T>
  size_t Add(const T* host, size_t count) {
    const size_t offset = (bytes_.size() + kAlignment - 1) / kAlignment * kAlignment;
    bytes_.resize(offset + count * sizeof(T));
    if (count > 0) std::memcpy(bytes_.data() + offset, host, count * sizeof(T));
    return offset;
  }

  const uint8_t* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }

  // The array Add put at `offset`, in a copy of the pack that starts at `base` (aligned to
  // kAlignment).
  template <typename T>
  static const T* At(const void* base, size_t offset) {
    return reinterpret_cast<const T*>(static_cast<const uint8_t*>(base) + offset);
  }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_INDEX_PACK_H_
