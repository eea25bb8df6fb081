#include "core/blas_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/logging.h"

namespace ooze {

std::string blas_kernel_name() {
  // Looked up, not linked: the BLAS is whatever Debian's alternatives point libblas.so.3 at.
  using CoreName = char* (*)();
  const auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) return "";
  const char* name = core_name();
  return name == nullptr ? "" : name;
}

std::string best_blas_kernel_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

void use_this_cpus_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (blas_kernel_name() != "Prescott") return;  // its fallback for CPUs it does not know
  const std::string best = best_blas_kernel_for_this_cpu();
  if (best.empty()) return;
  ::setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  OOZE_LOG(WARN) << "OpenBLAS runs its generic kernels on this CPU, and restarting with "
                 << "OPENBLAS_CORETYPE=" << best << " failed (" << std::strerror(errno)
                 << "): matrix products will be several times slower";
}

}  // namespace ooze
