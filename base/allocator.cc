#include "base/allocator.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace baton {

void TuneHeapForBulkTransfers() {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) {
    mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes));
  }
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) {
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes));
  }
#endif
}

}  // namespace baton
