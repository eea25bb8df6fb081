// OpenBLAS, the BLAS under Debian's LibTorch, picks its kernels by CPU model when it loads, and a
// model newer than its release knows gets its generic "Prescott" kernels: on a Xeon of family 6,
// model 207 (AVX-512), Debian's OpenBLAS 0.3.21 ran a one-thread float32 matmul at 15 GFLOPS
// where its AVX-512 kernels ("SkylakeX") ran it at 97. The choice is made before main() and
// cannot be undone afterwards, but the OPENBLAS_CORETYPE variable decides it at load. So a
// program that finds the fallback on a CPU with AVX-512 or AVX2 sets the variable and starts
// itself again, once; the processes it starts (workers, ranks, Python hooks) inherit it.
#pragma once

#include <string>

namespace ooze {

// Call first in main(), before any thread starts. Returns at once when OpenBLAS already uses
// kernels for this CPU, is not the BLAS, or OPENBLAS_CORETYPE is set (the user's choice stands);
// otherwise executes /proc/self/exe with `argv` again and does not return (unless that fails,
// which it logs, and goes on with the generic kernels).
void use_this_cpus_blas_kernels(char** argv);

// The kernel set OpenBLAS runs ("SkylakeX", "Haswell", "Prescott", ...), or "" when the BLAS
// is not OpenBLAS.
std::string blas_kernel_name();

// The OpenBLAS kernel set for this CPU's instructions: "SkylakeX" with AVX-512, "Haswell" with
// AVX2 and FMA, "" otherwise (the generic kernels are what OpenBLAS would pick anyway).
std::string best_blas_kernel_for_this_cpu();

}  // namespace ooze
