// Keeps the rollout engines of an `ooze train --use-fault-tolerance` job alive. The actor runtime
// already starts a dead engine's process again in its bundle (the engines are spawned with
// --max-engine-restarts); what a new process lacks is the rest of the job: its HTTP server, the
// router's route to it, and the current weights. The supervisor supplies them.
//
//   probe thread   after --rollout-health-check-first-wait, every
//                  --rollout-health-check-interval: GET /health on every engine, in parallel.
//                  One that does not answer within --rollout-health-check-timeout is hung: it
//                  is killed (its in-flight requests then fail over to the others through the
//                  router's retry) and the runtime restarts it. A dead one is logged with the
//                  runtime's death reason. It never calls the trainers: their calls are
//                  collectives that only the loop thread makes.
//   recover(v)     on the loop thread, where no trainer collective runs (before each rollout,
//                  after a sync that threw WeightSyncError): probes every engine now; a new
//                  process is waited for, served, brought to version v by the trainers
//                  (TrainActor::update_engine_weights) and put in the router at its new URL;
//                  an engine a failed broadcast left behind is brought to v too.
//
//   EngineSupervisor supervisor(config, job);
//   for (...) {
//     supervisor.recover(version);   // every engine alive, serving, at `version`, routed
//     ... rollout, train ...
//     try { sync(++version); } catch (const weight_sync::WeightSyncError&) {
//       supervisor.recover(version); }
//   }
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/option_fields.h"
#include "launcher/rl_placement.h"

namespace ooze::launcher {

struct EngineSupervisorOptions {
  bool probing = false;  // run the probe thread (--use-fault-tolerance)
  std::chrono::milliseconds interval{30000};
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds first_wait{0};
  int max_restarts = 3;  // --max-engine-restarts, for messages (the runtime enforces it)
  // How long a restarted engine may take to load its model and start its server.
  std::chrono::milliseconds bring_up_timeout{std::chrono::minutes(10)};

  // --use-fault-tolerance, --rollout-health-check-interval / -timeout / -first-wait (seconds),
  // --max-engine-restarts ("fault tolerance" section); the bring-up timeout is not a flag.
  static const OptionFields<EngineSupervisorOptions>& fields();
};

class EngineSupervisor {
 public:
  // Watches `job`'s engines (their servers as job.router has them); `job` must outlive this.
  EngineSupervisor(const Config& config, RlProcesses& job);
  EngineSupervisor(EngineSupervisorOptions options, RlProcesses& job);
  ~EngineSupervisor();  // stops the probe thread
  EngineSupervisor(const EngineSupervisor&) = delete;
  EngineSupervisor& operator=(const EngineSupervisor&) = delete;

  // Brings every engine to alive, serving, at `version` and in the router (see the top of this
  // file); call it where no trainer collective runs. Returns how many engines were restarted.
  // Throws ooze::Error naming the engine (index, URL, pid) when it has used up
  // --max-engine-restarts or does not come back.
  int recover(int64_t version);

  // Restarts so far, per engine (the runtime's count).
  std::vector<int> restarts() const;
  // Each engine's server URL as the router has it now.
  std::vector<std::string> urls() const;
  // Hung engines the probe thread killed so far.
  int hung_kills() const;

 private:
  // What the supervisor knows of one engine: the process its server belongs to.
  struct Watched {
    std::string url;
    int32_t pid = 0;
    int32_t restarts = 0;         // the runtime's count when this process was served
    int32_t restarts_logged = 0;  // deaths already logged
    bool dead_logged = false;
    bool down = false;  // found dead or hung, not served again yet
    std::chrono::steady_clock::time_point down_since;
  };
  enum class Health { kServing, kReplaced, kHung, kDead };
  struct Probe {
    Health health = Health::kServing;
    std::string why;  // for kHung and kDead
  };

  // Probes engine `e` (actor state, then GET /health); waits up to the timeout for the runtime
  // to report a process whose server refuses connections.
  Probe probe(size_t e);
  std::vector<Probe> probe_all();
  // Kills a hung engine for the runtime to restart, unless its process changed meanwhile.
  void kill_hung(size_t e, const std::string& why);
  // Logs each restart of `e` the runtime made since the last one logged.
  void log_deaths(size_t e);
  // Notes when `e` was first found down (for the time its recovery took).
  void note_down(size_t e);
  // Waits for engine e's new process, starts its server; returns its URL.
  std::string serve_restarted(size_t e);
  std::string describe(size_t e) const;  // "engine E (URL, pid P)"
  [[noreturn]] void throw_dead(size_t e, const std::string& why) const;
  void probe_loop();

  EngineSupervisorOptions options_;
  RlProcesses& job_;
  std::vector<Watched> watched_;  // guarded by mutex_ (recover() and the probe thread)
  mutable std::mutex mutex_;
  std::atomic<int> hung_kills_{0};

  std::mutex stop_mutex_;
  std::condition_variable stop_wake_;
  bool stopping_ = false;
  std::thread probe_thread_;
};

}  // namespace ooze::launcher
