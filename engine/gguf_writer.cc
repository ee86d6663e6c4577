#include "engine/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string_view>
#include <utility>

#include "absl/log/check.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/dequantize.h"

namespace baton::engine {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kDefaultAlignment = 32;
constexpr std::string_view kAlignmentKey = "general.alignment";

// Debian 12's Abseil has its own string_view type, which std::string_view does not convert to.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

template <typename T>
void Put(std::string* out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // the host is little-endian (checked by gguf_file.cc)
  out->append(bytes, sizeof(T));
}

void PutString(std::string* out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

// The encoding of `v` without its type tag.
void PutPayload(std::string* out, const GgufValue& v) {
  switch (v.type()) {
    case GgufValueType::kUint8:
      return Put<uint8_t>(out, static_cast<uint8_t>(v.as_unsigned()));
    case GgufValueType::kInt8:
      return Put<int8_t>(out, static_cast<int8_t>(v.as_signed()));
    case GgufValueType::kUint16:
      return Put<uint16_t>(out, static_cast<uint16_t>(v.as_unsigned()));
    case GgufValueType::kInt16:
      return Put<int16_t>(out, static_cast<int16_t>(v.as_signed()));
    case GgufValueType::kUint32:
      return Put<uint32_t>(out, static_cast<uint32_t>(v.as_unsigned()));
    case GgufValueType::kInt32:
      return Put<int32_t>(out, static_cast<int32_t>(v.as_signed()));
    case GgufValueType::kUint64:
      return Put<uint64_t>(out, v.as_unsigned());
    case GgufValueType::kInt64:
      return Put<int64_t>(out, v.as_signed());
    case GgufValueType::kFloat32:
      return Put<float>(out, static_cast<float>(v.as_float()));
    case GgufValueType::kFloat64:
      return Put<double>(out, v.as_float());
    case GgufValueType::kBool:
      return Put<uint8_t>(out, v.as_bool() ? 1 : 0);
    case GgufValueType::kString:
      return PutString(out, v.as_string());
    case GgufValueType::kArray: {
      const GgufValue::Array& a = v.as_array();
      Put<uint32_t>(out, static_cast<uint32_t>(a.element_type));
      Put<uint64_t>(out, a.values.size());
      for (const GgufValue& e : a.values) {
        CHECK(e.type() == a.element_type)
            << "GgufWriter: array of " << GgufValueTypeName(a.element_type) << " holds a "
            << GgufValueTypeName(e.type());
        PutPayload(out, e);
      }
      return;
    }
  }
  CHECK(false) << "GgufWriter: bad value type " << static_cast<uint32_t>(v.type());
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

void PadTo(std::string* out, uint64_t alignment) {
  out->resize(AlignUp(out->size(), alignment), '\0');
}

}  // namespace

GgufWriter::GgufWriter(Options options) : options_(options) {
  CHECK(options_.alignment != 0 && (options_.alignment & (options_.alignment - 1)) == 0)
      << "GgufWriter: alignment " << options_.alignment << " is not a power of two";
}

void GgufWriter::Add(std::string key, GgufValue value) {
  MetadataEntry e{std::move(key), static_cast<uint32_t>(value.type()), ""};
  PutPayload(&e.payload, value);
  metadata_.push_back(std::move(e));
}

void GgufWriter::AddUint8(std::string key, uint8_t v) {
  Add(std::move(key), GgufValue::Uint(GgufValueType::kUint8, v));
}
void GgufWriter::AddInt8(std::string key, int8_t v) {
  Add(std::move(key), GgufValue::Int(GgufValueType::kInt8, v));
}
void GgufWriter::AddUint16(std::string key, uint16_t v) {
  Add(std::move(key), GgufValue::Uint(GgufValueType::kUint16, v));
}
void GgufWriter::AddInt16(std::string key, int16_t v) {
  Add(std::move(key), GgufValue::Int(GgufValueType::kInt16, v));
}
void GgufWriter::AddUint32(std::string key, uint32_t v) {
  Add(std::move(key), GgufValue::Uint(GgufValueType::kUint32, v));
}
void GgufWriter::AddInt32(std::string key, int32_t v) {
  Add(std::move(key), GgufValue::Int(GgufValueType::kInt32, v));
}
void GgufWriter::AddUint64(std::string key, uint64_t v) {
  Add(std::move(key), GgufValue::Uint(GgufValueType::kUint64, v));
}
void GgufWriter::AddInt64(std::string key, int64_t v) {
  Add(std::move(key), GgufValue::Int(GgufValueType::kInt64, v));
}
void GgufWriter::AddFloat32(std::string key, float v) {
  Add(std::move(key), GgufValue::Float(GgufValueType::kFloat32, v));
}
void GgufWriter::AddFloat64(std::string key, double v) {
  Add(std::move(key), GgufValue::Float(GgufValueType::kFloat64, v));
}
void GgufWriter::AddBool(std::string key, bool v) { Add(std::move(key), GgufValue::Bool(v)); }
void GgufWriter::AddString(std::string key, std::string v) {
  Add(std::move(key), GgufValue::String(std::move(v)));
}

void GgufWriter::AddStringArray(std::string key, const std::vector<std::string>& v) {
  GgufValue::Array a{GgufValueType::kString, {}};
  a.values.reserve(v.size());
  for (const std::string& s : v) a.values.push_back(GgufValue::String(s));
  Add(std::move(key), GgufValue::MakeArray(std::move(a)));
}

void GgufWriter::AddInt32Array(std::string key, const std::vector<int32_t>& v) {
  GgufValue::Array a{GgufValueType::kInt32, {}};
  a.values.reserve(v.size());
  for (int32_t x : v) a.values.push_back(GgufValue::Int(GgufValueType::kInt32, x));
  Add(std::move(key), GgufValue::MakeArray(std::move(a)));
}

void GgufWriter::AddFloat32Array(std::string key, const std::vector<float>& v) {
  GgufValue::Array a{GgufValueType::kFloat32, {}};
  a.values.reserve(v.size());
  for (float x : v) a.values.push_back(GgufValue::Float(GgufValueType::kFloat32, x));
  Add(std::move(key), GgufValue::MakeArray(std::move(a)));
}

void GgufWriter::AddRawMetadata(std::string key, uint32_t type_id, std::string payload) {
  metadata_.push_back({std::move(key), type_id, std::move(payload)});
}

absl::Status GgufWriter::AddTensor(std::string name, kernels::DType dtype,
                                   std::vector<int64_t> dims, std::string_view data) {
  const kernels::DTypeTraits& traits = kernels::Traits(dtype);
  if (dims.empty() || dims.size() > 4) {
    return absl::InvalidArgumentError(absl::StrCat("GgufWriter: tensor '", name, "' has ",
                                                   dims.size(), " dims; expected 1 to 4"));
  }
  int64_t n_elements = 1;
  for (int64_t d : dims) {
    if (d <= 0 || __builtin_mul_overflow(n_elements, d, &n_elements)) {
      return absl::InvalidArgumentError(absl::StrCat("GgufWriter: tensor '", name, "' has dims [",
                                                     absl::StrJoin(dims, ", "), "]"));
    }
  }
  if (dims[0] % traits.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GgufWriter: tensor '", name, "': row length ", dims[0], " is not a multiple of the ",
        Sv(traits.name), " block size ", traits.block_size));
  }
  const uint64_t n_bytes = static_cast<uint64_t>(kernels::RowBytes(dtype, dims[0])) *
                           static_cast<uint64_t>(n_elements / dims[0]);
  if (data.size() != n_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("GgufWriter: tensor '", name, "' (", Sv(traits.name), " [",
                     absl::StrJoin(dims, ", "), "]) needs ", n_bytes, " bytes, got ", data.size()));
  }
  TensorEntry t;
  t.name = std::move(name);
  for (int64_t d : dims) t.dims.push_back(static_cast<uint64_t>(d));
  t.type_id = static_cast<uint32_t>(dtype);
  t.raw = false;
  t.offset_in_data = 0;
  t.data.assign(data.data(), data.size());
  tensors_.push_back(std::move(t));
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensorF32(std::string name, std::vector<int64_t> dims,
                                      const std::vector<float>& values) {
  return AddTensor(std::move(name), kernels::DType::kF32, std::move(dims),
                   std::string_view(reinterpret_cast<const char*>(values.data()),
                                    values.size() * sizeof(float)));
}

