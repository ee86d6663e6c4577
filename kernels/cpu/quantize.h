// Round-to-nearest encoders of every weight type the kernels take: for synthetic models
// (engine/synthetic_model.h) and tests. Each block's scales come from its range (or largest
// magnitude) and every value is rounded to the nearest level: valid blocks, not llama.cpp's search
// for the scales that minimize the error (use llama-quantize for real models).
//
// Thread-safety: pure functions.
#ifndef BATON_KERNELS_CPU_QUANTIZE_H_
#define BATON_KERNELS_CPU_QUANTIZE_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/dtype.h"

namespace baton::kernels {

// Whether QuantizeRow takes dtype: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K.
bool CanQuantize(DType dtype);

// The type QuantizeRow takes whose GGML name is `name` (any case: "q8_0", "Q4_K"), if any.
std::optional<DType> QuantizableTypeNamed(std::string_view name);

// out [RowBytes(dtype, n)] = x [n] in dtype. dtype must have CanQuantize and n be a multiple of
// its block size (programmer errors otherwise).
void QuantizeRow(DType dtype, const float* x, int64_t n, uint8_t* out);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_QUANTIZE_H_
