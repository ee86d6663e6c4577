// A safetensors file (https://huggingface.co/docs/safetensors), mapped read-only: an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, __metadata__},
// then the tensors' bytes, row-major.
//
// Open() validates the whole header: its length (at most kMaxHeaderBytes, inside the file),
// JSON, every entry's dtype (BF16, F16 or F32: the types baton loads; U8, as kernels::DType::kI8,
// for the bytes of MXFP4 blocks and scales), shape (at most
// kMaxDims dims, no overflow) and data range (inside the data section, as long as the shape
// and dtype say). Errors are INVALID_ARGUMENT naming the file and the tensor.
//
// Thread-safety: immutable after Open(); the tensors' data stays valid while the file lives.
#ifndef BATON_ENGINE_SAFETENSORS_FILE_H_
#define BATON_ENGINE_SAFETENSORS_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/mapped_file.h"
#include "kernels/dtype.h"

namespace baton::engine {

struct SafetensorsTensor {
  std::string name;
  kernels::DType dtype;
  std::vector<int64_t> shape;  // row-major: shape.back() is the contiguous dimension
  const uint8_t* data;         // n_bytes, inside the mapping
  uint64_t n_bytes;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // as the safetensors library
  static constexpr int kMaxDims = 4;

  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint64_t size() const { return file_->size(); }
  const MappedFile& mapping() const { return *file_; }
  // In the header's order of names (sorted, as the library writes them).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> file_;
  std::vector<SafetensorsTensor> tensors_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_SAFETENSORS_FILE_H_
