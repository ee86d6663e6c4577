// A GGUF model file (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), opened read-only.
//
// Open() maps the file and validates everything it reads — header, every metadata key and value
// (all value types, arrays nested up to kMaxArrayNesting deep), the tensor directory, alignment, and
// that every tensor's data lies inside the file — with overflow-checked arithmetic. Any problem is an
// absl::Status (INVALID_ARGUMENT for malformed content, NOT_FOUND for a missing file) whose message
// names the problem, the key or tensor concerned and the byte offset in the file. After Open()
// succeeds, nothing in this class can read outside the mapping.
//
// A file with metadata and no tensors (a vocabulary-only file) opens fine. Tensors may overlap or
// share data (only out-of-bounds data is rejected). GGUF versions 2 and 3 are read, little-endian
// only; version 1 is rejected.
//
// Thread-safety: immutable after Open(); all const methods are safe from any thread. The tensor data
// pointers stay valid for the lifetime of the GgufFile.
#ifndef BATON_ENGINE_GGUF_FILE_H_
#define BATON_ENGINE_GGUF_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/gguf_value.h"
#include "engine/mapped_file.h"
#include "kernels/dtype.h"

namespace baton::engine {

struct GgufTensorInfo {
  std::string name;
  // GGML order: dims[0] is the contiguous (fastest-varying) dimension, i.e. the row length.
  std::vector<int64_t> dims;
  kernels::DType dtype;
  uint64_t offset_in_data;   // relative to the start of the tensor data section
  uint64_t offset_in_file;   // absolute
  uint64_t n_elements;
  uint64_t n_bytes;
  const uint8_t* data;       // points into the mapping; n_bytes long

  int64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
  int64_t n_rows() const { return dims.empty() ? 1 : static_cast<int64_t>(n_elements / dims[0]); }
};

class GgufFile {
 public:
  // Arrays of arrays deeper than this are rejected (bounds the parser's recursion).
  static constexpr int kMaxArrayNesting = 8;
  // GGML_MAX_DIMS.
  static constexpr int kMaxDims = 4;
  // Array elements over all metadata, nested ones included. Bounds the memory a file can make the
  // parser allocate (each parsed value takes tens of bytes, a one-byte element in the file);
  // real vocabularies hold a few hundred thousand tokens, scores and types.
  static constexpr uint64_t kMaxMetadataArrayElements = uint64_t{1} << 23;

  // Maps `path` and parses it. See the header comment for the validation performed.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory copy of `bytes` (tests, fuzzing). `name` appears in error messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string_view bytes,
                                                             std::string name = "<memory>");
  // A model stored otherwise, seen as a GGUF file (a Hugging Face checkpoint, hf_checkpoint.h):
  // `metadata` stands for the header's keys (names must be distinct), and each tensor's data lies
  // in one of `mappings` or of the `owned` buffers, which the file keeps alive. path() is `path`
  // and file_size() `size`. Tensor names must be distinct (programmer error otherwise).
  static std::unique_ptr<GgufFile> Assemble(
      std::string path, uint64_t size, std::vector<std::pair<std::string, GgufValue>> metadata,
      std::vector<GgufTensorInfo> tensors, std::vector<std::shared_ptr<const MappedFile>> mappings,
      std::vector<std::unique_ptr<uint8_t[]>> owned);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // nullptr when absent.
  const GgufValue* Find(std::string_view key) const;

  // Typed getters. NOT_FOUND when absent; INVALID_ARGUMENT (naming the key, expected and actual
  // type) when present with another type. Integer getters accept any integer type whose value fits.
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // any float or integer type
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<const GgufValue::Array*> GetArray(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Frees the parsed metadata and lets the header's pages go (DropResidentPages): afterwards
  // metadata() is empty and Find() and the getters find nothing. The tensors and the mapping
  // stay. For an owner that has read what it needs (Model, once it has its config and
  // vocabulary): a vocabulary's arrays parse into several MB.
  void ReleaseMetadata();

  // Lets the pages that lie wholly inside [data, data + bytes) (a part of the file's bytes, or of
  // an assembled file's mappings) go from this process's memory: a later read faults them back
  // in from the file, so the bytes stay valid. For data nobody reads on the hot path any more
  // (weights a backend copied). A no-op for a FromBytes copy, an assembled file's owned buffers
  // or a range outside the file. Thread-safe.
  void DropResidentPages(const void* data, uint64_t bytes) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string path_;
  const uint8_t* base_ = nullptr;  // the mapping (or owned_ copy), size_ bytes
  uint64_t size_ = 0;
  std::unique_ptr<MappedFile> mapping_;  // Open()'s; null for FromBytes() and Assemble()
  std::string owned_;              // FromBytes() copy
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  absl::flat_hash_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
  // Assemble()'s storage.
  std::vector<std::shared_ptr<const MappedFile>> assembled_mappings_;
  std::vector<std::unique_ptr<uint8_t[]>> assembled_owned_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_GGUF_FILE_H_
