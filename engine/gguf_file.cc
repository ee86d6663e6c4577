#include "engine/gguf_file.h"

#include <malloc.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/log/check.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace baton::engine {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr std::string_view kAlignmentKey = "general.alignment";

// Fewest bytes a metadata entry or tensor info can take: they bound the counts in the header.
constexpr uint64_t kMinMetadataEntryBytes = 8 + 4 + 1;  // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;  // name length, n_dims, 1 dim, type, offset

// Fewest bytes the payload of a value of `type` takes (its type tag excluded); nullopt for an
// unknown type id.
std::optional<uint64_t> MinPayloadBytes(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
      return 8;  // length
    case GgufValueType::kArray:
      return 4 + 8;  // element type, count
  }
  return std::nullopt;
}

// Debian 12's Abseil has its own string_view type, which std::string_view does not convert to.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string TypeIdText(uint32_t id) {
  if (static_cast<int32_t>(id) < 0) return absl::StrCat(id, " (", static_cast<int32_t>(id), ")");
  return absl::StrCat(id);
}

}  // namespace

// Reads and validates a GGUF image (file_.base_, file_.size_) into file_'s fields. Every read is
// bounds-checked against the bytes left; every size computation is overflow-checked.
class GgufParser {
 public:
  explicit GgufParser(GgufFile& file) : file_(file), base_(file.base_), size_(file.size_) {}

  absl::Status Parse();

 private:
  absl::Status ParseHeader(uint64_t* n_tensors, uint64_t* n_metadata);
  absl::Status ParseMetadataEntry(uint64_t index);
  absl::Status ParseValue(uint32_t type, uint64_t type_offset, int depth, GgufValue* out);
  absl::Status ParseArray(int depth, GgufValue* out);
  absl::Status ResolveAlignment();
  absl::Status ParseTensorInfo(uint64_t index);
  absl::Status PlaceTensors();

  uint64_t left() const { return size_ - pos_; }

  // What is being read, for error messages: "header", "key 'general.name'", "key 'x' element
  // [3][1]", "tensor #4", "tensor 'output.weight'".
  std::string Subject() const;
  // INVALID_ARGUMENT "gguf: <subject>: <problem> [<path>]".
  absl::Status Invalid(std::string_view problem) const;
  absl::Status Truncated(std::string_view what, uint64_t need) const;

  absl::Status ReadBytes(std::string_view what, uint64_t n, const uint8_t** p);
  template <typename T>
  absl::Status ReadScalar(std::string_view what, T* v);
  absl::Status ReadString(std::string_view what, std::string* s);

  GgufFile& file_;
  const uint8_t* const base_;
  const uint64_t size_;
  uint64_t pos_ = 0;

  enum class Section { kHeader, kMetadata, kTensors };
  Section section_ = Section::kHeader;
  uint64_t index_ = 0;                  // entry number within the section
  std::string name_;                    // the key or tensor name once read
  std::vector<uint64_t> element_path_;  // indices into (nested) arrays being read
  uint64_t n_array_elements_ = 0;       // over every metadata array so far

  std::vector<uint64_t> metadata_offsets_;  // where each entry starts
  std::vector<uint64_t> tensor_offsets_;    // where each tensor info starts
  uint64_t data_offset_ = 0;                // start of the tensor data section
};

std::string GgufParser::Subject() const {
  switch (section_) {
    case Section::kHeader:
      return "header";
    case Section::kMetadata: {
      std::string s = name_.empty() && element_path_.empty()
                          ? absl::StrCat("metadata entry #", index_)
                          : absl::StrCat("key '", name_, "'");
      if (!element_path_.empty()) {
        absl::StrAppend(&s, " element ");
        for (uint64_t i : element_path_) absl::StrAppend(&s, "[", i, "]");
      }
      return s;
    }
    case Section::kTensors:
      return name_.empty() ? absl::StrCat("tensor #", index_)
                           : absl::StrCat("tensor '", name_, "'");
  }
  return "?";
}

absl::Status GgufParser::Invalid(std::string_view problem) const {
  return absl::InvalidArgumentError(
      absl::StrCat("gguf: ", Subject(), ": ", Sv(problem), " [", file_.path_, "]"));
}

absl::Status GgufParser::Truncated(std::string_view what, uint64_t need) const {
  return Invalid(absl::StrCat("file truncated: ", Sv(what), " at offset ", pos_, " needs ", need,
                              " bytes but only ", left(), " are left (file size ", size_, ")"));
}

