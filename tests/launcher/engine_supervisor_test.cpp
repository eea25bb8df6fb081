// EngineSupervisor on a real tiny job: trainer ranks and rollout engines in worker processes
// (this program, re-executed), started by start_rl_processes from `ooze train` flags, real
// HTTP servers and the router in front of them. Engines are killed with SIGKILL and stopped with
// SIGSTOP as a crash or a hang would leave them; the supervisor must restart them, serve them
// at new URLs and give them the trainer's weights (compared checksum by checksum with the
// engines that never died, and with --check-weight-sync against the trainer's own).
#include "launcher/engine_supervisor.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "actors/errors.h"
#include "actors/runtime.h"
#include "launcher/train_plan.h"
#include "serving/http_client.h"
#include "tests/support/expect_error.h"
#include "tests/support/tiny_model.h"
#include "trainer/train_step.h"
#include "trainer/trainer_group.h"

namespace ooze::launcher {
namespace engine_supervisor_test {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using Checksums = std::vector<std::pair<std::string, uint32_t>>;

constexpr double kInterval = 0.5;  // --rollout-health-check-interval
constexpr double kTimeout = 2.0;   // --rollout-health-check-timeout
constexpr int kMaxRestarts = 2;

template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// One tiny `ooze train` job: two engines, the trainer's ranks, and its supervisor.
class EngineSupervisorJob : public ::testing::Test {
 protected:
  static void start(const std::vector<std::string>& placement_flags) {
    std::vector<std::string> flags = {"--hf-checkpoint",
                                      ::ooze::testing::tiny_model_dir(),
                                      "--rollout-batch-size",
                                      "2",
                                      "--n-samples-per-prompt",
                                      "2",
                                      "--num-rollout",
                                      "1",
                                      "--global-batch-size",
                                      "4",
                                      "--lr",
                                      "1e-2",
                                      "--loss-type",
                                      "sft_loss",
                                      "--rollout-num-gpus",
                                      "2",
                                      "--engine-threads",
                                      "1",
                                      "--check-weight-sync",
                                      "--weight-sync-timeout",
                                      "30",
                                      "--use-fault-tolerance",
                                      "--rollout-health-check-interval",
                                      std::to_string(kInterval),
                                      "--rollout-health-check-timeout",
                                      std::to_string(kTimeout),
                                      "--max-engine-restarts",
                                      std::to_string(kMaxRestarts)};
    flags.insert(flags.end(), placement_flags.begin(), placement_flags.end());
    config_ = new Config(load_config(train_schema(), "", flags));
    const TrainPlan plan = TrainPlan::resolve(*config_, /*num_prompts=*/8);
    job_ = new RlProcesses(start_rl_processes(*config_, plan, policy_init(*config_, plan)));
    supervisor_ = new EngineSupervisor(*config_, *job_);
  }
  static void TearDownTestSuite() {
    delete supervisor_;
    delete job_;
    delete config_;
    supervisor_ = nullptr;
    job_ = nullptr;
    config_ = nullptr;
    actors::shutdown();
  }

  static const actors::ActorHandle<serving::RolloutEngine>& engine(size_t e) {
    return job_->engines.at(e);
  }
  static int pid_of(size_t e) { return engine(e).info().pid; }
  static engine::EngineStats stats(size_t e) {
    return engine(e).call(&serving::RolloutEngine::stats).get(60s);
  }
  static Checksums checksums(size_t e) {
    return engine(e).call(&serving::RolloutEngine::weight_checksums).get(60s);
  }

  // One SFT step on fixed sequences, so the trainer's weights leave the initial ones; then the
  // sync to `version` everywhere.
  static void train_and_sync(int64_t version) {
    trainer::TrainBatch batch;
    for (int s = 0; s < 4; ++s) {
      std::vector<int64_t> tokens;
      for (int t = 0; t < 10; ++t) tokens.push_back((version * 31 + s * 7 + t * 3) % 200 + 10);
      batch.samples.push_back(trainer::language_modeling_sample(tokens));
    }
    trainer::train_step(job_->trainers, batch, fsdp::PackingOptions{});
    actors::get_all(job_->trainers.call_all(&trainer::TrainActor::update_weights, version,
                                            /*abort_in_flight=*/true));
  }

  static json greedy(const std::string& text, int64_t tokens) {
    return {{"text", text},
            {"sampling_params",
             {{"max_new_tokens", tokens}, {"temperature", 0.0}, {"ignore_eos", true}}}};
  }
  // POST /generate straight to a server.
  static json generate_at(const std::string& url, const json& body) {
    serving::HttpRequest request;
    request.method = "POST";
    request.target = "/generate";
    request.body = body.dump();
    request.timeout = 60s;
    const serving::HttpResponse response = serving::HttpClient(url).send(request);
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body);
  }

