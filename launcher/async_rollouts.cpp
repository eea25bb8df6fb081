#include "launcher/async_rollouts.h"

#include "core/error.h"

namespace ooze::launcher {
namespace {

// Thrown by wait_for_version on the generation thread when the rollouts stop.
struct Stopped {};

}  // namespace

AsyncRollouts::AsyncRollouts(int64_t first_rollout, int64_t num_rollout, int64_t max_staleness,
                             Generate generate, Snapshot snapshot)
    : num_rollout_(num_rollout),
      max_staleness_(max_staleness),
      generate_(std::move(generate)),
      snapshot_(std::move(snapshot)),
      synced_version_(first_rollout),
      next_to_start_(first_rollout) {
  if (max_staleness < 1) {
    throw ConfigError("--max-staleness " + std::to_string(max_staleness) +
                      " must be at least 1: with --async a rollout is generated while the one "
                      "before it trains");
  }
  thread_ = std::thread([this] { generate_all(); });
}

AsyncRollouts::~AsyncRollouts() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void AsyncRollouts::generate_all() {
  try {
    while (true) {
      int64_t rollout_id;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // The staleness bound: rollout j waits for version j - max_staleness.
        changed_.wait(
            lock, [&] { return stopping_ || synced_version_ >= next_to_start_ - max_staleness_; });
        if (stopping_ || next_to_start_ >= num_rollout_) return;
        rollout_id = next_to_start_++;
        states_before_[rollout_id] = snapshot_();
      }
      GeneratedRollout ready = generate_(rollout_id);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(ready));
      }
      changed_.notify_all();
    }
  } catch (const Stopped&) {
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    changed_.notify_all();
  }
}

GeneratedRollout AsyncRollouts::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (ready_.empty()) std::rethrow_exception(error_);
  GeneratedRollout ready = std::move(ready_.front());
  ready_.pop_front();
  return ready;
}

void AsyncRollouts::weights_synced(int64_t version) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    synced_version_ = version;
  }
  changed_.notify_all();
}

void AsyncRollouts::wait_for_version(int64_t version) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return stopping_ || synced_version_ >= version; });
  if (stopping_) throw Stopped{};
}

nlohmann::json AsyncRollouts::state_before(int64_t rollout_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  states_before_.erase(states_before_.begin(), states_before_.lower_bound(rollout_id));
  auto found = states_before_.find(rollout_id);
  if (found != states_before_.end()) return found->second;
  return snapshot_();
}

}  // namespace ooze::launcher
