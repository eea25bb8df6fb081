#include "actors/keyed_waiters.h"

#include <algorithm>
#include <iterator>

namespace ooze::actors {

std::chrono::steady_clock::time_point deadline_after(int64_t timeout_ms) {
  return std::chrono::steady_clock::now() +
         std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms, 0, 86400000));
}

void KeyedWaiters::add(const std::string& key, const std::string& routing_id, uint64_t request_id,
                       int64_t timeout_ms) {
  waiters_[key].push_back({routing_id, request_id, deadline_after(timeout_ms)});
}

void KeyedWaiters::expire(std::chrono::steady_clock::time_point now, HeadOutbox& outbox,
                          const std::function<std::string(const std::string& key)>& describe) {
  for (auto entry = waiters_.begin(); entry != waiters_.end();) {
    auto& list = entry->second;
    for (auto waiter = list.begin(); waiter != list.end();) {
      if (waiter->deadline <= now) {
        outbox.reply_error(waiter->routing_id, waiter->request_id, "Timeout",
                           "timed out waiting for " + describe(entry->first));
        waiter = list.erase(waiter);
      } else {
        ++waiter;
      }
    }
    entry = list.empty() ? waiters_.erase(entry) : std::next(entry);
  }
}

}  // namespace ooze::actors
