// The actor runtime on one machine (embedded head and node, real worker processes): calls,
// ordering, errors, deaths, restarts, named actors, environment, logs, tensors.
#include "actors/runtime.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <type_traits>
#include <vector>

#include "actors/actor_group.h"
#include "core/tensor_serialization.h"
#include "tests/actors/test_actors.h"

namespace ooze::actors {
namespace runtime_test {

using testing::BrokenConstructor;
using testing::Counter;
using testing::Gate;
using testing::process_gone;
using testing::Tally;
using testing::TimedTally;
using Clock = std::chrono::steady_clock;

class RuntimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RuntimeOptions options;
    options.worker_executable = testing::worker_program();
    options.resources = {{"CPU", 16}, {"GPU", 4}};
    init(options);
  }
  static void TearDownTestSuite() { shutdown(); }
};

TEST_F(RuntimeTest, CallsReturnResultsInSubmissionOrder) {
  auto counter = spawn<Counter>({}, 10);
  EXPECT_EQ(counter.call(&Counter::add, 5).get(), 15);
  // Pipelined: 500 calls submitted before any result is taken; each sees every earlier one.
  std::vector<Future<int>> futures;
  for (int i = 1; i <= 500; ++i) futures.push_back(counter.call(&Counter::add, i));
  int expected = 15;
  for (int i = 1; i <= 500; ++i) {
    expected += i;
    EXPECT_EQ(futures[i - 1].get(), expected);
  }
  EXPECT_EQ(counter.call(&Counter::get).get(), expected);
  EXPECT_NE(counter.call(&Counter::pid).get(), getpid());
}

TEST_F(RuntimeTest, InheritedMethodsAreCalledByTheBaseOrTheDerivedName) {
  // C++ types &TimedTally::add as the base's member; registration and calls must agree on it.
  static_assert(std::is_same_v<decltype(&TimedTally::add), int (Tally::*)(int)>);
  auto tally = spawn<TimedTally>({});
  EXPECT_EQ(tally.call(&Tally::add, 2).get(), 2);
  EXPECT_EQ(tally.call(&TimedTally::add, 3).get(), 5);
  Future<int> total = tally.call(&TimedTally::total);  // a reference result comes back by value
  EXPECT_EQ(total.get(), 5);
  EXPECT_EQ(tally.call(&Tally::total).get(), 5);
  // An override, spelled through the base: the actor's own method runs.
  EXPECT_EQ(tally.call(&Tally::kind).get(), "timed");
  EXPECT_EQ(tally.call(&TimedTally::kind).get(), "timed");
  // A duration travels on the wire.
  EXPECT_EQ(tally.call(&TimedTally::add_seconds, std::chrono::seconds(4)).get(), 9);
}

TEST_F(RuntimeTest, MethodExceptionBecomesRemoteErrorAndActorKeepsServing) {
  auto counter = spawn<Counter>({}, 1);
  try {
    counter.call(&Counter::fail, std::string("bad input 42")).get();
    FAIL() << "expected RemoteError";
  } catch (const RemoteError& error) {
    EXPECT_EQ(error.type(), "std::invalid_argument");
    EXPECT_NE(error.remote_message().find("bad input 42"), std::string::npos);
    EXPECT_EQ(error.actor(), "Counter");
  }
  EXPECT_EQ(counter.call(&Counter::add, 1).get(), 2);
}

