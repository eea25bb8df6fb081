// CRC-32 against published check values and a bit-at-a-time implementation written here, in
// one piece and continued over splits, and over files.
#include "core/checksum.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace checksum_test {

// The definition: shift one bit at a time through the reflected register.
uint32_t bitwise_crc32(const std::vector<uint8_t>& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

std::vector<uint8_t> random_bytes(size_t size, unsigned seed) {
  std::mt19937 generator(seed);
  std::vector<uint8_t> bytes(size);
  for (auto& byte : bytes) byte = static_cast<uint8_t>(generator());
  return bytes;
}

TEST(Crc32, PublishedCheckValues) {
  EXPECT_EQ(ooze::crc32("", 0), 0u);
  EXPECT_EQ(ooze::crc32("123456789", 9), 0xCBF43926u);  // the catalogue's check value
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(ooze::crc32(fox.data(), fox.size()), 0x414FA339u);
}

TEST(Crc32, MatchesBitwiseDefinitionAndContinuesOverSplits) {
  for (size_t size : {1u, 7u, 255u, 4096u, 100003u}) {
    const std::vector<uint8_t> bytes = random_bytes(size, static_cast<unsigned>(size));
    const uint32_t want = bitwise_crc32(bytes);
    EXPECT_EQ(ooze::crc32(bytes.data(), bytes.size()), want) << size;
    const size_t split = size / 3;
    const uint32_t first = ooze::crc32(bytes.data(), split);
    EXPECT_EQ(ooze::crc32(bytes.data() + split, size - split, first), want) << size;
  }
}

// Pieces summed apart (as trainer ranks sum their shards' slices) combine into the whole's CRC,
// as the bitwise definition computes it over the joined bytes.
TEST(Crc32, PiecesSummedApartCombineIntoTheWholesCrc) {
  const std::vector<uint8_t> bytes = random_bytes(300007, 5);
  const uint32_t want = bitwise_crc32(bytes);
  for (const std::vector<size_t>& cuts : std::vector<std::vector<size_t>>{
           {0, 300007}, {0, 0, 300007}, {0, 100003, 200005, 300007}, {0, 1, 300006, 300007}}) {
    uint32_t combined = 0;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const size_t size = cuts[i + 1] - cuts[i];
      combined = ooze::crc32_combine(combined, ooze::crc32(bytes.data() + cuts[i], size), size);
    }
    EXPECT_EQ(combined, want) << cuts.size() - 1 << " pieces";
  }
}

TEST(Crc32, OneFlippedBitChangesIt) {
  std::vector<uint8_t> bytes = random_bytes(5000, 1);
  const uint32_t before = ooze::crc32(bytes.data(), bytes.size());
  bytes[1234] ^= 0x10;
  EXPECT_NE(ooze::crc32(bytes.data(), bytes.size()), before);
}

TEST(Crc32, ChecksumsFilesLargerThanOneReadChunk) {
  const std::string path = ::testing::TempDir() + "/crc32_file_" + std::to_string(::getpid());
  const std::vector<uint8_t> bytes = random_bytes((3u << 20) + 17, 7);  // over 3 chunks of 1 MiB
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  const ooze::FileChecksum sum = ooze::checksum_file(path);
  EXPECT_EQ(sum.bytes, bytes.size());
  EXPECT_EQ(sum.crc32, bitwise_crc32(bytes));
  std::remove(path.c_str());
  EXPECT_THROW(ooze::checksum_file(path), ooze::IoError);
}

}  // namespace checksum_test
