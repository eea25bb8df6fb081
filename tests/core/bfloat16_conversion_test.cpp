// convert_to_bfloat16 against LibTorch's own fp32 -> bf16 conversion (tensor.to(kBFloat16)), bit
// for bit, on values that exercise every case of the rounding, at every alignment and length
// that leaves its vector loop a head or a tail.
#include "core/bfloat16_conversion.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace ooze {
namespace {

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Values whose rounding is each case: ties to even both ways, just above and below a tie, the
// largest finite float (rounds up to infinity), subnormals, signed zeros and infinities; then
// random values over many magnitudes.
std::vector<float> hard_values() {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.5f,
                               std::numeric_limits<float>::max(),
                               -std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               from_bits(0x00018000u)};
  for (uint32_t kept : {0x3F80u, 0x3F81u, 0xBF80u, 0xBF81u, 0x7F00u}) {
    for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, 0x0001u, 0xFFFFu}) {
      values.push_back(from_bits(kept << 16 | low));
    }
  }
  const at::Tensor random =
      at::randn({4000}, at::detail::createCPUGenerator(5)) *
      at::pow(10.0, at::randint(-30, 30, {4000}, at::detail::createCPUGenerator(6)));
  const float* data = random.data_ptr<float>();
  values.insert(values.end(), data, data + random.numel());
  return values;
}

TEST(ConvertToBfloat16, GivesLibTorchsBitsAtEveryAlignmentAndLength) {
  const std::vector<float> values = hard_values();
  const at::Tensor source = at::from_blob(const_cast<float*>(values.data()),
                                          {static_cast<int64_t>(values.size())}, at::kFloat);
  const at::Tensor expected = source.to(at::kBFloat16);
  const auto* expected_bits = reinterpret_cast<const uint16_t*>(expected.data_ptr());
  std::vector<uint16_t> destination(values.size() + 64);
  for (size_t offset : {0, 1, 3, 15, 16, 17}) {
    for (size_t count :
         {size_t{0}, size_t{1}, size_t{7}, size_t{16}, size_t{33}, values.size() - offset}) {
      std::fill(destination.begin(), destination.end(), uint16_t{0xABCD});
      convert_to_bfloat16(values.data() + offset, destination.data() + offset, count);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(destination[offset + i], expected_bits[offset + i])
            << "value " << values[offset + i] << " at offset " << offset << ", count " << count;
      }
      // Nothing written around the range.
      for (size_t i = 0; i < offset; ++i) ASSERT_EQ(destination[i], 0xABCD);
      ASSERT_EQ(destination[offset + count], 0xABCD) << "offset " << offset << ", count " << count;
    }
  }
}

TEST(ConvertToBfloat16, KeepsANaNANaN) {
  std::vector<float> values(40, std::numeric_limits<float>::quiet_NaN());
  values[3] = -std::numeric_limits<float>::quiet_NaN();
  values[20] = from_bits(0x7F800001u);  // a signalling NaN whose payload rounding would drop
  std::vector<uint16_t> destination(values.size());
  convert_to_bfloat16(values.data(), destination.data(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t widened = static_cast<uint32_t>(destination[i]) << 16;
    EXPECT_TRUE(std::isnan(from_bits(widened))) << "value " << i;
  }
}

}  // namespace
}  // namespace ooze
