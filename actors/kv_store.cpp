#include "actors/kv_store.h"

#include <algorithm>

#include "actors/errors.h"
#include "actors/runtime.h"
#include "comm/comm_error.h"

namespace ooze::actors {
namespace {

// The head clamps waits to a day; clamping here keeps the client's deadline finite too.
std::chrono::milliseconds bounded(std::chrono::milliseconds timeout) {
  return std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24));
}

comm::CommTimeoutError timed_out(const std::string& store, std::chrono::milliseconds timeout,
                                 const std::vector<std::string>& missing) {
  std::string keys;
  for (const std::string& key : missing) keys += (keys.empty() ? "'" : ", '") + key + "'";
  return comm::CommTimeoutError("timed out after " + std::to_string(timeout.count()) +
                                " ms waiting for store keys " + keys + " in " + store);
}

// The runtime's own failures (no head answering, the runtime shut down) come out as the
// comm::Store interface reports a broken store.
template <class F>
auto translating_runtime_errors(const std::string& store, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const RuntimeError& error) {
    throw comm::CommError(store + " failed: " + error.what());
  }
}

}  // namespace

KvStore::KvStore() {
  if (!is_initialized()) {
    throw RuntimeError(
        "KvStore needs the actor runtime: call ooze::actors::init() first (inside an actor it is "
        "always started)");
  }
  name_ = "the key-value store of the ooze head at " + head_endpoint();
}

void KvStore::set(const std::string& key, const std::string& value) {
  translating_runtime_errors(name_, [&] { kv_put(key, value); });
}

std::string KvStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  // With no time to wait the head answers NotFound; a store times out instead.
  if (timeout.count() <= 0 && !check({key})) throw timed_out(name_, timeout, {key});
  try {
    return translating_runtime_errors(name_, [&] {
      return kv_get(key, std::max(bounded(timeout), std::chrono::milliseconds(1)));
    });
  } catch (const GetTimeoutError&) {
    throw timed_out(name_, timeout, {key});
  }
}

int64_t KvStore::add(const std::string& key, int64_t delta) {
  return translating_runtime_errors(name_, [&] { return kv_add(key, delta); });
}

bool KvStore::check(const std::vector<std::string>& keys) {
  return translating_runtime_errors(
      name_, [&] { return kv_wait(keys, std::chrono::milliseconds(0)).empty(); });
}

void KvStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> missing =
      translating_runtime_errors(name_, [&] { return kv_wait(keys, bounded(timeout)); });
  if (!missing.empty()) throw timed_out(name_, timeout, missing);
}

}  // namespace ooze::actors
