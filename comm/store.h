// A small key-value store for rendezvous: groups exchange addresses and NCCL unique ids
// through it. TcpStore (tcp_store.h) is the standalone implementation; the actor runtime's
// head provides the same interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ooze {
namespace comm {

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits up to `timeout` for `key` to be set; throws CommTimeoutError naming the key.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (0 if unset); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Non-blocking: whether every key is set.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits up to `timeout` for every key; throws CommTimeoutError listing the missing keys.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Ranks of the processes currently connected to the store (empty if the store cannot tell).
  // Used to say which peers are gone when a collective fails.
  virtual std::vector<int> connected_ranks() { return {}; }
};

// Namespaces every key of `base` under "prefix/", so groups do not collide.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {}

  void set(const std::string& key, const std::string& value) override {
    base_->set(prefix_ + key, value);
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return base_->add(prefix_ + key, delta);
  }
  bool check(const std::vector<std::string>& keys) override { return base_->check(prefixed(keys)); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    base_->wait(prefixed(keys), timeout);
  }
  std::vector<int> connected_ranks() override { return base_->connected_ranks(); }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& key : keys) out.push_back(prefix_ + key);
    return out;
  }

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace comm
}  // namespace ooze
