#include "actors/kv_table.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace ooze::actors {

void KvTable::put(const KeyValue& entry) { store(entry.key, entry.value); }

void KvTable::get(const std::string& from, uint64_t id, const WaitRequest& request) {
  auto found = entries_.find(request.key);
  if (found != entries_.end()) {
    outbox_.reply(from, id, KeyValue{found->first, found->second});
  } else if (request.timeout_ms <= 0) {
    outbox_.reply_error(from, id, "NotFound", "no key \"" + request.key + "\"");
  } else {
    get_waiters_.add(request.key, from, id, request.timeout_ms);
  }
}

void KvTable::add(const std::string& from, uint64_t id, const KvAdd& request) {
  auto found = entries_.find(request.key);
  uint64_t sum = static_cast<uint64_t>(request.delta);  // wraps on overflow, never undefined
  if (found != entries_.end() && found->second.size() == sizeof(int64_t)) {
    int64_t current = 0;
    std::memcpy(&current, found->second.data(), sizeof(current));
    sum += static_cast<uint64_t>(current);
  }
  int64_t value = static_cast<int64_t>(sum);
  store(request.key, std::string(reinterpret_cast<const char*>(&value), sizeof(value)));
  outbox_.reply(from, id, value);
}

void KvTable::wait(const std::string& from, uint64_t id, const KvWait& request) {
  std::vector<std::string> absent = missing(request.keys);
  if (absent.empty() || request.timeout_ms <= 0) {
    outbox_.reply(from, id, absent);
    return;
  }
  std::set<std::string> distinct(absent.begin(), absent.end());
  uint64_t waiter = next_waiter_++;
  keys_waiters_[waiter] = {from, id, deadline_after(request.timeout_ms), request.keys,
                           distinct.size()};
  for (const std::string& key : distinct) missed_by_[key].push_back(waiter);
}

void KvTable::expire_waiters(std::chrono::steady_clock::time_point now) {
  get_waiters_.expire(now, outbox_, [](const std::string& key) { return "key \"" + key + "\""; });
  for (auto waiter = keys_waiters_.begin(); waiter != keys_waiters_.end();) {
    if (waiter->second.deadline > now) {
      ++waiter;
      continue;
    }
    std::vector<std::string> absent = missing(waiter->second.keys);
    outbox_.reply(waiter->second.routing_id, waiter->second.request_id, absent);
    for (const std::string& key : absent) {
      auto index = missed_by_.find(key);
      if (index == missed_by_.end()) continue;
      auto& ids = index->second;
      ids.erase(std::remove(ids.begin(), ids.end(), waiter->first), ids.end());
      if (ids.empty()) missed_by_.erase(index);
    }
    waiter = keys_waiters_.erase(waiter);
  }
}

void KvTable::store(const std::string& key, const std::string& value) {
  entries_[key] = value;
  get_waiters_.answer(key, KeyValue{key, value}, outbox_);
  auto index = missed_by_.find(key);
  if (index == missed_by_.end()) return;
  std::vector<uint64_t> ids = std::move(index->second);
  missed_by_.erase(index);
  for (uint64_t id : ids) {
    auto waiter = keys_waiters_.find(id);
    if (waiter == keys_waiters_.end() || --waiter->second.missing > 0) continue;
    outbox_.reply(waiter->second.routing_id, waiter->second.request_id, std::vector<std::string>());
    keys_waiters_.erase(waiter);
  }
}

std::vector<std::string> KvTable::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> absent;
  for (const std::string& key : keys) {
    if (entries_.count(key) == 0) absent.push_back(key);
  }
  return absent;
}

}  // namespace ooze::actors
