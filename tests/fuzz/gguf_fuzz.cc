// libFuzzer target for the GGUF reader: parse arbitrary bytes with GgufFile::FromBytes; when that
// succeeds, walk every metadata value, look every key and tensor up, and dequantize the first row
// of every tensor whose type supports it. ASan/UBSan (the fuzz build) catch any read outside the
// buffer; the asserts below catch a reader that accepts an inconsistent directory.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "engine/gguf_file.h"
#include "engine/gguf_value.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/dtype.h"

namespace {

using baton::engine::GgufFile;
using baton::engine::GgufTensorInfo;
using baton::engine::GgufValue;

void Require(bool condition) {
  if (!condition) std::abort();
}

// Touches every byte of a value (so a dangling or out-of-bounds string shows up under ASan).
size_t Walk(const GgufValue& v) {
  size_t sum = 0;
  if (v.is_string()) {
    for (char c : v.as_string()) sum += static_cast<unsigned char>(c);
  } else if (v.is_array()) {
    for (const GgufValue& e : v.as_array().values) {
      Require(e.type() == v.as_array().element_type);
      sum += Walk(e);
    }
  } else if (v.is_unsigned()) {
    sum += static_cast<size_t>(v.as_unsigned());
  } else if (v.is_signed()) {
    sum += static_cast<size_t>(v.as_signed());
  } else if (v.is_bool()) {
    sum += v.as_bool();
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file =
      GgufFile::FromBytes(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!file.ok()) return 0;
  const GgufFile& f = **file;

  volatile size_t sink = 0;
  for (const auto& [key, value] : f.metadata()) {
    Require(f.Find(key) == &value);
    sink = sink + Walk(value) + value.DebugString().size();
    (void)f.GetString(key);
    (void)f.GetUint(key);
    (void)f.GetInt(key);
    (void)f.GetFloat(key);
    (void)f.GetBool(key);
    (void)f.GetArray(key);
  }

  for (const GgufTensorInfo& t : f.tensors()) {
    Require(f.FindTensor(t.name) == &t);
    Require(!t.dims.empty() && t.dims.size() <= 4);
    Require(t.offset_in_file + t.n_bytes <= f.file_size());
    Require(t.offset_in_file % f.alignment() == 0 || t.offset_in_data % f.alignment() == 0);
    const baton::kernels::DTypeTraits& traits = baton::kernels::Traits(t.dtype);
    Require(t.row_length() % traits.block_size == 0);
    Require(static_cast<uint64_t>(baton::kernels::RowBytes(t.dtype, t.row_length())) *
                static_cast<uint64_t>(t.n_rows()) ==
            t.n_bytes);
    if (!traits.can_dequantize) continue;
    std::vector<float> row(static_cast<size_t>(t.row_length()));
    baton::kernels::DequantizeRow(t.dtype, t.data, row.data(), t.row_length());
    for (float x : row) sink = sink + (x == x);
  }
  (void)sink;
  return 0;
}
