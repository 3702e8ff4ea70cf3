// CRC-32C (Castagnoli), the checksum of every file of a training checkpoint: the SSE4.2 crc32
// instruction where the CPU has it (about 20 GB/s over three interleaved streams), a table
// otherwise; both give the same value (the one iSCSI, ext4 and Kafka use).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace braid::checkpoint {

// Extends `crc` (the value returned for the bytes before, 0 for none) by n bytes.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

// "crc32c:1a2b3c4d"
std::string format_crc32c(uint32_t crc);

}  // namespace braid::checkpoint
