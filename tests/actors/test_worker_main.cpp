// The program node agents start for the tests' actors.
#include <cstdio>

#include "actors/runtime.h"
#include "core/blas_kernels.h"

int main(int, char** argv) {
  ooze::use_this_cpus_blas_kernels(argv);  // first: it may start this program again
  ooze::actors::run_worker_if_requested();
  std::fprintf(stderr, "actors_test_worker: started without an actor to host\n");
  return 2;
}
