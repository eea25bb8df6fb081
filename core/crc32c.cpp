#include "core/crc32c.h"

#include <array>

namespace ooze {
namespace {

// The reflected Castagnoli polynomial (0x1EDC6F41 bit-reversed).
constexpr uint32_t kPolynomial = 0x82F63B78u;
constexpr uint32_t kMaskDelta = 0xA282EAD8u;

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

uint32_t crc32c(const void* data, size_t size, uint32_t previous) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t crc = ~previous;  // the register starts at all ones; the result is inverted
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

}  // namespace ooze