TEST_F(RuntimeTest, ExitFailsPendingAndLaterCallsWithActorDiedError) {
  auto counter = spawn<Counter>({}, 0);
  counter.wait_ready();
  auto start = Clock::now();
  auto exit = counter.call(&Counter::exit_now, 3);
  auto pending = counter.call(&Counter::sleep_ms, 60000);  // queued behind the exit
  EXPECT_THROW(exit.get(), ActorDiedError);
  try {
    pending.get();
    FAIL() << "expected ActorDiedError";
  } catch (const ActorDiedError& error) {
    EXPECT_NE(error.reason().find("exited with code 3"), std::string::npos) << error.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_THROW(counter.call(&Counter::get).get(), ActorDiedError);
  EXPECT_EQ(counter.info().state, ActorState::kDead);
}

TEST_F(RuntimeTest, KillDashNineIsReportedWithTheSignalWithinTwoSeconds) {
  auto counter = spawn<Counter>({}, 0);
  int pid = counter.call(&Counter::pid).get();
  auto pending = counter.call(&Counter::sleep_ms, 60000);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = Clock::now();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  try {
    pending.get();
    FAIL() << "expected ActorDiedError";
  } catch (const ActorDiedError& error) {
    EXPECT_NE(error.reason().find("signal 9"), std::string::npos) << error.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

TEST_F(RuntimeTest, MaxRestartsRerunsTheConstructorThenGivesUp) {
  ActorOptions options;
  options.max_restarts = 1;
  auto counter = spawn<Counter>(options, 7);
  EXPECT_EQ(counter.call(&Counter::add, 1).get(), 8);
  int first_pid = counter.call(&Counter::pid).get();
  ::kill(first_pid, SIGKILL);
  // Calls made after the death go to the new instance, whose constructor ran again.
  auto deadline = Clock::now() + std::chrono::seconds(10);
  int value = -1;
  while (Clock::now() < deadline) {
    try {
      value = counter.call(&Counter::get).get();
      if (counter.info().restarts == 1) break;
    } catch (const ActorDiedError&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_EQ(value, 7);
  EXPECT_EQ(counter.info().restarts, 1);
  int second_pid = counter.call(&Counter::pid).get();
  EXPECT_NE(second_pid, first_pid);
  ::kill(second_pid, SIGKILL);
  counter.call(&Counter::sleep_ms, 1).wait();
  // Out of restarts: dead for good.
  deadline = Clock::now() + std::chrono::seconds(5);
  while (counter.info().state != ActorState::kDead && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(counter.info().state, ActorState::kDead);
  EXPECT_THROW(counter.call(&Counter::get).get(), ActorDiedError);
}

TEST_F(RuntimeTest, ConstructorExceptionMakesTheActorDeadWithTheReason) {
  auto broken = spawn<BrokenConstructor>({}, std::string("no weights at /x"));
  try {
    broken.wait_ready(std::chrono::seconds(10));
    FAIL() << "expected ActorDiedError";
  } catch (const ActorDiedError& error) {
    EXPECT_NE(error.reason().find("no weights at /x"), std::string::npos) << error.what();
  }
  EXPECT_THROW(broken.call(&BrokenConstructor::get).get(), ActorDiedError);
}

TEST_F(RuntimeTest, NamedActorsAreFoundByName) {
  ActorOptions options;
  options.name = "the-counter";
  auto counter = spawn<Counter>(options, 100);
  counter.call(&Counter::add, 1).get();
  auto found = get_actor<Counter>("the-counter");
  EXPECT_EQ(found.id(), counter.id());
  EXPECT_EQ(found.call(&Counter::get).get(), 101);
  EXPECT_THROW(get_actor<Gate>("the-counter"), Error);
  EXPECT_THROW(get_actor<Counter>("nobody"), Error);
  EXPECT_THROW(spawn<Counter>(options, 1), Error);  // the name is taken
}

TEST_F(RuntimeTest, KillFailsPendingCallsAndNeverRestarts) {
  ActorOptions options;
  options.max_restarts = 3;
  auto counter = spawn<Counter>(options, 0);
  counter.wait_ready();
  auto pending = counter.call(&Counter::sleep_ms, 60000);
  kill(counter);
  EXPECT_THROW(pending.get(), ActorDiedError);
  EXPECT_THROW(counter.call(&Counter::get).get(), ActorDiedError);
  EXPECT_EQ(counter.info().restarts, 0);
}

TEST_F(RuntimeTest, MaxConcurrencyLetsACallReachABusyActor) {
  ActorOptions options;
  options.max_concurrency = 2;
  auto gate = spawn<Gate>(options);
  auto blocked = gate.call(&Gate::block);
  EXPECT_EQ(gate.call(&Gate::release).get(std::chrono::seconds(10)), 2);
  EXPECT_EQ(blocked.get(std::chrono::seconds(10)), 1);
}

TEST_F(RuntimeTest, GetWithTimeoutAndWaitAny) {
  auto slow = spawn<Counter>({}, 0);
  auto fast = spawn<Counter>({}, 0);
  auto sleeping = slow.call(&Counter::sleep_ms, 3000);
  EXPECT_THROW(sleeping.get(std::chrono::milliseconds(100)), GetTimeoutError);
  std::vector<Future<int>> both{sleeping, fast.call(&Counter::sleep_ms, 10)};
  EXPECT_EQ(wait_any(both, std::chrono::seconds(10)), 1u);
  EXPECT_EQ(sleeping.get(), 3000);
}

// As a group's ranks do when one dies while the others wait for it in a collective: get_all
// reports the death at once, not after the waiting call ahead of it in order returns.
TEST_F(RuntimeTest, GetAllThrowsTheFirstFailureWithoutWaitingForTheCallsBeforeIt) {
  auto waiting = spawn<Counter>({}, 0);
  auto dying = spawn<Counter>({}, 0);
  auto failing = spawn<Counter>({}, 0);
  waiting.wait_ready();
  dying.wait_ready();
  failing.wait_ready();
  const auto start = Clock::now();
  EXPECT_THROW(get_all(std::vector<Future<int>>{waiting.call(&Counter::sleep_ms, 60000),
                                                dying.call(&Counter::exit_now, 3)}),
               ActorDiedError);
  try {
    get_all(std::vector<Future<int>>{waiting.call(&Counter::sleep_ms, 60000),
                                     failing.call(&Counter::fail, std::string("rank 1 refused"))});
    FAIL() << "expected RemoteError";
  } catch (const RemoteError& error) {
    EXPECT_NE(error.remote_message().find("rank 1 refused"), std::string::npos);
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  kill(waiting);
  // Without failures every result comes, in order, whichever finishes first.
  auto slow = spawn<Counter>({}, 0);
  EXPECT_EQ(get_all(std::vector<Future<int>>{slow.call(&Counter::sleep_ms, 300),
                                             failing.call(&Counter::add, 7)}),
            (std::vector<int>{300, 7}));
}

TEST_F(RuntimeTest, WorkersGetGpusEnvironmentAndRankVariables) {
  ActorOptions options;
  options.resources = {{"GPU", 1}};
  options.env = {{"MY_SETTING", "on"}};
  auto group = ActorGroup<Counter>::spawn(2, {options, nullptr, "trainers"}, 0);
  std::set<std::string> devices;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(group[rank].call(&Counter::env, std::string("RANK")).get(), std::to_string(rank));
    EXPECT_EQ(group[rank].call(&Counter::env, std::string("WORLD_SIZE")).get(), "2");
    EXPECT_EQ(group[rank].call(&Counter::env, std::string("MY_SETTING")).get(), "on");
    EXPECT_EQ(group[rank].call(&Counter::env, std::string("OOZE_GROUP")).get(), "trainers");
    devices.insert(group[rank].call(&Counter::env, std::string("CUDA_VISIBLE_DEVICES")).get());
  }
  EXPECT_EQ(devices.size(), 2u);  // two different GPUs of the node's four
  for (const std::string& device : devices) EXPECT_TRUE(device >= "0" && device <= "3") << device;
  auto results = get_all(group.call_all(&Counter::add, 5));
  EXPECT_EQ(results, (std::vector<int>{5, 5}));
  auto each =
      get_all(group.call_each(&Counter::add, [](int rank) { return std::make_tuple(rank); }));
  EXPECT_EQ(each, (std::vector<int>{5, 6}));
}

TEST_F(RuntimeTest, ResourcesNoNodeHasFailAtSpawn) {
  ActorOptions options;
  options.resources = {{"GPU", 8}};
  try {
    spawn<Counter>(options, 0);
    FAIL() << "expected PlacementError";
  } catch (const PlacementError& error) {
    EXPECT_NE(std::string(error.what()).find("GPU"), std::string::npos) << error.what();
  }
}

TEST_F(RuntimeTest, OutputIsSavedUnderTheSessionDirectory) {
  auto counter = spawn<Counter>({}, 0);
  int pid = counter.call(&Counter::pid).get();
  counter.call(&Counter::print, std::string("hello from the actor")).get();
  std::string prefix = "Counter-" + counter.id() + "-" + std::to_string(pid);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  std::string out, err;
  while (Clock::now() < deadline) {
    std::ifstream out_file(session_dir() + "/logs/" + prefix + ".out");
    std::ifstream err_file(session_dir() + "/logs/" + prefix + ".err");
    out.assign(std::istreambuf_iterator<char>(out_file), std::istreambuf_iterator<char>());
    err.assign(std::istreambuf_iterator<char>(err_file), std::istreambuf_iterator<char>());
    if (out.find("hello") != std::string::npos && err.find("hello") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(out.find("hello from the actor\n"), std::string::npos);
  EXPECT_NE(err.find("hello from the actor!\n"), std::string::npos);
}

// A caller waiting for its result reads the sockets itself while the others wait to be told:
// every thread must get its own results, also while a slow call holds the reading thread.
TEST_F(RuntimeTest, CallersOnManyThreadsEachGetTheirOwnResults) {
  std::vector<ActorHandle<Counter>> counters{spawn<Counter>({}, 0), spawn<Counter>({}, 0)};
  for (const auto& counter : counters) counter.wait_ready();
  constexpr int kThreads = 4;
  constexpr int kCalls = 150;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kCalls; ++i) {
          const auto& counter = counters[(t + i) % 2];
          const double value = t * 1000 + i;
          if (i % 50 == 0) {  // held while the others call
            wrong[t] += counter.call(&Counter::sleep_ms, 30).get(std::chrono::seconds(20)) != 30;
          } else if (t == 3) {  // two at once, waited for by wait_any and then get
            std::vector<Future<double>> both{
                counters[0].call(&Counter::sum, at::full({1}, value, at::kDouble)),
                counters[1].call(&Counter::sum, at::full({1}, value + 0.5, at::kDouble))};
            const size_t first = wait_any(both, std::chrono::seconds(20));
            wrong[t] += both[first].get() != value + 0.5 * static_cast<double>(first);
            wrong[t] += both[1 - first].get(std::chrono::seconds(20)) !=
                        value + 0.5 * static_cast<double>(1 - first);
          } else {
            const at::Tensor input = at::full({1}, value, at::kDouble);
            wrong[t] += counter.call(&Counter::sum, input).get(std::chrono::seconds(20)) != value;
          }
        }
      } catch (const std::exception& error) {
        errors[t] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_EQ(wrong[t], 0) << "thread " << t;
  }
}

// The caller who makes a call usually sends it as it waits; one that never waits must not
// leave it unsent.
TEST_F(RuntimeTest, ACallNobodyWaitsForIsStillSent) {
  auto counter = spawn<Counter>({}, 0);
  const int pid = counter.call(&Counter::pid).get();
  counter.call(&Counter::print, std::string("sent though nobody waits"));
  const std::string log =
      session_dir() + "/logs/Counter-" + counter.id() + "-" + std::to_string(pid) + ".out";
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  std::string out;
  while (Clock::now() < deadline && out.find("nobody waits") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream file(log);
    out.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  EXPECT_NE(out.find("sent though nobody waits\n"), std::string::npos) << log;
}

TEST_F(RuntimeTest, TensorsTravelBothWaysIntact) {
  auto counter = spawn<Counter>({}, 0);
  // Inline, out of band as a message part, and through shared memory (32 MiB).
  for (int64_t numel : {int64_t{3}, int64_t{1} << 16, int64_t{1} << 23}) {
    at::Tensor input = at::arange(numel, at::kFloat).reshape({-1, 1}) / 7;
    at::Tensor output = counter.call(&Counter::twice, input).get();
    ASSERT_EQ(output.sizes(), input.sizes());
    EXPECT_TRUE(at::equal(output, input * 2));
    EXPECT_DOUBLE_EQ(counter.call(&Counter::sum, input).get(), input.sum().item<double>());
  }
}

TEST_F(RuntimeTest, ActorsSpawnedByAnActorDieWithIt) {
  auto parent = spawn<Counter>({}, 0);
  int child_pid = parent.call(&Counter::spawn_child).get();
  EXPECT_FALSE(process_gone(child_pid));
  kill(parent);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!process_gone(child_pid) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(process_gone(child_pid));
}

}  // namespace runtime_test
}  // namespace ooze::actors