absl::Status GgufParser::ReadBytes(std::string_view what, uint64_t n, const uint8_t** p) {
  if (n > left()) return Truncated(what, n);
  *p = base_ + pos_;
  pos_ += n;
  return absl::OkStatus();
}

template <typename T>
absl::Status GgufParser::ReadScalar(std::string_view what, T* v) {
  const uint8_t* p = nullptr;
  if (absl::Status s = ReadBytes(what, sizeof(T), &p); !s.ok()) return s;
  std::memcpy(v, p, sizeof(T));
  return absl::OkStatus();
}

absl::Status GgufParser::ReadString(std::string_view what, std::string* s) {
  uint64_t length;
  if (absl::Status st = ReadScalar(absl::StrCat(Sv(what), " length"), &length); !st.ok()) return st;
  if (length > left()) {
    return Invalid(absl::StrCat(Sv(what), " length ", length, " at offset ", pos_ - 8,
                                " is larger than the ", left(), " bytes left in the file (size ",
                                size_, ")"));
  }
  s->assign(reinterpret_cast<const char*>(base_ + pos_), length);
  pos_ += length;
  return absl::OkStatus();
}

absl::Status GgufParser::Parse() {
  uint64_t n_tensors = 0, n_metadata = 0;
  if (absl::Status s = ParseHeader(&n_tensors, &n_metadata); !s.ok()) return s;

  section_ = Section::kMetadata;
  file_.metadata_.reserve(n_metadata);
  metadata_offsets_.reserve(n_metadata);
  for (uint64_t i = 0; i < n_metadata; ++i) {
    if (absl::Status s = ParseMetadataEntry(i); !s.ok()) return s;
  }
  if (absl::Status s = ResolveAlignment(); !s.ok()) return s;

  section_ = Section::kTensors;
  file_.tensors_.reserve(n_tensors);
  tensor_offsets_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    if (absl::Status s = ParseTensorInfo(i); !s.ok()) return s;
  }
  return PlaceTensors();
}

