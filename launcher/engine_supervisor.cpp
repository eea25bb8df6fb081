#include "launcher/engine_supervisor.h"

#include <future>
#include <sstream>

#include "actors/errors.h"
#include "actors/runtime.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/timer.h"
#include "serving/http_client.h"
#include "trainer/weight_syncer.h"

namespace ooze::launcher {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds milliseconds_of(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

std::string seconds_text(std::chrono::milliseconds duration) {
  std::ostringstream text;
  text << static_cast<double>(duration.count()) / 1000.0 << " s";
  return text.str();
}

}  // namespace

const OptionFields<EngineSupervisorOptions>& EngineSupervisorOptions::fields() {
  using O = EngineSupervisorOptions;
  // A duration member behind a flag in seconds.
  const auto seconds = [](std::chrono::milliseconds O::*member) {
    return std::make_pair(
        [member](const O& o) { return nlohmann::json((o.*member).count() / 1000.0); },
        [member](const nlohmann::json& value, O& o) {
          o.*member = milliseconds_of(value.get<double>());
        });
  };
  static const OptionFields<O> fields = [&] {
    OptionFields<O> f;
    f.section("fault tolerance");
    f.add("use_fault_tolerance", &O::probing,
          "Probe the engines' health; kill, restart and re-sync an engine that is dead or hung, "
          "re-issuing its unfinished requests on the others.");
    const auto interval = seconds(&O::interval);
    f.add_custom("rollout_health_check_interval", FieldType::kDouble, interval.first,
                 interval.second, "Seconds between two probes of every engine.")
        .greater_than(0);
    const auto timeout = seconds(&O::timeout);
    f.add_custom("rollout_health_check_timeout", FieldType::kDouble, timeout.first, timeout.second,
                 "Seconds an engine has to answer a probe before it is deemed hung.")
        .greater_than(0);
    const auto first_wait = seconds(&O::first_wait);
    f.add_custom("rollout_health_check_first_wait", FieldType::kDouble, first_wait.first,
                 first_wait.second, "Seconds after start-up before the first probe.")
        .min(0);
    f.add("max_engine_restarts", &O::max_restarts, "Restarts of each engine before the job fails.")
        .min(0);
    return f;
  }();
  return fields;
}

EngineSupervisor::EngineSupervisor(const Config& config, RlProcesses& job)
    : EngineSupervisor(EngineSupervisorOptions::fields().read(config), job) {}

EngineSupervisor::EngineSupervisor(EngineSupervisorOptions options, RlProcesses& job)
    : options_(options), job_(job) {
  if (!job_.engines.empty() && !job_.router) {
    throw Error(
        "EngineSupervisor: the job's engines have no router (start_rl_processes makes one)");
  }
  const std::vector<serving::EngineStatus> routed =
      job_.router ? job_.router->engines() : std::vector<serving::EngineStatus>();
  for (size_t e = 0; e < job_.engines.size(); ++e) {
    const actors::ActorInfo info = job_.engines[e].info();
    Watched watched;
    watched.url = routed.at(e).url;
    watched.pid = info.pid;
    watched.restarts = info.restarts;
    watched.restarts_logged = info.restarts;
    watched_.push_back(watched);
  }
  if (options_.probing && !job_.engines.empty()) {
    probe_thread_ = std::thread([this] { probe_loop(); });
  }
}

EngineSupervisor::~EngineSupervisor() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_wake_.notify_all();
  if (probe_thread_.joinable()) probe_thread_.join();
}

std::vector<int> EngineSupervisor::restarts() const {
  std::vector<int> counts;
  for (const auto& engine : job_.engines) counts.push_back(engine.info().restarts);
  return counts;
}

std::vector<std::string> EngineSupervisor::urls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> urls;
  for (const Watched& watched : watched_) urls.push_back(watched.url);
  return urls;
}

int EngineSupervisor::hung_kills() const { return hung_kills_; }

std::string EngineSupervisor::describe(size_t e) const {
  return "engine " + std::to_string(e) + " (" + watched_[e].url + ", pid " +
         std::to_string(watched_[e].pid) + ")";
}

void EngineSupervisor::throw_dead(size_t e, const std::string& why) const {
  const actors::ActorInfo info = job_.engines[e].info();
  throw Error(describe(e) + " is dead and will not be restarted: " + why + " (restarted " +
              std::to_string(info.restarts) + " times; --max-engine-restarts " +
              std::to_string(options_.max_restarts) +
              "). Its log is in the session's logs/ directory; raise --max-engine-restarts or "
              "find why it keeps dying");
}

