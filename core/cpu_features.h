// What this CPU runs, for kernels that pick an AVX-512 loop at run time and keep a plain one (or
// LibTorch's) for other machines.
#pragma once

namespace ooze {

inline bool cpu_has_avx512f() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

}  // namespace ooze
