#include "braid/launch/process_setup.h"

#include <malloc.h>

namespace braid::launch {

void tune_allocator() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace braid::launch
