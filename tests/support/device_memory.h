// The free memory of the current CUDA device as the driver sees it (cudaMemGetInfo), outside
// LibTorch's caching allocator: what the GPU tests read to see memory really handed back.
// Test executables that include it define OOZE_TEST_CUDA_RUNTIME and link CUDA::cudart where the
// toolkit is found (tests/engine/CMakeLists.txt).
#pragma once

#if defined(OOZE_TEST_CUDA_RUNTIME)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

namespace ooze::testing {

inline int64_t free_device_bytes() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return static_cast<int64_t>(free);
}

}  // namespace ooze::testing
#endif
