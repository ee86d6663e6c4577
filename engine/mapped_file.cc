#include "engine/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace baton::engine {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat("no such file: ", path));
    return absl::ErrnoToStatus(e, absl::StrCat("cannot open ", path));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::ErrnoToStatus(e, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("not a regular file: ", path));
  }
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* m = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return absl::ErrnoToStatus(e, absl::StrCat("cannot map ", path));
    }
    file->data_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

bool MappedFile::Contains(const void* data, uint64_t bytes) const {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const auto base = reinterpret_cast<uintptr_t>(data_);
  return data_ != nullptr && begin >= base && bytes <= size_ && begin - base <= size_ - bytes;
}

void MappedFile::DropResidentPages(const void* data, uint64_t bytes) const {
  if (!Contains(data, bytes)) return;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes) / page * page;
  // The mapping is private and never written: dropped pages come back from the file.
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace baton::engine
