// The main of every test executable (one per tests/ folder). Multi-process tests start this same
// program again: as the worker that hosts an actor (the actor runtime's flag) or in a child role a
// test registered (tests/support/child_role.h).
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "actors/runtime.h"
#include "core/load_time_settings.h"
#include "tests/support/child_role.h"

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  // One intra-op thread per process: the tests run several processes at once on few cores, and
  // every worker this program starts inherits the variable.
  ::setenv("OMP_NUM_THREADS", "1", 1);
  at::set_num_threads(1);
  ooze::actors::run_worker_if_requested();
  if (const std::optional<int> code = ooze::testing::run_child_role_if_requested(argc, argv)) {
    return *code;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
