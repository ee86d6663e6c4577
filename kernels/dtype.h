// Element and block-quantized data types of tensors (the GGML type ids, which GGUF files store).
//
// A quantized type packs `block_size` consecutive elements of a row into `block_bytes` bytes;
// a row's length must be a multiple of the block size. Plain types have block_size 1.
// Everything here is constexpr data and pure functions: safe from any thread.
#ifndef BATON_KERNELS_DTYPE_H_
#define BATON_KERNELS_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace baton::kernels {

// Values are GGML's `ggml_type` ids, as stored in GGUF tensor infos.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kMXFP4 = 39,
};

struct DTypeTraits {
  DType dtype;
  std::string_view name;  // GGML's name, e.g. "q4_1"
  int32_t block_size;     // elements per block
  int32_t block_bytes;    // bytes per block
  bool can_dequantize;    // DequantizeRow supports it
};

// Traits of a GGML type id; nullopt for ids that baton does not know (including negative ids
// reinterpreted as large unsigned values).
std::optional<DTypeTraits> LookupDType(uint32_t ggml_type_id);

// Traits of a known type. Programmer error (CHECK) for an id not in the enum above.
const DTypeTraits& Traits(DType dtype);

inline std::string_view DTypeName(DType dtype) { return Traits(dtype).name; }

}  // namespace baton::kernels

#endif  // BATON_KERNELS_DTYPE_H_
