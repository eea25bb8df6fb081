// The result of an actor call, available later.
//
//   Future<int> sum = counter.call(&Counter::add, 2);
//   int value = sum.get();                            // or get(std::chrono::seconds(5))
//   std::vector<int> all = get_all(group.call_all(&Counter::get));
//   size_t first = wait_any(futures, std::chrono::seconds(1));
//
// get() throws RemoteError (the method threw), ActorDiedError (the actor died before
// answering), or GetTimeoutError (only with a timeout; the call goes on).
#pragma once

#include <any>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "actors/client.h"

namespace ooze::actors {

template <class R>
class Future {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<CallState> state) : state_(std::move(state)) {}

  bool ready() const {
    std::lock_guard<std::mutex> lock(state_->completion->mutex);
    return state_->finished;
  }
  bool failed() const {
    std::lock_guard<std::mutex> lock(state_->completion->mutex);
    return state_->finished && !state_->ok;
  }

  // Waits for the result. It is decoded once, on the first get() of any copy of this future
  // (tensors in it are views of the received message); get() from one thread at a time.
  R get() { return get(std::chrono::milliseconds::max()); }
  R get(std::chrono::milliseconds timeout) {
    wait(timeout);
    if (!state_->ok) state_->rethrow();
    if constexpr (std::is_void_v<R>) {
      return;
    } else {
      if (!state_->decoded) state_->decoded = std::make_shared<R>(from_payload<R>(state_->result));
      return *std::static_pointer_cast<R>(state_->decoded);
    }
  }

  // Waits until the call finished (successfully or not); throws GetTimeoutError after `timeout`.
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) const {
    if (!wait_for_call(*state_, timeout)) {
      throw GetTimeoutError("no result from " + state_->actor + " within " +
                            std::to_string(timeout.count()) + " ms");
    }
  }

  const std::shared_ptr<CallState>& state() const { return state_; }

 private:
  std::shared_ptr<CallState> state_;
};

// Waits for all; throws GetTimeoutError if they are not all done within `timeout` in total.
template <class R>
void wait_all(const std::vector<Future<R>>& futures,
              std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) {
  auto deadline = timeout == std::chrono::milliseconds::max()
                      ? std::chrono::steady_clock::time_point::max()
                      : std::chrono::steady_clock::now() + timeout;
  for (const Future<R>& future : futures) {
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      future.wait();
    } else {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      future.wait(std::max(left, std::chrono::milliseconds(0)));
    }
  }
}

// Waits until every call finished or one of them failed. A group's ranks often wait for each
// other in a collective: when rank 1 dies, rank 0 answers only once its collective times out, so
// waiting in rank order would report the death that late.
template <class R>
void wait_all_or_first_failure(const std::vector<Future<R>>& futures) {
  // Calls of one client share a completion; the others' calls are looked at under their own.
  auto one_failed = [&](const Completion& completion) {
    for (const Future<R>& future : futures) {
      const CallState& state = *future.state();
      if (state.completion.get() == &completion && state.finished && !state.ok) return true;
    }
    return false;
  };
  const Completion* looked_at = nullptr;
  uint64_t failures_seen = 0;
  for (const Future<R>& future : futures) {
    Completion& completion = *future.state()->completion;
    if (&completion != looked_at) {
      std::lock_guard<std::mutex> lock(completion.mutex);
      if (one_failed(completion)) return;
      looked_at = &completion;
      failures_seen = completion.failed_calls;
    }
    // Waking on every answer, the calls are looked through only when some call failed: the
    // wait stays linear in the number of calls.
    bool failed = false;
    wait_until_ready(
        completion,
        [&] {
          if (future.state()->finished) return true;
          if (completion.failed_calls == failures_seen) return false;
          failures_seen = completion.failed_calls;
          failed = one_failed(completion);
          return failed;
        },
        std::chrono::milliseconds::max());
    if (failed || !future.state()->ok) return;
  }
}

// The results of all, in order. A failure is thrown as soon as one call fails, without waiting
// for the others (they go on); when several failed by then, the lowest index's.
template <class R>
std::vector<R> get_all(std::vector<Future<R>> futures) {
  wait_all_or_first_failure(futures);
  for (Future<R>& future : futures) {
    if (future.failed()) future.get();
  }
  std::vector<R> results;
  results.reserve(futures.size());
  for (Future<R>& future : futures) results.push_back(future.get());
  return results;
}
inline void get_all(std::vector<Future<void>> futures) {
  wait_all_or_first_failure(futures);
  for (Future<void>& future : futures) {
    if (future.failed()) future.get();
  }
  for (Future<void>& future : futures) future.get();
}

// The index of a finished future (the lowest such index); throws GetTimeoutError when none
// finishes within `timeout`. Futures of one client share a completion signal.
template <class R>
size_t wait_any(const std::vector<Future<R>>& futures,
                std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) {
  if (futures.empty()) throw Error("wait_any needs at least one future");
  auto& completion = *futures.front().state()->completion;
  size_t index = 0;
  auto any = [&] {
    for (size_t i = 0; i < futures.size(); ++i) {
      if (futures[i].state()->finished) {
        index = i;
        return true;
      }
    }
    return false;
  };
  if (!wait_until_ready(completion, any, timeout)) {
    throw GetTimeoutError("none of " + std::to_string(futures.size()) + " calls finished within " +
                          std::to_string(timeout.count()) + " ms");
  }
  return index;
}

}  // namespace ooze::actors
