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

// The reflected polynomial of CRC-32 (0x04C11DB7 bit-reversed).
constexpr uint32_t kPolynomial = 0xEDB88320u;

// table[b]: the CRC register after shifting byte b through it, one lookup per byte.
std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t value = byte;
    for (int bit = 0; bit < 8; ++bit)
      value = (value & 1u) ? (value >> 1) ^ kPolynomial : value >> 1;
    table[byte] = value;
  }
  return table;
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t previous) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t crc = ~previous;  // the register starts at all ones; the result is inverted
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

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
