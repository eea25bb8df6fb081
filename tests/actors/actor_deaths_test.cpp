// How a driver learns of its actors' deaths and stops them (embedded head and node, real worker
// processes): ActorDiedError names the actor by label, id and pid with the reason; dead_actors()
// lists the deaths kill() did not ask for; a worker stopped by a signal (SIGSTOP) is killed by
// its node after a few seconds rather than hanging its callers; shutdown_before_exit() from another
// thread kills and reaps the workers while the main thread is still in a call; and what a worker
// started dies with it, however it ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "actors/runtime.h"
#include "tests/actors/test_actors.h"
#include "tests/support/process.h"

namespace ooze::actors {
namespace actor_deaths_test {

using testing::Counter;
using testing::process_gone;
using Clock = std::chrono::steady_clock;

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void start_runtime(const std::string& worker_executable = testing::worker_program()) {
  RuntimeOptions options;
  options.worker_executable = worker_executable;
  options.resources = {{"CPU", 8}};
  init(options);
}

class ActorDeathsTest : public ::testing::Test {
 protected:
  void TearDown() override { shutdown(); }
};

TEST_F(ActorDeathsTest, ActorDiedErrorNamesTheActorItsProcessAndTheSignal) {
  start_runtime();
  auto counter = spawn<Counter>({}, 0);
  const int pid = counter.call(&Counter::pid).get();
  auto pending = counter.call(&Counter::sleep_ms, 60000);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  const std::string expected = "Counter (actor " + counter.id() + ", pid " + std::to_string(pid) +
                               ") died: killed by signal 9";
  try {
    pending.get();
    FAIL() << "expected ActorDiedError";
  } catch (const ActorDiedError& error) {
    EXPECT_TRUE(contains(error.what(), expected)) << error.what();
    EXPECT_EQ(error.actor(), "Counter");
    EXPECT_EQ(error.actor_id(), counter.id());
    EXPECT_EQ(error.pid(), pid);
  }
  // A call made after the death, and a wait for the actor, fail the same way.
  try {
    counter.call(&Counter::get).get();
    FAIL() << "expected ActorDiedError";
  } catch (const ActorDiedError& error) {
    EXPECT_TRUE(contains(error.what(), expected)) << error.what();
  }
  try {
    counter.wait_ready(std::chrono::seconds(5));
    FAIL() << "expected ActorDiedError";
  } catch (const ActorDiedError& error) {
    EXPECT_TRUE(contains(error.what(), expected)) << error.what();
  }
}

TEST_F(ActorDeathsTest, DeadActorsListsTheDeathsKillDidNotAskFor) {
  start_runtime();
  auto crashed = spawn<Counter>({}, 1);
  auto killed = spawn<Counter>({}, 2);
  auto alive = spawn<Counter>({}, 3);
  const int crashed_pid = crashed.call(&Counter::pid).get();
  killed.wait_ready();
  alive.wait_ready();
  // Nobody died: the whole settle time is waited, and nothing is listed.
  auto start = Clock::now();
  EXPECT_TRUE(dead_actors(std::chrono::milliseconds(200)).empty());
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(200));

  kill(killed);
  // kill() returns before the process is gone; once the runtime has seen it die, calls fail.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (killed.info().state != ActorState::kDead && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_THROW(killed.call(&Counter::get).get(), ActorDiedError);
  ASSERT_EQ(::kill(crashed_pid, SIGKILL), 0);
  start = Clock::now();
  const std::vector<ActorInfo> dead = dead_actors(std::chrono::seconds(10));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2)) << "the death took long to be known";
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].actor_id, crashed.id());
  EXPECT_EQ(dead[0].label, "Counter");
  EXPECT_EQ(dead[0].pid, crashed_pid);
  EXPECT_TRUE(contains(dead[0].death_reason, "killed by signal 9")) << dead[0].death_reason;
  EXPECT_EQ(alive.call(&Counter::get).get(), 3);
}

