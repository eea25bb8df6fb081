// How many bytes LibTorch's CPU allocator holds, and the most it held since a reset: what the
// activation-memory figures of CPU runs are read from (benchmarks, the context-parallel tests).
//
//   install_cpu_memory_counter();          // before anything to be counted is allocated
//   reset_peak_cpu_bytes();
//   const int64_t before = cpu_bytes_in_use();
//   ... train a step ...
//   const int64_t activation = peak_cpu_bytes() - before;
//
// The counter wraps the default CPU allocator (c10::SetCPUAllocator): tensors allocated before
// it is installed are not counted, including when they are freed. Installing it twice is a no-op.
#pragma once

#include <cstdint>

namespace ooze {

void install_cpu_memory_counter();
int64_t cpu_bytes_in_use();
int64_t peak_cpu_bytes();  // since install or the last reset
void reset_peak_cpu_bytes();

}  // namespace ooze