EngineSupervisor::Probe EngineSupervisor::probe(size_t e) {
  const auto& engine = job_.engines[e];
  const Watched& watched = watched_[e];
  auto look = [&](Probe& found) {
    const actors::ActorInfo info = engine.info();
    if (info.state == actors::ActorState::kDead) {
      found = {Health::kDead, info.death_reason};
      return true;
    }
    if (info.state != actors::ActorState::kAlive || info.pid != watched.pid ||
        info.restarts != watched.restarts) {
      found = {Health::kReplaced, info.death_reason};
      return true;
    }
    return false;
  };
  Probe found;
  if (look(found)) return found;
  serving::HttpClientOptions client_options;
  client_options.connect_timeout = options_.timeout;
  serving::HttpRequest request;
  request.target = "/health";
  request.timeout = options_.timeout;
  try {
    serving::HttpClient(watched.url, client_options).send(request);
    return {};  // any answer: the engine's server threads run
  } catch (const serving::HttpTimeoutError&) {
    return {Health::kHung, "no answer to GET /health in " + seconds_text(options_.timeout) +
                               " (--rollout-health-check-timeout)"};
  } catch (const serving::HttpError& error) {
    // Refused: the process is gone and the runtime reports it in a moment.
    const Clock::time_point deadline = Clock::now() + options_.timeout;
    while (Clock::now() < deadline) {
      if (look(found)) return found;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {Health::kHung, std::string("its server fails (") + error.what() +
                               ") while the runtime reports its process alive"};
  }
}

std::vector<EngineSupervisor::Probe> EngineSupervisor::probe_all() {
  // In parallel: a hung engine costs the round one timeout, not one per engine.
  std::vector<std::future<Probe>> pending;
  for (size_t e = 0; e < watched_.size(); ++e) {
    pending.push_back(std::async(std::launch::async, [this, e] { return probe(e); }));
  }
  std::vector<Probe> probes;
  for (auto& future : pending) probes.push_back(future.get());
  return probes;
}

void EngineSupervisor::kill_hung(size_t e, const std::string& why) {
  Watched& watched = watched_[e];
  const actors::ActorInfo info = job_.engines[e].info();
  if (info.state != actors::ActorState::kAlive || info.pid != watched.pid) return;  // gone
  OOZE_LOG(WARN) << describe(e) << " is hung: " << why << "; killing it for a restart (restart "
                 << info.restarts + 1 << " of " << options_.max_restarts
                 << ", --max-engine-restarts); its requests go to the other engines";
  actors::kill(job_.engines[e], /*allow_restart=*/true);
  watched.restarts_logged = info.restarts + 1;  // this death is logged here
  ++hung_kills_;
}

void EngineSupervisor::note_down(size_t e) {
  Watched& watched = watched_[e];
  if (!watched.down) watched.down_since = Clock::now();
  watched.down = true;
}

void EngineSupervisor::log_deaths(size_t e) {
  Watched& watched = watched_[e];
  const actors::ActorInfo info = job_.engines[e].info();
  if (info.restarts <= watched.restarts_logged) return;
  OOZE_LOG(WARN) << describe(e) << " died: " << info.death_reason
                 << "; the runtime restarts it (restart " << info.restarts << " of "
                 << options_.max_restarts << ", --max-engine-restarts)";
  watched.restarts_logged = info.restarts;
}

std::string EngineSupervisor::serve_restarted(size_t e) {
  const auto& engine = job_.engines[e];
  Watched& watched = watched_[e];
  const Clock::time_point deadline = Clock::now() + options_.bring_up_timeout;
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  // A process just killed may still show as the old one for a moment.
  actors::ActorInfo info = engine.info();
  while (info.state == actors::ActorState::kAlive && info.pid == watched.pid &&
         info.restarts == watched.restarts) {
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    info = engine.info();
  }
  try {
    engine.wait_ready(remaining());
    // The first call waits for the constructor: the model loaded from --hf-checkpoint.
    const std::string url =
        engine.call(&serving::RolloutEngine::start_server, std::string(), 0, std::string())
            .get(remaining());
    info = engine.info();
    watched.url = url;
    watched.pid = info.pid;
    watched.restarts = info.restarts;
    watched.restarts_logged = std::max(watched.restarts_logged, info.restarts);
    watched.down = false;
    return url;
  } catch (const actors::ActorDiedError& error) {
    info = engine.info();
    if (info.state == actors::ActorState::kDead) throw_dead(e, info.death_reason);
    return "";  // died again while starting: the runtime restarts it once more
  } catch (const actors::GetTimeoutError&) {
    throw Error(describe(e) + " did not come back within " +
                seconds_text(options_.bring_up_timeout) + " of its restart (state " +
                actors::actor_state_name(engine.info().state) +
                "): its log is in the session's logs/ directory");
  }
}

int EngineSupervisor::recover(int64_t version) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point start = Clock::now();
  int restarted = 0;
  std::vector<bool> reroute(watched_.size(), false);  // served at a new URL
  // Each round handles what the probe found; an engine that dies again meanwhile takes another
  // round, until the runtime's restart limit makes it dead.
  const int rounds = options_.max_restarts + 2;
  for (int round = 0; round < rounds; ++round) {
    const std::vector<Probe> probes = probe_all();
    bool settled = true;
    for (size_t e = 0; e < watched_.size(); ++e) {
      log_deaths(e);
      if (probes[e].health != Health::kServing) note_down(e);
      switch (probes[e].health) {
        case Health::kServing:
          break;
        case Health::kDead:
          throw_dead(e, probes[e].why);
        case Health::kHung:
          kill_hung(e, probes[e].why);
          [[fallthrough]];
        case Health::kReplaced: {
          const std::string old_url = watched_[e].url;
          const std::string url = serve_restarted(e);
          if (url.empty()) {
            settled = false;
            continue;
          }
          ++restarted;
          reroute[e] = true;
          OOZE_LOG(WARN) << "engine " << e << " (was " << old_url << ") is back after restart "
                         << watched_[e].restarts << " of " << options_.max_restarts << ": pid "
                         << watched_[e].pid << ", serving at " << url;
          break;
        }
      }
    }
    if (!settled) continue;

    // Weights: the trainers bring every engine that is not at `version` to it, one at a time.
    bool synced = true;
    for (size_t e = 0; e < watched_.size() && synced; ++e) {
      // Serving at the probe, an engine may have died or frozen since: the next round's probe
      // finds out which.
      auto probe_again = [&](const std::exception& error) {
        OOZE_LOG(WARN) << describe(e) << " did not report its weight version (" << error.what()
                       << "); probing the engines again";
        synced = false;
      };
      engine::EngineStats stats;
      try {
        stats = job_.engines[e].call(&serving::RolloutEngine::stats).get(options_.timeout);
      } catch (const actors::ActorDiedError& error) {
        probe_again(error);
        continue;
      } catch (const actors::GetTimeoutError& error) {
        probe_again(error);
        continue;
      }
      // A new process has the initial weights, version 0: behind unless the job is at 0 too.
      if (stats.weight_version == version && !stats.weights_incomplete) continue;
      if (stats.weight_version > version) {
        throw Error(describe(e) + " is at weight version " + std::to_string(stats.weight_version) +
                    ", newer than the " + std::to_string(version) +
                    " it was to be brought to: recover() takes the trainer's current version");
      }
      if (job_.trainers.size() == 0) {
        throw Error(describe(e) + " is at weight version " + std::to_string(stats.weight_version) +
                    " and there is no trainer to bring it to " + std::to_string(version));
      }
      if (stats.weight_version == version) {
        throw Error(describe(e) + " holds incomplete weights of version " +
                    std::to_string(version) +
                    " (an interrupted sync) and a sync must be newer than its version: recover "
                    "with the version of the sync that failed");
      }
      try {
        actors::get_all(job_.trainers.call_all(&trainer::TrainActor::update_engine_weights,
                                               static_cast<int64_t>(e), version));
      } catch (const actors::RemoteError& error) {
        if (!trainer::is_weight_sync_error(error)) throw;
        OOZE_LOG(WARN) << "bringing " << describe(e) << " to weight version " << version
                       << " failed: " << error.what() << "; probing the engines again";
        synced = false;
      }
    }
    if (!synced) continue;

    for (size_t e = 0; e < watched_.size(); ++e) {
      if (!reroute[e]) continue;
      job_.router->replace_engine(e, watched_[e].url);
      reroute[e] = false;
      OOZE_LOG(WARN) << describe(e) << " is back in the router at weight version " << version
                     << ", " << seconds_since(watched_[e].down_since)
                     << " s after it was found down";
    }
    job_.router->check_health();  // engines a failure took out come back now, not next interval
    std::string out_of_rotation;
    for (const serving::EngineStatus& status : job_.router->engines()) {
      if (!status.alive) out_of_rotation += " " + status.url + " (" + status.last_error + ")";
    }
    if (!out_of_rotation.empty()) {
      OOZE_LOG(WARN) << "after recovery the router still has engines out of the rotation:"
                     << out_of_rotation << "; probing again";
      continue;
    }
    if (restarted > 0) {
      OOZE_LOG(WARN) << "recovered " << restarted << " engine restart(s) at weight version "
                     << version << " in " << seconds_since(start) << " s";
    }
    return restarted;
  }
  throw Error("the rollout engines did not settle in " + std::to_string(rounds) +
              " rounds of recovery: they keep dying or leaving the router's rotation (see the "
              "warnings above)");
}

void EngineSupervisor::probe_loop() {
  std::unique_lock<std::mutex> stop_lock(stop_mutex_);
  auto wait = [&](std::chrono::milliseconds duration) {
    return stop_wake_.wait_for(stop_lock, duration, [this] { return stopping_; });
  };
  if (wait(options_.first_wait)) return;
  while (true) {
    stop_lock.unlock();
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      const std::vector<Probe> probes = probe_all();
      for (size_t e = 0; e < watched_.size(); ++e) {
        log_deaths(e);
        if (probes[e].health == Health::kHung) kill_hung(e, probes[e].why);
        if (probes[e].health != Health::kServing) note_down(e);
        if (probes[e].health == Health::kDead && !watched_[e].dead_logged) {
          OOZE_LOG(WARN) << describe(e) << " is dead and will not be restarted: " << probes[e].why;
          watched_[e].dead_logged = true;
        }
      }
    } catch (const std::exception& error) {
      // The runtime going down under the job, say: the loop thread hears of it itself.
      OOZE_LOG(WARN) << "engine health probe failed: " << error.what();
    }
    stop_lock.lock();
    if (wait(options_.interval)) return;
  }
}

}  // namespace ooze::launcher
