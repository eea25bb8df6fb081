// The program node agents start for the tests' actors.
#include <cstdio>

#include "actors/runtime.h"
#include "core/load_time_settings.h"

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  ooze::actors::run_worker_if_requested();
  std::fprintf(stderr, "actors_test_worker: started without an actor to host\n");
  return 2;
}
