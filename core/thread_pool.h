// A fixed set of worker threads running submitted tasks in order of submission: what lets the
// rollout score many samples at once (remote reward models and plugins spend their time
// waiting) without a thread per sample.
//
//   ThreadPool pool(8);
//   std::future<double> reward = pool.submit([&] { return score(sample); });
//   pool.run_all(samples.size(), [&](size_t i) { score(samples[i]); });  // waits for every i
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <type_traits>
#include <vector>

namespace ooze {

class ThreadPool {
 public:
  // At least one thread.
  explicit ThreadPool(size_t num_threads);
  // Runs what was submitted, then joins the threads.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  template <typename F>
  std::future<std::invoke_result_t<F>> submit(F task) {
    using Result = std::invoke_result_t<F>;
    auto packaged = std::make_shared<std::packaged_task<Result()>>(std::move(task));
    std::future<Result> result = packaged->get_future();
    enqueue([packaged] { (*packaged)(); });
    return result;
  }

  // Runs body(0) ... body(count - 1) on the pool and waits for all of them, so no task is left
  // running on the caller's data; then rethrows the first (lowest index) exception, if any.
  // Must not be called from one of this pool's own threads (it would wait on itself).
  void run_all(size_t count, const std::function<void(size_t)>& body);

  size_t size() const { return threads_.size(); }

 private:
  void enqueue(std::function<void()> task);
  void work();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::queue<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ooze