  // Every engine alive in the router at `version`, with the same weights.
  static void expect_all_at(int64_t version) {
    const Checksums reference = checksums(0);
    for (size_t e = 0; e < job_->engines.size(); ++e) {
      const engine::EngineStats s = stats(e);
      EXPECT_EQ(s.weight_version, version) << "engine " << e;
      EXPECT_FALSE(s.weights_incomplete) << "engine " << e;
      EXPECT_EQ(checksums(e), reference) << "engine " << e << " differs from engine 0";
      EXPECT_TRUE(job_->router->engines()[e].alive) << job_->router->engines()[e].last_error;
      EXPECT_EQ(job_->router->engines()[e].url, supervisor_->urls()[e]);
    }
  }

  static inline Config* config_ = nullptr;
  static inline RlProcesses* job_ = nullptr;
  static inline EngineSupervisor* supervisor_ = nullptr;
};

// Colocated: two ranks, each serving its engine through shared memory.
class ColocatedEngineSupervisorTest : public EngineSupervisorJob {
 protected:
  static void SetUpTestSuite() {
    start({"--actor-num-gpus-per-node", "2", "--colocate"});
    initial_ = new Checksums(checksums(0));
    train_and_sync(1);
  }
  static void TearDownTestSuite() {
    delete initial_;
    EngineSupervisorJob::TearDownTestSuite();
  }
  static inline Checksums* initial_ = nullptr;
};

TEST_F(ColocatedEngineSupervisorTest, AKilledEngineFailsOverThenComesBackAtTheTrainersWeights) {
  ASSERT_NE(checksums(0), *initial_) << "the step must change the weights for this to mean much";
  const std::string old_url = supervisor_->urls()[1];
  const int old_pid = pid_of(1);
  const int restarts_before = supervisor_->restarts()[1];

  // Long greedy requests on both engines; engine 1 dies with some of them in flight.
  serving::RouteOptions retry;
  retry.retry = true;
  std::vector<std::future<json>> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(
        job_->router->generate_async(greedy("request " + std::to_string(i), 160), retry));
  }
  ASSERT_TRUE(eventually([&] { return job_->router->engines()[1].outstanding > 0; }, 10s));
  ASSERT_EQ(::kill(old_pid, SIGKILL), 0);
  for (auto& request : requests) {
    const json answer = request.get();  // none is lost: those on engine 1 run again on engine 0
    EXPECT_EQ(answer["meta_info"]["completion_tokens"], 160) << answer.dump();
    EXPECT_EQ(answer["meta_info"]["weight_version"], 1) << answer.dump();
  }
  EXPECT_GT(job_->router->engines()[1].failed, 0) << "engine 1 had requests when it died";

  const Clock::time_point start = Clock::now();
  EXPECT_EQ(supervisor_->recover(1), 1);
  std::cout << "recovered in " << std::chrono::duration<double>(Clock::now() - start).count()
            << " s\n";
  EXPECT_EQ(supervisor_->restarts()[1], restarts_before + 1);
  EXPECT_NE(supervisor_->urls()[1], old_url);
  EXPECT_NE(pid_of(1), old_pid);
  expect_all_at(1);
  EXPECT_NE(checksums(1), *initial_);

  // The restarted engine answers as the survivor does, and the router sends it work again.
  const json probe = greedy("the same prompt", 24);
  const json survivor = generate_at(supervisor_->urls()[0], probe);
  const json restarted = generate_at(supervisor_->urls()[1], probe);
  EXPECT_EQ(restarted["output_ids"], survivor["output_ids"]);
  EXPECT_EQ(restarted["meta_info"]["weight_version"], 1);
  const int64_t routed_before = job_->router->engines()[1].routed;
  for (int i = 0; i < 6; ++i) job_->router->generate(greedy("after " + std::to_string(i), 2));
  EXPECT_GT(job_->router->engines()[1].routed, routed_before);

  // Nothing left to do: a second recover restarts nothing.
  EXPECT_EQ(supervisor_->recover(1), 0);
}

TEST_F(ColocatedEngineSupervisorTest, AHungEngineIsKilledByTheProbeThreadAndRestarted) {
  const int old_pid = pid_of(0);
  const int restarts_before = supervisor_->restarts()[0];
  const int kills_before = supervisor_->hung_kills();
  ASSERT_EQ(::kill(old_pid, SIGSTOP), 0);
  const Clock::time_point stopped = Clock::now();
  // A round starts within one interval and gives the engine one timeout to answer.
  const auto bound = std::chrono::milliseconds(static_cast<int64_t>((kInterval + kTimeout) * 1000));
  ASSERT_TRUE(eventually([&] { return supervisor_->hung_kills() > kills_before; }, bound + 3s))
      << "the probe thread did not notice the stopped engine";
  const double detected = std::chrono::duration<double>(Clock::now() - stopped).count();
  std::cout << "hung engine killed " << detected << " s after SIGSTOP\n";
  EXPECT_GE(detected, kTimeout - 0.1) << "it was given its timeout to answer";
  EXPECT_TRUE(eventually([&] { return supervisor_->restarts()[0] == restarts_before + 1; }, 10s));

  EXPECT_EQ(supervisor_->recover(1), 1);
  EXPECT_NE(pid_of(0), old_pid);
  expect_all_at(1);
}

