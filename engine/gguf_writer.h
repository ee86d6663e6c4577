// Builds a GGUF v3 file in memory: metadata of every value type (arrays nested), tensors with their
// raw bytes, alignment padding. Used by tests and by the synthetic models of `baton make-model`
// (engine/synthetic_model.h).
//
// The writer writes what it is told and checks little (only that a tensor's data matches its
// dtype and dims): duplicate keys, odd alignments and the raw entry points below let tests build
// deliberately malformed files. GgufFile is the validator.
//
// Layout: header, metadata in call order, tensor infos in call order, padding to the alignment,
// then each tensor's data at the next multiple of the alignment (padded with zeros).
//
// Thread-safety: a plain builder; use from one thread at a time.
#ifndef BATON_ENGINE_GGUF_WRITER_H_
#define BATON_ENGINE_GGUF_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/gguf_value.h"
#include "kernels/dtype.h"

namespace baton::engine {

class GgufWriter {
 public:
  struct Options {
    uint32_t version = 3;  // written verbatim (tests write unsupported ones)
    // Alignment of the tensor data; must be a power of two. When not the default 32 and no
    // general.alignment key was added, the writer adds general.alignment (uint32) first.
    uint64_t alignment = 32;
  };

  GgufWriter() : GgufWriter(Options{}) {}
  explicit GgufWriter(Options options);

  // Metadata, in call order. Keys are not checked for duplicates.
  void Add(std::string key, GgufValue value);
  void AddUint8(std::string key, uint8_t v);
  void AddInt8(std::string key, int8_t v);
  void AddUint16(std::string key, uint16_t v);
  void AddInt16(std::string key, int16_t v);
  void AddUint32(std::string key, uint32_t v);
  void AddInt32(std::string key, int32_t v);
  void AddUint64(std::string key, uint64_t v);
  void AddInt64(std::string key, int64_t v);
  void AddFloat32(std::string key, float v);
  void AddFloat64(std::string key, double v);
  void AddBool(std::string key, bool v);
  void AddString(std::string key, std::string v);
  void AddStringArray(std::string key, const std::vector<std::string>& v);
  void AddInt32Array(std::string key, const std::vector<int32_t>& v);
  void AddFloat32Array(std::string key, const std::vector<float>& v);
  // A metadata entry written verbatim: key, then `type_id` (u32), then `payload` as is.
  void AddRawMetadata(std::string key, uint32_t type_id, std::string payload);

  // A tensor with its data. dims in GGML order (dims[0] is the row length). INVALID_ARGUMENT
  // unless 1..4 positive dims, dims[0] a multiple of the block size, and data.size() the exact
  // byte size.
  absl::Status AddTensor(std::string name, kernels::DType dtype, std::vector<int64_t> dims,
                         std::string_view data);
  absl::Status AddTensorF32(std::string name, std::vector<int64_t> dims,
                            const std::vector<float>& values);
  // A tensor info written verbatim (any dims, type id and data offset) with no data of its own.
  void AddRawTensorInfo(std::string name, std::vector<uint64_t> dims, uint32_t type_id,
                        uint64_t offset_in_data);

  int64_t n_metadata() const { return static_cast<int64_t>(metadata_.size()); }
  int64_t n_tensors() const { return static_cast<int64_t>(tensors_.size()); }

  // The file's bytes.
  std::string Build() const;
  // Build()'s bytes written to `path` (replaced if it exists), a tensor at a time: no second copy
  // of the data in memory.
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct MetadataEntry {
    std::string key;
    uint32_t type_id;
    std::string payload;  // the encoded value, after the type id
  };
  struct TensorEntry {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type_id;
    bool raw;                 // offset_in_data given; no data
    uint64_t offset_in_data;  // raw only
    std::string data;
  };

  Options options_;
  std::vector<MetadataEntry> metadata_;
  std::vector<TensorEntry> tensors_;

  // Everything before the tensor data: header, metadata, tensor infos, padding to the alignment.
  std::string BuildHeader() const;
  // Passes the file's bytes to `emit` in order: the header, then each tensor's data and padding.
  void Emit(const std::function<void(std::string_view)>& emit) const;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_GGUF_WRITER_H_
