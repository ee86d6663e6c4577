// Memory of a backend (Backend::Allocate), given back to it when the buffer goes.
//
// Thread-safety: a value; its backend's rules apply to what is done with the memory.
#ifndef BATON_KERNELS_BACKEND_BUFFER_H_
#define BATON_KERNELS_BACKEND_BUFFER_H_

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace baton::kernels {

class BackendBuffer {
 public:
  BackendBuffer() = default;
  // `bytes` of `backend`'s memory, or the backend's error.
  static absl::StatusOr<BackendBuffer> Allocate(Backend& backend, size_t bytes) {
    absl::StatusOr<void*> data = backend.Allocate(bytes);
    if (!data.ok()) return data.status();
    BackendBuffer buffer;
    buffer.backend_ = &backend;
    buffer.data_ = *data;
    buffer.bytes_ = bytes;
    return buffer;
  }
  BackendBuffer(BackendBuffer&& other) noexcept { *this = std::move(other); }
  BackendBuffer& operator=(BackendBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      backend_ = std::exchange(other.backend_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~BackendBuffer() { Reset(); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void Reset() {
    if (data_ != nullptr) backend_->Free(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace baton::kernels

#endif  // BATON_KERNELS_BACKEND_BUFFER_H_
