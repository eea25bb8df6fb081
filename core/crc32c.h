// CRC-32C (the Castagnoli polynomial, as in iSCSI, ext4 and TFRecord files) of bytes in memory,
// and the masked form TFRecord framing stores. Like core/checksum.h's CRC-32 it catches
// accidents (bit flips, torn writes), not tampering.
//
//   uint32_t crc = crc32c(data, size);          // crc32c("123456789", 9) == 0xE3069283
//   uint32_t stored = mask_crc32c(crc);         // what a TFRecord holds next to the data
#pragma once

#include <cstddef>
#include <cstdint>

namespace ooze {

// The CRC-32C of `size` bytes at `data`, continuing from `previous` (the CRC of the bytes that
// came before them; 0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t previous = 0);

// TFRecord's mask: a CRC computed over bytes that themselves hold CRCs is weak, so the stored
// value is rotated right by 15 bits and offset by a constant.
uint32_t mask_crc32c(uint32_t crc);

}  // namespace ooze
