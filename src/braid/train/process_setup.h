// Process-wide settings a braid executable applies once at start (the binary and benchmarks;
// never the library on its own behalf).
#pragma once

namespace braid::train {

// Note [Allocator tuning]: glibc serves blocks above the mmap threshold with fresh mmaps and
// trims freed heap tops back to the OS, so every training step would fault its activation and
// gradient buffers in again (about a tenth of a step). Keeping freed memory in the heap makes
// the steady-state step reuse it.
void tune_allocator();

}  // namespace braid::train
