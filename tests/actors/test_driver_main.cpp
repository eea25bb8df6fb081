// A driver for the tests that kill drivers: spawns three Counters (embedded, or in the cluster
// at argv[1] with $OOZE_CLUSTER_TOKEN), has one print a line, prints "PIDS a b c" and waits
// to be killed.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "actors/runtime.h"
#include "core/load_time_settings.h"
#include "tests/actors/test_actors.h"

using namespace ooze::actors;

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  run_worker_if_requested();
  RuntimeOptions options;
  options.worker_executable = testing::worker_program();
  if (argc > 1) options.address = argv[1];
  init(options);
  std::string pids;
  for (int i = 0; i < 3; ++i) {
    auto counter = spawn<testing::Counter>({}, i);
    if (i == 0) counter.call(&testing::Counter::print, std::string("streamed line")).get();
    pids += " " + std::to_string(counter.call(&testing::Counter::pid).get());
  }
  std::printf("PIDS%s\n", pids.c_str());
  std::fflush(stdout);
  while (true) pause();
}
