#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>

namespace ooze {
namespace thread_pool_test {

using namespace std::chrono_literals;

TEST(ThreadPoolTest, RunsTasksConcurrentlyAndReturnsTheirResults) {
  ThreadPool pool(4);
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  std::vector<std::future<int>> results;
  for (int i = 0; i < 8; ++i) {
    results.push_back(pool.submit([&, i] {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(20ms);
      --running;
      return i * i;
    }));
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(results[i].get(), i * i);
  EXPECT_EQ(most.load(), 4);  // four threads, all busy at once, never more
}

TEST(ThreadPoolTest, RunAllWaitsForEveryTaskThenRethrowsTheFirstError) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> ran(20);
  try {
    pool.run_all(20, [&](size_t i) {
      std::this_thread::sleep_for(1ms);
      ran[i] = 1;
      if (i == 7 || i == 13) throw std::runtime_error("task " + std::to_string(i));
    });
    FAIL() << "run_all should have thrown";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()), "task 7");
  }
  for (const auto& flag : ran) EXPECT_EQ(flag.load(), 1);  // the error did not cut the rest
}

TEST(ThreadPoolTest, DestructorRunsWhatWasSubmitted) {
  std::atomic<int> count{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 50; ++i) pool.submit([&] { ++count; });
  }
  EXPECT_EQ(count.load(), 50);
}

}  // namespace thread_pool_test
}  // namespace ooze
