#include "engine/safetensors_file.h"

#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace baton::engine {
namespace {

using Json = nlohmann::json;

std::optional<kernels::DType> DTypeOf(const std::string& name) {
  if (name == "BF16") return kernels::DType::kBF16;
  if (name == "F16") return kernels::DType::kF16;
  if (name == "F32") return kernels::DType::kF32;
  if (name == "U8") return kernels::DType::kI8;  // bytes: MXFP4's blocks and scales
  return std::nullopt;
}

int64_t ElementBytes(kernels::DType dtype) {
  return dtype == kernels::DType::kF32 ? 4 : dtype == kernels::DType::kI8 ? 1 : 2;
}

// One header entry, checked against the data section [data, data + data_bytes).
absl::StatusOr<SafetensorsTensor> ReadEntry(const std::string& path, const std::string& name,
                                            const Json& entry, const uint8_t* data,
                                            uint64_t data_bytes) {
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "': ", what));
  };
  if (!entry.is_object()) return error("not an object");
  const Json& dtype_name = entry.value("dtype", Json());
  const std::optional<kernels::DType> dtype =
      dtype_name.is_string() ? DTypeOf(dtype_name) : std::nullopt;
  if (!dtype) {
    return error(absl::StrCat("dtype ", dtype_name.dump(), " is not loaded (BF16, F16, F32, U8 are)"));
  }
  const Json& shape = entry.value("shape", Json());
  if (!shape.is_array() || shape.size() > SafetensorsFile::kMaxDims) {
    return error(
        absl::StrCat("shape must be an array of at most ", SafetensorsFile::kMaxDims, " dims"));
  }
  SafetensorsTensor t{.name = name, .dtype = *dtype, .data = nullptr, .n_bytes = 0};
  uint64_t elements = 1;
  for (const Json& dim : shape) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (uint64_t{1} << 40)) {
      return error("a dim is not a non-negative integer below 2^40");
    }
    t.shape.push_back(dim.get<int64_t>());
    if (__builtin_mul_overflow(elements, dim.get<uint64_t>(), &elements)) {
      return error("shape overflows");
    }
  }
  const Json& offsets = entry.value("data_offsets", Json());
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return error("data_offsets must be [begin, end]");
  }
  const uint64_t begin = offsets[0], end = offsets[1];
  uint64_t expected = 0;
  if (begin > end || end > data_bytes ||
      __builtin_mul_overflow(elements, ElementBytes(*dtype), &expected) ||
      end - begin != expected) {
    return error(absl::StrCat("data_offsets [", begin, ", ", end, "] do not hold ", elements, " ",
                              dtype_name.get<std::string>(), " values inside the ", data_bytes,
                              "-byte data section"));
  }
  t.data = data + begin;
  t.n_bytes = expected;
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->file_ = *std::move(mapped);
  const uint64_t size = file->file_->size();
  uint64_t header_bytes = 0;
  if (size >= 8) std::memcpy(&header_bytes, file->file_->data(), 8);  // little-endian hosts
  if (size < 8 || header_bytes > kMaxHeaderBytes || header_bytes > size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a safetensors file (header length ",
                                                   header_bytes, ", file ", size,
                                                   " bytes; at most ", kMaxHeaderBytes, ")"));
  }
  const auto* header = reinterpret_cast<const char*>(file->file_->data() + 8);
  const Json json = Json::parse(header, header + header_bytes, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the header is not a JSON object"));
  }
  const uint8_t* data = file->file_->data() + 8 + header_bytes;
  for (const auto& [name, entry] : json.items()) {
    if (name == "__metadata__") continue;
    absl::StatusOr<SafetensorsTensor> t =
        ReadEntry(path, name, entry, data, size - 8 - header_bytes);
    if (!t.ok()) return t.status();
    file->tensors_.push_back(*std::move(t));
  }
  return file;
}

}  // namespace baton::engine