absl::Status GgufParser::ParseHeader(uint64_t* n_tensors, uint64_t* n_metadata) {
  uint32_t magic;
  if (absl::Status s = ReadScalar("magic", &magic); !s.ok()) return s;
  if (magic != kGgufMagic) {
    return Invalid(absl::StrFormat("bad magic 0x%08x at offset 0 (expected \"GGUF\", 0x%08x)",
                                   magic, kGgufMagic));
  }
  uint32_t version;
  if (absl::Status s = ReadScalar("version", &version); !s.ok()) return s;
  if (version == 1) {
    return Invalid(
        "GGUF version 1 at offset 4 is not supported (only versions 2 and 3); convert the file "
        "with a current llama.cpp");
  }
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3) {
      return Invalid(absl::StrCat("version ", version, " at offset 4 looks byte-swapped: ",
                                  "big-endian GGUF files are not supported"));
    }
    return Invalid(
        absl::StrCat("unsupported version ", version, " at offset 4 (only versions 2 and 3)"));
  }
  file_.version_ = version;

  if (absl::Status s = ReadScalar("tensor count", n_tensors); !s.ok()) return s;
  if (absl::Status s = ReadScalar("metadata count", n_metadata); !s.ok()) return s;
  // Each entry takes some bytes, so the counts cannot exceed what the rest of the file holds.
  // Checking this before reserving memory keeps a corrupt count from allocating gigabytes.
  if (*n_metadata > left() / kMinMetadataEntryBytes) {
    return Invalid(absl::StrCat("metadata count ", *n_metadata, " at offset 16 is impossible: ",
                                "the ", left(), " bytes left in the file (size ", size_,
                                ") hold at most ", left() / kMinMetadataEntryBytes, " entries"));
  }
  if (*n_tensors > left() / kMinTensorInfoBytes) {
    return Invalid(absl::StrCat("tensor count ", *n_tensors, " at offset 8 is impossible: ", "the ",
                                left(), " bytes left in the file (size ", size_, ") hold at most ",
                                left() / kMinTensorInfoBytes, " tensor infos"));
  }
  const uint64_t min_bytes =
      *n_metadata * kMinMetadataEntryBytes + *n_tensors * kMinTensorInfoBytes;  // no overflow now
  if (min_bytes > left()) {
    return Invalid(absl::StrCat("tensor count ", *n_tensors, " (offset 8) and metadata count ",
                                *n_metadata, " (offset 16) need at least ", min_bytes,
                                " bytes, more than the ", left(), " left in the file (size ", size_,
                                ")"));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ParseMetadataEntry(uint64_t index) {
  index_ = index;
  name_.clear();
  const uint64_t entry_offset = pos_;
  std::string key;
  if (absl::Status s = ReadString("key", &key); !s.ok()) return s;
  name_ = key;
  if (auto it = file_.metadata_index_.find(key); it != file_.metadata_index_.end()) {
    return Invalid(absl::StrCat("duplicate key at offset ", entry_offset,
                                " (first defined at offset ", metadata_offsets_[it->second], ")"));
  }
  const uint64_t type_offset = pos_;
  uint32_t type;
  if (absl::Status s = ReadScalar("value type", &type); !s.ok()) return s;
  GgufValue value;
  if (absl::Status s = ParseValue(type, type_offset, /*depth=*/0, &value); !s.ok()) return s;
  file_.metadata_index_.emplace(key, file_.metadata_.size());
  file_.metadata_.emplace_back(std::move(key), std::move(value));
  metadata_offsets_.push_back(entry_offset);
  return absl::OkStatus();
}

absl::Status GgufParser::ParseValue(uint32_t type, uint64_t type_offset, int depth,
                                    GgufValue* out) {
  const auto t = static_cast<GgufValueType>(type);
  switch (t) {
    case GgufValueType::kUint8: {
      uint8_t v;
      if (absl::Status s = ReadScalar("uint8 value", &v); !s.ok()) return s;
      *out = GgufValue::Uint(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kInt8: {
      int8_t v;
      if (absl::Status s = ReadScalar("int8 value", &v); !s.ok()) return s;
      *out = GgufValue::Int(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kUint16: {
      uint16_t v;
      if (absl::Status s = ReadScalar("uint16 value", &v); !s.ok()) return s;
      *out = GgufValue::Uint(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kInt16: {
      int16_t v;
      if (absl::Status s = ReadScalar("int16 value", &v); !s.ok()) return s;
      *out = GgufValue::Int(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kUint32: {
      uint32_t v;
      if (absl::Status s = ReadScalar("uint32 value", &v); !s.ok()) return s;
      *out = GgufValue::Uint(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kInt32: {
      int32_t v;
      if (absl::Status s = ReadScalar("int32 value", &v); !s.ok()) return s;
      *out = GgufValue::Int(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kUint64: {
      uint64_t v;
      if (absl::Status s = ReadScalar("uint64 value", &v); !s.ok()) return s;
      *out = GgufValue::Uint(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kInt64: {
      int64_t v;
      if (absl::Status s = ReadScalar("int64 value", &v); !s.ok()) return s;
      *out = GgufValue::Int(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kFloat32: {
      float v;
      if (absl::Status s = ReadScalar("float32 value", &v); !s.ok()) return s;
      *out = GgufValue::Float(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kFloat64: {
      double v;
      if (absl::Status s = ReadScalar("float64 value", &v); !s.ok()) return s;
      *out = GgufValue::Float(t, v);
      return absl::OkStatus();
    }
    case GgufValueType::kBool: {
      uint8_t v;
      if (absl::Status s = ReadScalar("bool value", &v); !s.ok()) return s;
      if (v > 1) {
        return Invalid(
            absl::StrCat("bool value ", v, " at offset ", pos_ - 1, " is neither 0 nor 1"));
      }
      *out = GgufValue::Bool(v != 0);
      return absl::OkStatus();
    }
    case GgufValueType::kString: {
      std::string v;
      if (absl::Status s = ReadString("string value", &v); !s.ok()) return s;
      *out = GgufValue::String(std::move(v));
      return absl::OkStatus();
    }
    case GgufValueType::kArray:
      return ParseArray(depth + 1, out);
  }
  return Invalid(absl::StrCat("unknown value type ", TypeIdText(type), " at offset ", type_offset));
}

absl::Status GgufParser::ParseArray(int depth, GgufValue* out) {
  const uint64_t type_offset = pos_;
  uint32_t element_type;
  if (absl::Status s = ReadScalar("array element type", &element_type); !s.ok()) return s;
  const std::optional<uint64_t> min_bytes = MinPayloadBytes(element_type);
  if (!min_bytes.has_value()) {
    return Invalid(absl::StrCat("unknown array element type ", TypeIdText(element_type),
                                " at offset ", type_offset));
  }
  if (static_cast<GgufValueType>(element_type) == GgufValueType::kArray &&
      depth >= GgufFile::kMaxArrayNesting) {
    return Invalid(absl::StrCat("arrays nested more than ", GgufFile::kMaxArrayNesting,
                                " deep at offset ", type_offset));
  }
  uint64_t count;
  if (absl::Status s = ReadScalar("array length", &count); !s.ok()) return s;
  // Bound the count by the bytes left before reserving anything.
  if (count > left() / *min_bytes) {
    return Invalid(absl::StrCat(
        "array length ", count, " at offset ", pos_ - 8, " is impossible: ", count, " ",
        Sv(GgufValueTypeName(static_cast<GgufValueType>(element_type))), " values need at least ",
        *min_bytes, " bytes each but only ", left(), " bytes are left (file size ", size_, ")"));
  }
  if (count > GgufFile::kMaxMetadataArrayElements - n_array_elements_) {
    return Invalid(absl::StrCat("array length ", count, " at offset ", pos_ - 8, " takes the ",
                                "metadata past ", GgufFile::kMaxMetadataArrayElements,
                                " array elements in all (", n_array_elements_, " before it)"));
  }
  n_array_elements_ += count;
  GgufValue::Array array;
  array.element_type = static_cast<GgufValueType>(element_type);
  array.values.resize(count);
  element_path_.push_back(0);
  for (uint64_t i = 0; i < count; ++i) {
    element_path_.back() = i;
    if (absl::Status s = ParseValue(element_type, type_offset, depth, &array.values[i]); !s.ok()) {
      return s;
    }
  }
  element_path_.pop_back();
  *out = GgufValue::MakeArray(std::move(array));
  return absl::OkStatus();
}

absl::Status GgufParser::ResolveAlignment() {
  file_.alignment_ = kDefaultAlignment;
  auto it = file_.metadata_index_.find(Sv(kAlignmentKey));
  if (it == file_.metadata_index_.end()) return absl::OkStatus();
  const GgufValue& v = file_.metadata_[it->second].second;
  index_ = it->second;
  name_ = std::string(kAlignmentKey);
  const uint64_t offset = metadata_offsets_[it->second];
  uint64_t alignment = 0;
  if (v.is_unsigned()) {
    alignment = v.as_unsigned();
  } else if (v.is_signed() && v.as_signed() > 0) {
    alignment = static_cast<uint64_t>(v.as_signed());
  } else if (!v.is_signed()) {
    return Invalid(absl::StrCat("has type ", Sv(GgufValueTypeName(v.type())), " (entry at offset ",
                                offset, "); expected an unsigned integer"));
  }
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return Invalid(absl::StrCat("alignment ", v.DebugString(), " (entry at offset ", offset,
                                ") must be a power of two"));
  }
  file_.alignment_ = alignment;
  return absl::OkStatus();
}

absl::Status GgufParser::ParseTensorInfo(uint64_t index) {
  index_ = index;
  name_.clear();
  const uint64_t info_offset = pos_;
  std::string name;
  if (absl::Status s = ReadString("name", &name); !s.ok()) return s;
  name_ = name;
  if (auto it = file_.tensor_index_.find(name); it != file_.tensor_index_.end()) {
    return Invalid(absl::StrCat("duplicate tensor name at offset ", info_offset,
                                " (first defined at offset ", tensor_offsets_[it->second], ")"));
  }

  uint32_t n_dims;
  if (absl::Status s = ReadScalar("n_dims", &n_dims); !s.ok()) return s;
  if (n_dims == 0 || n_dims > GgufFile::kMaxDims) {
    return Invalid(absl::StrCat("n_dims ", n_dims, " at offset ", pos_ - 4, " is not in [1, ",
                                GgufFile::kMaxDims, "]"));
  }
  const uint64_t dims_offset = pos_;
  GgufTensorInfo info;
  info.dims.resize(n_dims);
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t raw;
    if (absl::Status s = ReadScalar("dimension", &raw); !s.ok()) return s;
    const auto dim = static_cast<int64_t>(raw);
    if (dim <= 0) {
      return Invalid(absl::StrCat("dimension ", d, " is ", dim, " at offset ", pos_ - 8,
                                  "; dimensions must be positive"));
    }
    info.dims[d] = dim;
    if (__builtin_mul_overflow(n_elements, dim, &n_elements)) {
      return Invalid(absl::StrCat(
          "dimensions [", absl::StrJoin(info.dims.begin(), info.dims.begin() + d + 1, ", "),
          "] at offset ", dims_offset, ": the element count overflows int64"));
    }
  }

  const uint64_t type_offset = pos_;
  uint32_t type_id;
  if (absl::Status s = ReadScalar("type", &type_id); !s.ok()) return s;
  const std::optional<kernels::DTypeTraits> traits = kernels::LookupDType(type_id);
  if (!traits.has_value()) {
    return Invalid(
        absl::StrCat("unknown tensor type ", TypeIdText(type_id), " at offset ", type_offset));
  }
  if (info.dims[0] % traits->block_size != 0) {
    return Invalid(absl::StrCat("row length ", info.dims[0], " (dims[0] at offset ", dims_offset,
                                ") is not a multiple of the ", Sv(traits->name), " block size ",
                                traits->block_size));
  }
  uint64_t n_bytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n_elements / traits->block_size),
                             static_cast<uint64_t>(traits->block_bytes), &n_bytes)) {
    return Invalid(absl::StrCat("byte size of ", n_elements, " ", Sv(traits->name),
                                " elements (dims at offset ", dims_offset, ") overflows"));
  }

  uint64_t offset_in_data;
  if (absl::Status s = ReadScalar("data offset", &offset_in_data); !s.ok()) return s;
  if (offset_in_data % file_.alignment_ != 0) {
    return Invalid(absl::StrCat("data offset ", offset_in_data, " at offset ", pos_ - 8,
                                " is not a multiple of the alignment ", file_.alignment_));
  }

  info.name = std::move(name);
  info.dtype = traits->dtype;
  info.offset_in_data = offset_in_data;
  info.offset_in_file = 0;  // PlaceTensors()
  info.n_elements = static_cast<uint64_t>(n_elements);
  info.n_bytes = n_bytes;
  info.data = nullptr;
  file_.tensor_index_.emplace(info.name, file_.tensors_.size());
  file_.tensors_.push_back(std::move(info));
  tensor_offsets_.push_back(info_offset);
  return absl::OkStatus();
}

absl::Status GgufParser::PlaceTensors() {
  // The data section starts at the first multiple of the alignment after the tensor infos.
  const uint64_t a = file_.alignment_;
  const uint64_t misalignment = pos_ % a;
  data_offset_ = pos_;
  if (misalignment != 0 && __builtin_add_overflow(pos_, a - misalignment, &data_offset_)) {
    return Invalid(
        absl::StrCat("data section start (offset ", pos_, " aligned to ", a, ") overflows"));
  }
  for (size_t i = 0; i < file_.tensors_.size(); ++i) {
    GgufTensorInfo& t = file_.tensors_[i];
    index_ = i;
    name_ = t.name;
    uint64_t begin, end;
    if (__builtin_add_overflow(data_offset_, t.offset_in_data, &begin)) {
      return Invalid(absl::StrCat("data [offset ", data_offset_, " + ", t.offset_in_data, ", ",
                                  t.n_bytes, " bytes] extends past end of file (size ", size_,
                                  "); its tensor info is at offset ", tensor_offsets_[i]));
    }
    if (__builtin_add_overflow(begin, t.n_bytes, &end) || end > size_) {
      return Invalid(absl::StrCat("data [offset ", begin, ", ", t.n_bytes,
                                  " bytes] extends past end of file (size ", size_,
                                  "); its tensor info is at offset ", tensor_offsets_[i]));
    }
    t.offset_in_file = begin;
    t.data = base_ + begin;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) {
    return absl::Status(mapped.status().code(), absl::StrCat("gguf: ", mapped.status().message()));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->size_ = (*mapped)->size();
  file->base_ =
      file->size_ > 0 ? (*mapped)->data() : reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->mapping_ = *std::move(mapped);
  GgufParser parser(*file);
  if (absl::Status s = parser.Parse(); !s.ok()) return s;
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string_view bytes,
                                                              std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(name);
  file->owned_.assign(bytes.data(), bytes.size());
  file->base_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  GgufParser parser(*file);
  if (absl::Status s = parser.Parse(); !s.ok()) return s;
  return file;
}

std::unique_ptr<GgufFile> GgufFile::Assemble(
    std::string path, uint64_t size, std::vector<std::pair<std::string, GgufValue>> metadata,
    std::vector<GgufTensorInfo> tensors, std::vector<std::shared_ptr<const MappedFile>> mappings,
    std::vector<std::unique_ptr<uint8_t[]>> owned) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(path);
  file->size_ = size;
  file->version_ = 3;
  file->metadata_ = std::move(metadata);
  for (size_t i = 0; i < file->metadata_.size(); ++i) {
    file->metadata_index_.emplace(file->metadata_[i].first, i);
  }
  file->tensors_ = std::move(tensors);
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    const bool inserted = file->tensor_index_.emplace(file->tensors_[i].name, i).second;
    CHECK(inserted) << "duplicate tensor " << file->tensors_[i].name;
  }
  file->assembled_mappings_ = std::move(mappings);
  file->assembled_owned_ = std::move(owned);
  return file;
}

void GgufFile::ReleaseMetadata() {
  std::vector<std::pair<std::string, GgufValue>>().swap(metadata_);
  absl::flat_hash_map<std::string, size_t>().swap(metadata_index_);
  // Nothing refers into the header once parsed (tensor names are copies): its pages go too.
  uint64_t header_bytes = size_;
  for (const GgufTensorInfo& t : tensors_) header_bytes = std::min(header_bytes, t.offset_in_file);
  DropResidentPages(base_, header_bytes);
#if defined(__GLIBC__)
  // The freed arrays lie amid the heap, where free() keeps their pages resident (for the next
  // allocations, which on a loaded model are few): hand the heap's whole free pages back.
  ::malloc_trim(0);
#endif
}

void GgufFile::DropResidentPages(const void* data, uint64_t bytes) const {
  if (mapping_ != nullptr) mapping_->DropResidentPages(data, bytes);
  for (const std::shared_ptr<const MappedFile>& mapping : assembled_mappings_) {
    mapping->DropResidentPages(data, bytes);
  }
}

GgufFile::~GgufFile() = default;

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(Sv(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(Sv(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::Status NotFound(std::string_view key, const std::string& path) {
  return absl::NotFoundError(absl::StrCat("gguf: key '", Sv(key), "' not found [", path, "]"));
}

absl::Status WrongType(std::string_view key, const GgufValue& v, std::string_view expected,
                       const std::string& path) {
  return absl::InvalidArgumentError(absl::StrCat("gguf: key '", Sv(key), "' has type ",
                                                 Sv(GgufValueTypeName(v.type())), ", expected ",
                                                 Sv(expected), " [", path, "]"));
}

}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key, path_);
  if (!v->is_string()) return WrongType(key, *v, "string", path_);
  return v->as_string();
}

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key, path_);
  if (v->is_unsigned()) return v->as_unsigned();
  if (v->is_signed()) {
    if (v->as_signed() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: key '", Sv(key), "' has value ",
                                                     v->as_signed(), ", expected an unsigned",
                                                     " integer [", path_, "]"));
    }
    return static_cast<uint64_t>(v->as_signed());
  }
  return WrongType(key, *v, "an unsigned integer", path_);
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key, path_);
  if (v->is_signed()) return v->as_signed();
  if (v->is_unsigned()) {
    if (v->as_unsigned() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("gguf: key '", Sv(key), "' has value ",
                                                     v->as_unsigned(), ", which does not fit",
                                                     " int64 [", path_, "]"));
    }
    return static_cast<int64_t>(v->as_unsigned());
  }
  return WrongType(key, *v, "an integer", path_);
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key, path_);
  if (v->is_float()) return v->as_float();
  if (v->is_unsigned()) return static_cast<double>(v->as_unsigned());
  if (v->is_signed()) return static_cast<double>(v->as_signed());
  return WrongType(key, *v, "a number", path_);
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key, path_);
  if (!v->is_bool()) return WrongType(key, *v, "bool", path_);
  return v->as_bool();
}

absl::StatusOr<const GgufValue::Array*> GgufFile::GetArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound(key, path_);
  if (!v->is_array()) return WrongType(key, *v, "array", path_);
  return &v->as_array();
}

}  // namespace baton::engine
