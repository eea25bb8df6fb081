// The program node agents start for the tests' actors.
#include <cstdio>

#include "actors/runtime.h"

int main() {
  ooze::actors::run_worker_if_requested();
  std::fprintf(stderr, "actors_test_worker: started without an actor to host\n");
  return 2;
}
