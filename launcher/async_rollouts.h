// The rollouts of `ooze train --async` (Slime's train_async): a thread of their own generates
// rollout after rollout while the trainer trains on the earlier ones, with a bound on how far the
// generation may run ahead of the policy.
//
// Versions: the weights the engines hold after the trainer has trained on rollout k are version
// k + 1 (the run starts at version first_rollout). Rollout j starts generating only once the
// engines hold version j - max_staleness, and weight syncs reach the engines mid-generation (the
// requests in flight continue with the new weights, each token recording the version that
// sampled it). So every token of rollout j comes from version j - max_staleness or newer, while
// the policy that trains on rollout j is version j: no trained sample is more than max_staleness
// versions behind. With max_staleness 1 rollout k + 1 is generated while rollout k trains.
//
//   AsyncRollouts rollouts(first, num_rollout, max_staleness, generate, snapshot);
//   for (int64_t k = first; k < num_rollout; ++k) {
//     GeneratedRollout ready = rollouts.next();      // waits for rollout k
//     ... train on ready.result ...; sync the weights as version k + 1
//     rollouts.weights_synced(k + 1);
//     save(rollouts.state_before(k + 1));            // where a resumed run starts generating
//   }
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "launcher/run_log.h"
#include "rollout/rollout_manager.h"

namespace ooze::launcher {

// One rollout as the generation hands it to training.
struct GeneratedRollout {
  rollout::RolloutResult result;
  MetricLine eval;     // the evaluation made before the rollout (empty: none was due)
  double seconds = 0;  // generating it
};

class AsyncRollouts {
 public:
  // Generates rollout `rollout_id` (and evaluates before it when due); called on the generation
  // thread, one rollout at a time. May call wait_for_version (an evaluation of the policy of
  // rollout j waits for version j).
  using Generate = std::function<GeneratedRollout(int64_t rollout_id)>;
  // The state a resumed run generates rollout j from (the prompt position, the partial-rollout
  // buffer): taken on the generation thread just before rollout j starts.
  using Snapshot = std::function<nlohmann::json()>;

  // Starts the generation thread at `first_rollout`, with the engines at that version.
  AsyncRollouts(int64_t first_rollout, int64_t num_rollout, int64_t max_staleness,
                Generate generate, Snapshot snapshot);
  // Stops the thread once the rollout it is generating ends (no new one starts).
  ~AsyncRollouts();
  AsyncRollouts(const AsyncRollouts&) = delete;
  AsyncRollouts& operator=(const AsyncRollouts&) = delete;

  // The next rollout in order, waiting for it; rethrows the generation's error.
  GeneratedRollout next();
  // The engines now hold `version`: later rollouts may start.
  void weights_synced(int64_t version);
  // Blocks until the engines hold `version`; on the generation thread, throws (ending the
  // rollout it is generating) when the rollouts stop.
  void wait_for_version(int64_t version);
  // The snapshot taken before rollout `rollout_id` started; when it has not started yet, one
  // taken now (it cannot start meanwhile).
  nlohmann::json state_before(int64_t rollout_id);

 private:
  void generate_all();

  const int64_t num_rollout_;
  const int64_t max_staleness_;
  Generate generate_;
  Snapshot snapshot_;

  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t synced_version_;
  int64_t next_to_start_;               // the rollout the thread starts next
  std::deque<GeneratedRollout> ready_;  // generated, not yet taken, in order
  std::map<int64_t, nlohmann::json> states_before_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ooze::launcher
