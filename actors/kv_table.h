// The head's key-value store: what processes leave for each other to find (collective groups'
// addresses and counters, NCCL unique ids), and the requests waiting for keys to be set. It is
// apart from the other tables because nothing in it concerns nodes or actors; the head keeps it
// only because every process of the cluster can reach the head (Ray's internal KV likewise).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actors/head_outbox.h"
#include "actors/keyed_waiters.h"
#include "actors/protocol.h"

namespace ooze::actors {

class KvTable {
 public:
  explicit KvTable(HeadOutbox& outbox) : outbox_(outbox) {}

  void put(const KeyValue& entry);
  // Replies with the entry; when it is not set, with NotFound (timeout <= 0) or once it is set
  // (Timeout at the deadline).
  void get(const std::string& from, uint64_t id, const WaitRequest& request);
  // Adds to the integer at the key and replies with the sum (kv_add in protocol.h).
  void add(const std::string& from, uint64_t id, const KvAdd& request);
  // Replies with the keys of the request that are not set: at once when all are set or the
  // timeout is <= 0, otherwise as soon as all are set (none) or at the deadline (those missing).
  void wait(const std::string& from, uint64_t id, const KvWait& request);

  // Answers waiters past their deadline.
  void expire_waiters(std::chrono::steady_clock::time_point now);

 private:
  // A kv_wait still missing keys. Indexed by the keys it misses, so that setting a key looks
  // only at the waiters missing it (a group of N ranks each waiting for N keys stays O(N^2)).
  struct KeysWaiter {
    std::string routing_id;
    uint64_t request_id = 0;
    std::chrono::steady_clock::time_point deadline;
    std::vector<std::string> keys;
    std::size_t missing = 0;  // distinct keys not set yet
  };
  void store(const std::string& key, const std::string& value);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  HeadOutbox& outbox_;
  std::map<std::string, std::string> entries_;
  KeyedWaiters get_waiters_;                                // kv_get, by key
  std::map<uint64_t, KeysWaiter> keys_waiters_;             // kv_wait, by arrival
  std::map<std::string, std::vector<uint64_t>> missed_by_;  // key -> kv_waits missing it
  uint64_t next_waiter_ = 0;
};

}  // namespace ooze::actors