void GgufWriter::AddRawTensorInfo(std::string name, std::vector<uint64_t> dims, uint32_t type_id,
                                  uint64_t offset_in_data) {
  tensors_.push_back({std::move(name), std::move(dims), type_id, true, offset_in_data, ""});
}

std::string GgufWriter::BuildHeader() const {
  const uint64_t alignment = options_.alignment;
  bool has_alignment_key = false;
  for (const MetadataEntry& e : metadata_) has_alignment_key |= e.key == kAlignmentKey;
  const bool add_alignment_key = alignment != kDefaultAlignment && !has_alignment_key;

  std::string out;
  Put<uint32_t>(&out, kGgufMagic);
  Put<uint32_t>(&out, options_.version);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, metadata_.size() + (add_alignment_key ? 1 : 0));

  if (add_alignment_key) {
    PutString(&out, kAlignmentKey);
    Put<uint32_t>(&out, static_cast<uint32_t>(GgufValueType::kUint32));
    Put<uint32_t>(&out, static_cast<uint32_t>(alignment));
  }
  for (const MetadataEntry& e : metadata_) {
    PutString(&out, e.key);
    Put<uint32_t>(&out, e.type_id);
    out.append(e.payload);
  }

  uint64_t next_offset = 0;  // within the data section
  for (const TensorEntry& t : tensors_) {
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) Put<uint64_t>(&out, d);
    Put<uint32_t>(&out, t.type_id);
    if (t.raw) {
      Put<uint64_t>(&out, t.offset_in_data);
    } else {
      Put<uint64_t>(&out, next_offset);
      next_offset += AlignUp(t.data.size(), alignment);
    }
  }

  PadTo(&out, alignment);
  return out;
}

void GgufWriter::Emit(const std::function<void(std::string_view)>& emit) const {
  emit(BuildHeader());
  const std::string padding(options_.alignment, '\0');
  for (const TensorEntry& t : tensors_) {
    if (t.raw) continue;
    emit(t.data);
    emit(std::string_view(padding).substr(
        0, AlignUp(t.data.size(), options_.alignment) - t.data.size()));
  }
}

std::string GgufWriter::Build() const {
  std::string out;
  Emit([&out](std::string_view bytes) { out.append(bytes); });
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("GgufWriter: cannot create ", path));
  }
  bool write_ok = true;
  Emit([f, &write_ok](std::string_view bytes) {
    write_ok = write_ok && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  });
  const int close_rc = std::fclose(f);
  if (!write_ok || close_rc != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("GgufWriter: cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace baton::engine
