// The test programs start as ooze does (tests/support/test_main.cpp calls
// start_with_load_time_settings first), so this process shows what a user's gets: OpenBLAS's
// kernels for this CPU, not its generic fallback.
#include "core/blas_kernels.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace ooze {
namespace {

TEST(BlasKernels, OpenBlasRunsKernelsForThisCpuNotItsGenericOnes) {
  const std::string running = blas_kernel_name();
  if (running.empty()) GTEST_SKIP() << "the BLAS here is not OpenBLAS";
  const std::string best = best_blas_kernel_for_this_cpu();
  if (best.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  EXPECT_NE(running, "Prescott") << "OpenBLAS fell back to its generic kernels on a CPU with "
                                 << best << " instructions";
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  if (chosen != nullptr) {
    // Set by us or by the user: either way OpenBLAS took it.
    EXPECT_EQ(running, chosen);
  }
}

}  // namespace
}  // namespace ooze
