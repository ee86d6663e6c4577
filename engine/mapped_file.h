// A file mapped read-only into memory (private mapping), for model weights that are read where
// they lie. An empty file maps to no bytes.
//
// Thread-safety: immutable after Open(); every method is safe from any thread.
#ifndef BATON_ENGINE_MAPPED_FILE_H_
#define BATON_ENGINE_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace baton::engine {

class MappedFile {
 public:
  // NOT_FOUND when the file does not exist; the errno's status (naming the path) otherwise.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Whether [data, data + bytes) lies inside the mapping.
  bool Contains(const void* data, uint64_t bytes) const;
  // Lets the whole pages inside [data, data + bytes) go from this process's memory (they fault
  // back in from the file when read); a no-op for a range outside the mapping.
  void DropResidentPages(const void* data, uint64_t bytes) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_MAPPED_FILE_H_
