// How the MPI engines wait between tests of their requests (the comm thread's poll loops).
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace braid::comm {

// Note [Poll backoff]: the it-th test of a wait's requests found them unfinished. The first 64
// tests follow at once; then the thread yields its core between tests, up to test 2048 (a
// message across hosts usually completes in that time, and a yield hands the core to whichever
// rank's thread is runnable instead of sleeping past the completion); then it sleeps 5 us (about
// 55 us with Linux's default timer slack) and, from test 8192, 100 us. Measured across 2
// network-namespace hosts x 2 ranks on 2 cores (`bench/multihost.sh 2 256K`, 2026-11-26, AMD
// EPYC), medians of 4 runs against 3 that slept from test 64: all_reduce of 64 / 128 / 256 KiB
// 410 / 722 / 837 us instead of 819 / 974 / 1022, reduce_scatter 440 / 682 / 831 instead of
// 959 / 1008 / 1362, all_gather 490 / 477 / 646 instead of 596 / 603 / 1038 (one run of the 4
// had 4.8-5.0 ms at 128-256 KiB); the multihost parity runs' DDP step 7.2 ms instead of 11.3,
// ZeRO-3 15.9 instead of 25.3. Sleeping 5 us truly (a 1 us timer slack) was 5-40x slower: four
// ranks' pollers starved each other.
inline void poll_backoff(uint64_t it) {
  if (it <= 64) return;
  if (it <= 2048) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(it > 8192 ? 100 : 5));
}

}  // namespace braid::comm
