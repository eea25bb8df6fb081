// comm::Store over the head's key-value store, so that collective groups (Gloo, NCCL)
// rendezvous through the actor runtime, whichever nodes their ranks run on, instead of through
// a TcpStore that one rank hosts. Works wherever actors::kv_put does: in a driver after init(),
// and inside every actor's worker.
//
// Keys live as long as the head and are shared by everything in the cluster: give each group
// a prefix no other run uses (comm::PrefixStore), since a key left by an earlier group of the
// same name would look already set.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/store.h"

namespace ooze::actors {

class KvStore : public comm::Store {
 public:
  // Throws actors::RuntimeError when this process has no actor runtime.
  KvStore();

  // Timeouts throw comm::CommTimeoutError naming the keys not set; a head that does not answer
  // throws comm::CommError.
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  // The integer is kept as 8 little-endian bytes, as comm::TcpStore keeps it.
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  // connected_ranks(): the head does not know ranks, so {} (comm::Store's default).

 private:
  std::string name_;  // for messages: which head's store
};

}  // namespace ooze::actors
