// CRC-32 (the IEEE / zlib polynomial, as in gzip, PNG and Python's zlib.crc32) of bytes in
// memory or of a whole file, for detecting corrupted or truncated checkpoint files. It is not
// a cryptographic hash: it catches accidents (bit flips, torn writes), not tampering.
//
//   uint32_t crc = crc32(data, size);                    // one buffer
//   crc = crc32(more, more_size, crc);                   // continues over a second buffer
//   FileChecksum sum = checksum_file("iter_0000042/model_rank00000.safetensors");
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ooze {

// The CRC-32 of `size` bytes at `data`, continuing from `previous` (the CRC of the bytes that
// came before them; 0 to start). crc32("123456789", 9) == 0xCBF43926.
uint32_t crc32(const void* data, size_t size, uint32_t previous = 0);

struct FileChecksum {
  uint32_t crc32 = 0;
  uint64_t bytes = 0;
};

// Reads the file at `path` once, in chunks. Throws ooze::IoError naming the file when it cannot
// be opened or read.
FileChecksum checksum_file(const std::string& path);

}  // namespace ooze
