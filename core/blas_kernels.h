// OpenBLAS, the BLAS under Debian's LibTorch, picks its kernels by CPU model when it loads, and a
// model newer than its release knows gets its generic "Prescott" kernels: on a Xeon of family 6,
// model 207 (AVX-512), Debian's OpenBLAS 0.3.21 ran a one-thread float32 matmul at 15 GFLOPS
// where its AVX-512 kernels ("SkylakeX") ran it at 97. The choice is made before main() and
// cannot be undone afterwards, but the OPENBLAS_CORETYPE variable decides it at load: every ooze
// program sets it on that fallback (core/load_time_settings.h).
#pragma once

#include <string>

namespace ooze {

// The kernel set OpenBLAS runs ("SkylakeX", "Haswell", "Prescott", ...), or "" when the BLAS
// is not OpenBLAS.
std::string blas_kernel_name();

// The OpenBLAS kernel set for this CPU's instructions: "SkylakeX" with AVX-512, "Haswell" with
// AVX2 and FMA, "" otherwise (the generic kernels are what OpenBLAS would pick anyway).
std::string best_blas_kernel_for_this_cpu();

}  // namespace ooze
