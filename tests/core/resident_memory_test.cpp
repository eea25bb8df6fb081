#include "core/resident_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace ooze {
namespace {

TEST(ResidentMemory, ThePeakFollowsMemoryTouchedAndStartsAgainWhenReset) {
  constexpr int64_t kBytes = int64_t{256} << 20;
  const int64_t before = resident_bytes();
  char* block = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);  // resident only once touched
  EXPECT_GE(resident_bytes(), before + kBytes * 9 / 10);
  const int64_t peak = peak_resident_bytes();
  EXPECT_GE(peak, before + kBytes * 9 / 10);
  std::free(block);  // above glibc's mmap threshold: unmapped, no longer resident
  EXPECT_LT(resident_bytes(), peak - kBytes / 2);
  EXPECT_GE(peak_resident_bytes(), before + kBytes * 9 / 10) << "a peak stays until reset";
  ASSERT_TRUE(reset_peak_resident_bytes());
  EXPECT_LT(peak_resident_bytes(), peak - kBytes / 2);
}

}  // namespace
}  // namespace ooze
