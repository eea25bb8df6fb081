// The CPU memory counter against tensors of known sizes: a tensor's bytes are counted while it
// lives and given back when it dies, and the peak keeps the most held since the last reset.
#include "core/cpu_memory_counter.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ooze {
namespace cpu_memory_counter_test {

TEST(CpuMemoryCounter, CountsTensorsWhileTheyLiveAndKeepsThePeak) {
  install_cpu_memory_counter();
  install_cpu_memory_counter();  // a second install changes nothing
  reset_peak_cpu_bytes();
  const int64_t before = cpu_bytes_in_use();
  constexpr int64_t kBytes = 4 << 20;
  {
    const at::Tensor a = at::empty({kBytes / 4}, at::kFloat);
    EXPECT_GE(cpu_bytes_in_use() - before, kBytes);
    {
      const at::Tensor b = at::empty({kBytes}, at::kByte);
      EXPECT_GE(cpu_bytes_in_use() - before, 2 * kBytes);
    }
    EXPECT_LT(cpu_bytes_in_use() - before, 2 * kBytes) << "b's bytes were not given back";
  }
  EXPECT_LT(cpu_bytes_in_use() - before, kBytes) << "a's bytes were not given back";
  EXPECT_GE(peak_cpu_bytes() - before, 2 * kBytes);
  reset_peak_cpu_bytes();
  EXPECT_EQ(peak_cpu_bytes(), cpu_bytes_in_use());
}

}  // namespace cpu_memory_counter_test
}  // namespace ooze
