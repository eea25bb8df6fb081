#include "core/checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace ooze {
namespace {

// The reflected (bit-reversed) polynomials: CRC-32's 0x04C11DB7, CRC-32C's 0x1EDC6F41.
constexpr uint32_t kCrc32Polynomial = 0xEDB88320u;
constexpr uint32_t kCrc32cPolynomial = 0x82F63B78u;
constexpr uint32_t kTfRecordMaskDelta = 0xA282EAD8u;

// table[b]: the CRC register after shifting byte b through it, one lookup per byte.
std::array<uint32_t, 256> make_table(uint32_t polynomial) {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t value = byte;
    for (int bit = 0; bit < 8; ++bit) value = (value & 1u) ? (value >> 1) ^ polynomial : value >> 1;
    table[byte] = value;
  }
  return table;
}

// Both CRCs are the same reflected register, each with its own polynomial's table.
template <uint32_t Polynomial>
uint32_t reflected_crc(const void* data, size_t size, uint32_t previous) {
  static const std::array<uint32_t, 256> table = make_table(Polynomial);
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t crc = ~previous;  // the register starts at all ones; the result is inverted
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t previous) {
  return reflected_crc<kCrc32Polynomial>(data, size, previous);
}

uint32_t crc32c(const void* data, size_t size, uint32_t previous) {
  return reflected_crc<kCrc32cPolynomial>(data, size, previous);
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kTfRecordMaskDelta; }

FileChecksum checksum_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw IoError("cannot open '" + path + "' to checksum it: " + std::strerror(errno));
  }
  FileChecksum sum;
  std::vector<uint8_t> buffer(1 << 20);
  while (true) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      const std::string reason = std::strerror(errno);
      ::close(fd);
      throw IoError("reading '" + path + "' to checksum it failed: " + reason);
    }
    if (got == 0) break;
    sum.crc32 = crc32(buffer.data(), static_cast<size_t>(got), sum.crc32);
    sum.bytes += static_cast<uint64_t>(got);
  }
  ::close(fd);
  return sum;
}

}  // namespace ooze