TEST_F(ColocatedEngineSupervisorTest, AnEngineOutOfRestartsIsNamedInTheError) {
  // Train once more so the restarts below take a real sync.
  train_and_sync(2);
  while (supervisor_->restarts()[1] < kMaxRestarts) {
    ASSERT_EQ(::kill(pid_of(1), SIGKILL), 0);
    ASSERT_EQ(supervisor_->recover(2), 1);
  }
  expect_all_at(2);
  const int last_pid = pid_of(1);
  const std::string last_url = supervisor_->urls()[1];
  ASSERT_EQ(::kill(last_pid, SIGKILL), 0);
  const std::string message =
      ::ooze::testing::error_message_of<Error>([&] { supervisor_->recover(2); });
  EXPECT_CONTAINS(message, "engine 1 (" + last_url + ", pid " + std::to_string(last_pid) + ")");
  EXPECT_CONTAINS(message, "--max-engine-restarts " + std::to_string(kMaxRestarts));
  EXPECT_CONTAINS(message, "will not be restarted");
}

// Disaggregated: trainer rank 0 broadcasts to both engines.
class DisaggregatedEngineSupervisorTest : public EngineSupervisorJob {
 protected:
  static void SetUpTestSuite() { start({}); }
};

TEST_F(DisaggregatedEngineSupervisorTest, ASyncInterruptedByAKilledEngineIsCompletedByRecover) {
  trainer::TrainBatch batch;
  for (int s = 0; s < 4; ++s) {
    batch.samples.push_back(trainer::language_modeling_sample({5, 6, 7, 8, 9, 10, 11, int64_t(s)}));
  }
  trainer::train_step(job_->trainers, batch, fsdp::PackingOptions{});
  // Engine 1 stops answering; the sync begins on engine 0 and waits for engine 1, which then
  // dies: engine 0 is left with a sync it cannot finish.
  const int pid = pid_of(1);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  auto sync = job_->trainers.call_all(&trainer::TrainActor::update_weights, int64_t{1}, true);
  ASSERT_TRUE(eventually([&] { return stats(0).syncing_weights; }, 20s));
  // (Stopped for the node's stopped_worker_timeout, 5 s, it would be killed by its node anyway.)
  ::kill(pid, SIGKILL);
  try {
    actors::get_all(std::move(sync));
    ADD_FAILURE() << "expected the sync to fail";
  } catch (const actors::RemoteError& error) {
    EXPECT_NE(error.type().find("WeightSyncError"), std::string::npos) << error.what();
    EXPECT_CONTAINS(error.what(), "engine 1");
  }
  EXPECT_EQ(stats(0).weight_version, 0);
  EXPECT_TRUE(stats(0).weights_incomplete) << "the survivor refuses to generate until a full sync";

  EXPECT_EQ(supervisor_->recover(1), 1);
  expect_all_at(1);
  const json probe = greedy("after the failed sync", 16);
  EXPECT_EQ(generate_at(supervisor_->urls()[1], probe)["output_ids"],
            generate_at(supervisor_->urls()[0], probe)["output_ids"]);
  EXPECT_EQ(job_->router->generate(probe)["meta_info"]["weight_version"], 1);
}

TEST_F(DisaggregatedEngineSupervisorTest, ASyncToAStoppedEngineFailsInSecondsNotItsTimeout) {
  // Engine 1 stops (SIGSTOP) and stays stopped: its sockets stay open, so the sync ends when the
  // supervisor's health probe (2.5 s here) or the node's stopped_worker_timeout (5 s; without
  // --use-fault-tolerance the only one) kills it, not at --weight-sync-timeout (30 s).
  const int64_t version = stats(0).weight_version + 1;
  const int pid = pid_of(1);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  const Clock::time_point stopped = Clock::now();
  auto sync = job_->trainers.call_all(&trainer::TrainActor::update_weights, version, true);
  try {
    actors::get_all(std::move(sync));
    ADD_FAILURE() << "expected the sync to fail";
  } catch (const actors::RemoteError& error) {
    EXPECT_CONTAINS(error.what(), "engine 1");
  }
  const double failed_after = std::chrono::duration<double>(Clock::now() - stopped).count();
  std::cout << "sync to a stopped engine failed " << failed_after << " s after SIGSTOP\n";
  EXPECT_LT(failed_after, 15.0) << "the sync waited for its timeout";
  EXPECT_EQ(supervisor_->recover(version), 1);
  expect_all_at(version);
}

}  // namespace engine_supervisor_test
}  // namespace ooze::launcher
