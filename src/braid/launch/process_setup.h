// Process-wide settings a braid executable applies once at start (the binary and benchmarks;
// never the library on its own behalf).
#pragma once

namespace braid::launch {

// Note [Allocator tuning]: glibc serves blocks above the mmap threshold with fresh mmaps and
// trims freed heap tops back to the OS, so every training step would fault its activation and
// gradient buffers in again (about a tenth of a step). Keeping freed memory in the heap makes
// the steady-state step reuse it. But blocks of 64 MiB and more still get their own mmaps: a
// sharded strategy cycles whole units (gathered parameters, gradients, offload pages) of
// hundreds of MiB, and in the heap their holes fragment it so that freed memory stays resident:
// a 3-layer 3B-wide LLaMA under ZeRO-3 with offload peaked at 6.3 GiB RSS for 2.6 GiB tracked
// with a 1 GiB threshold, and at 2.5 GiB with 64 MiB. Such blocks are rare and large, so their
// page faults cost little next to the work on them.
void tune_allocator();

}  // namespace braid::launch