TEST_F(ActorDeathsTest, AWorkerStoppedBySignalIsKilledByItsNodeAndACallInItFails) {
  start_runtime();
  auto stopped = spawn<Counter>({}, 1);
  auto paused = spawn<Counter>({}, 2);
  const int stopped_pid = stopped.call(&Counter::pid).get();
  const int paused_pid = paused.call(&Counter::pid).get();
  // A stop shorter than the node's stopped_worker_timeout (5 s) is forgiven.
  ASSERT_EQ(::kill(paused_pid, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  ASSERT_EQ(::kill(paused_pid, SIGCONT), 0);
  // A call in flight when the process stops fails once the node has killed it, instead of
  // waiting for an answer that never comes.
  auto pending = stopped.call(&Counter::sleep_ms, 60000);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = Clock::now();
  ASSERT_EQ(::kill(stopped_pid, SIGSTOP), 0);
  try {
    pending.get();
    FAIL() << "expected ActorDiedError";
  } catch (const ActorDiedError& error) {
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, std::chrono::milliseconds(4900));
    EXPECT_LT(waited, std::chrono::seconds(8)) << "the stop took long to be acted on";
    EXPECT_TRUE(contains(error.what(), "stopped by a signal for")) << error.what();
    EXPECT_EQ(error.pid(), stopped_pid);
  }
  EXPECT_EQ(paused.call(&Counter::get).get(), 2);
}

TEST_F(ActorDeathsTest, ShutdownBeforeExitReapsTheWorkersWhileAnotherThreadIsInACall) {
  start_runtime();
  auto first = spawn<Counter>({}, 0);
  auto second = spawn<Counter>({}, 0);
  const int first_pid = first.call(&Counter::pid).get();
  const int second_pid = second.call(&Counter::pid).get();
  const std::string sockets = session_dir() + "/sockets";
  auto pending = first.call(&Counter::sleep_ms, 60000);
  std::string waiter_saw;
  std::thread waiter([&] {
    try {
      pending.get(std::chrono::milliseconds(1500));
      waiter_saw = "a result";
    } catch (const Error& error) {
      waiter_saw = error.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  std::thread([] { shutdown_before_exit(); }).join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  // Reaped by the time it returned: no wait, no zombie.
  EXPECT_NE(::kill(first_pid, 0), 0) << "worker " << first_pid << " is still there";
  EXPECT_NE(::kill(second_pid, 0), 0) << "worker " << second_pid << " is still there";
  EXPECT_FALSE(is_initialized());
  EXPECT_FALSE(std::filesystem::exists(sockets));
  // The thread in the call is not left with freed memory: its wait ends as waits do.
  waiter.join();
  EXPECT_FALSE(waiter_saw.empty());
  EXPECT_NE(waiter_saw, "a result");
}

// A worker program that starts a process of its own (in the worker's process group, which it
// inherits) before it becomes the worker, and writes that process's pid to DIR/child-<pid>.
std::string worker_with_a_child(const std::string& dir) {
  const std::string path = dir + "/worker-with-a-child.sh";
  std::ofstream(path) << "#!/bin/sh\n"
                      << "sleep 300 </dev/null >/dev/null 2>&1 &\n"
                      << "echo $! > " << dir << "/child-$$\n"
                      << "exec " << testing::worker_program() << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

int child_of(const std::string& dir, int worker_pid) {
  int child = 0;
  wait_until(
      [&] {
        std::ifstream in(dir + "/child-" + std::to_string(worker_pid));
        return static_cast<bool>(in >> child);
      },
      std::chrono::seconds(5));
  return child;
}

TEST_F(ActorDeathsTest, WhatAWorkerStartedDiesWithItHoweverItEnds) {
  const std::string dir = ::ooze::testing::make_temp_dir("actor-deaths");
  start_runtime(worker_with_a_child(dir));
  auto exits = spawn<Counter>({}, 0);
  auto killed = spawn<Counter>({}, 0);
  auto stopped = spawn<Counter>({}, 0);
  const int exits_child = child_of(dir, exits.call(&Counter::pid).get());
  const int killed_child = child_of(dir, killed.call(&Counter::pid).get());
  const int stopped_child = child_of(dir, stopped.call(&Counter::pid).get());
  for (int child : {exits_child, killed_child, stopped_child}) {
    ASSERT_GT(child, 0) << "the worker program did not report its child";
    ASSERT_FALSE(process_gone(child)) << "the worker's child " << child << " is not running";
  }
  // The worker exits on its own: its child goes when the node reaps it.
  EXPECT_THROW(exits.call(&Counter::exit_now, 0).get(), ActorDiedError);
  EXPECT_TRUE(wait_until([&] { return process_gone(exits_child); }, std::chrono::seconds(2)))
      << "the child of a worker that exited is still running";
  EXPECT_FALSE(process_gone(killed_child));
  // kill() of the actor.
  kill(killed);
  EXPECT_TRUE(wait_until([&] { return process_gone(killed_child); }, std::chrono::seconds(2)))
      << "the child of a killed worker is still running";
  // shutdown() of the runtime.
  EXPECT_FALSE(process_gone(stopped_child));
  shutdown();
  EXPECT_TRUE(wait_until([&] { return process_gone(stopped_child); }, std::chrono::seconds(2)))
      << "the child of a worker stopped by shutdown() is still running";
}

}  // namespace actor_deaths_test
}  // namespace ooze::actors
