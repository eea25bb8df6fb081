// Requests the head answers later: a wait_placement_group or kv_get parks here under its key
// (the group id, the store key) until what it waits for exists or its deadline passes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "actors/head_outbox.h"

namespace ooze::actors {

// A waiter's deadline; absurd timeouts from the wire are clamped to a day.
std::chrono::steady_clock::time_point deadline_after(int64_t timeout_ms);

class KeyedWaiters {
 public:
  void add(const std::string& key, const std::string& routing_id, uint64_t request_id,
           int64_t timeout_ms);

  // Replies `value` to every waiter of `key` and forgets them.
  template <class T>
  void answer(const std::string& key, const T& value, HeadOutbox& outbox) {
    auto found = waiters_.find(key);
    if (found == waiters_.end()) return;
    for (const Waiter& waiter : found->second) {
      outbox.reply(waiter.routing_id, waiter.request_id, value);
    }
    waiters_.erase(found);
  }

  // Fails every waiter whose deadline is not after `now` with a Timeout error saying "timed out
  // waiting for " + describe(key).
  void expire(std::chrono::steady_clock::time_point now, HeadOutbox& outbox,
              const std::function<std::string(const std::string& key)>& describe);

 private:
  struct Waiter {
    std::string routing_id;
    uint64_t request_id = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  std::map<std::string, std::vector<Waiter>> waiters_;
};

}  // namespace ooze::actors
