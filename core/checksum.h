// CRC-32 (the IEEE / zlib polynomial, as in gzip, PNG and Python's zlib.crc32) of bytes in
// memory or of a whole file, for detecting corrupted or truncated checkpoint files, and CRC-32C
// (the Castagnoli polynomial, as in iSCSI, ext4 and TFRecord files) with the masked form
// TFRecord framing stores. Neither is a cryptographic hash: they catch accidents (bit flips,
// torn writes), not tampering.
//
//   uint32_t crc = crc32(data, size);                    // one buffer
//   crc = crc32(more, more_size, crc);                   // continues over a second buffer
//   FileChecksum sum = checksum_file("iter_0000042/model_rank00000.safetensors");
//   uint32_t stored = mask_crc32c(crc32c(data, size));  // what a TFRecord holds by its data
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ooze {

// SplitMix64's finalizer: a bijection on 64-bit values whose output bits each depend on every
// input bit. Seeds and hashes built from it are the same on every machine.
inline uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The CRC-32 of `size` bytes at `data`, continuing from `previous` (the CRC of the bytes that
// came before them; 0 to start). crc32("123456789", 9) == 0xCBF43926.
uint32_t crc32(const void* data, size_t size, uint32_t previous = 0);

// The CRC-32 of two byte strings one after the other, from the CRC of each and the second's
// length: how pieces summed apart (by several processes) give the whole's CRC.
uint32_t crc32_combine(uint32_t first, uint32_t second, uint64_t second_size);

// The CRC-32C, likewise. crc32c("123456789", 9) == 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t previous = 0);

// TFRecord's mask: a CRC computed over bytes that themselves hold CRCs is weak, so the stored
// value is rotated right by 15 bits and offset by a constant.
uint32_t mask_crc32c(uint32_t crc);

struct FileChecksum {
  uint32_t crc32 = 0;
  uint64_t bytes = 0;
};

// Reads the file at `path` once, in chunks. Throws ooze::IoError naming the file when it cannot
// be opened or read.
FileChecksum checksum_file(const std::string& path);

}  // namespace ooze
