// Settings that libraries under ooze read once, when they load, before main() runs, and that
// ooze's processes need on this machine:
//   OPENBLAS_CORETYPE    OpenBLAS picks its kernels by CPU model and falls back to its generic
//                        ones on a model newer than its release (core/blas_kernels.h): 15
//                        against 97 GFLOPS on one core of this machine's Xeon.
//   GLIBC_TUNABLES       glibc.malloc.hugetlb=1: glibc maps allocations above 32 MB afresh and
//                        returns them at free, so every gathered layer, gradient and logits
//                        tensor of a step arrives as new pages, each faulted in and zeroed by
//                        the kernel. With transparent huge pages in "madvise" mode (Debian's
//                        default) the tunable has malloc ask for them, one fault per 2 MB instead
//                        of per 4 kB: a short RL step of a 0.6B model on 2 ranks went from
//                        22.7M page faults and 56.0 s to 0.7M and 37.9 s (train 30.4 -> 20.4 s).
// A setting the user made stands. When one is missing the program sets it and starts itself
// again, once; the processes it starts (workers, ranks, Python hooks) inherit the environment.
#pragma once

#include <string>

namespace ooze {

// Call first in main(), before any thread starts. Returns at once when nothing is missing;
// otherwise executes /proc/self/exe with `argv` again and does not return (unless that fails,
// which it logs, and goes on as it is).
void start_with_load_time_settings(char** argv);

// glibc.malloc.hugetlb=1 added to the GLIBC_TUNABLES value `tunables` (null: unset), or "" when
// it names glibc.malloc.hugetlb already (the user's choice stands).
std::string tunables_with_huge_pages(const char* tunables);

// The mode of transparent huge pages, the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise", "never"); "" when unknown.
std::string transparent_huge_page_mode();

}  // namespace ooze
