// How long `ooze train --use-fault-tolerance` is short of an engine after a crash: from the
// SIGKILL of an engine's process to the first sample the restarted engine generates, through
// EngineSupervisor::recover (the runtime's restart, the model loaded again, its server, the
// trainer's weights, the router). The baseline, measured in the same run, is the cold start of
// an engine the way a job starts one: spawned, model loaded, server started, first sample.
// A recovery costs what a cold start costs plus the weight sync; a ratio far above 1 means the
// supervisor adds waiting of its own.
//
// Both placements: colocated (2 ranks serving their engines through shared memory) and
// disaggregated (1 rank broadcasting to 2 engines, a new group per recovery). Each restart is
// measured three times; the median is reported.
#include <ATen/Parallel.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "bench/bench_support.h"
#include "core/load_time_settings.h"
#include "launcher/engine_supervisor.h"
#include "launcher/rl_placement.h"
#include "launcher/train_plan.h"
#include "models/model_init.h"
#include "serving/http_client.h"
#include "serving/rollout_engine_actor.h"
#include "trainer/train_step.h"
#include "trainer/trainer_group.h"

namespace ooze::launcher {
namespace {

using bench::print_line;
using bench::seconds_since;
using Clock = std::chrono::steady_clock;

constexpr int kRepeats = 3;
constexpr const char* kBench = "engine_recovery";

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::string one_sample_body() {
  return nlohmann::json{{"text", "1 + 1 ="},
                        {"sampling_params", {{"max_new_tokens", 8}, {"temperature", 0.0}}}}
      .dump();
}

// The first sample from the server at `url`: throws unless it answers 200.
void first_sample(const std::string& url) {
  serving::HttpRequest request;
  request.method = "POST";
  request.target = "/generate";
  request.body = one_sample_body();
  request.timeout = std::chrono::minutes(2);
  const serving::HttpResponse response = serving::HttpClient(url).send(request);
  if (response.status != 200) {
    throw Error("engine " + url + " answered " + std::to_string(response.status) + ": " +
                response.body);
  }
}

std::vector<std::string> job_flags(const std::string& model, bool colocate) {
  std::vector<std::string> flags = {"--hf-checkpoint",
                                    model,
                                    "--rollout-batch-size",
                                    "2",
                                    "--n-samples-per-prompt",
                                    "2",
                                    "--num-rollout",
                                    "1",
                                    "--global-batch-size",
                                    "4",
                                    "--loss-type",
                                    "sft_loss",
                                    "--rollout-num-gpus",
                                    "2",
                                    "--engine-threads",
                                    "1",
                                    "--use-fault-tolerance",
                                    "--rollout-health-check-interval",
                                    "1",
                                    "--rollout-health-check-timeout",
                                    "5",
                                    "--max-engine-restarts",
                                    std::to_string(kRepeats)};
  if (colocate) {
    flags.insert(flags.end(), {"--colocate", "--actor-num-gpus-per-node", "2"});
  }
  return flags;
}

// Spawn to first sample of one engine as the job's are configured, alone in a runtime of its own.
double cold_start_seconds(const std::string& model) {
  const Config config = load_config(train_schema(), "", job_flags(model, false));
  actors::RuntimeOptions runtime;
  runtime.resources = {{"CPU", 1}};
  runtime.log_to_driver = false;
  actors::init(runtime);
  engine::EngineOptions engine;
  engine.model_dir = model;
  engine.max_running_requests = config.get<int64_t>("engine_max_running_requests");
  engine.kv_cache_memory_mb = config.get<int64_t>("engine_kv_cache_memory_mb");
  engine.intra_op_threads = static_cast<int>(config.get<int64_t>("engine_threads"));
  const Clock::time_point start = Clock::now();
  auto actor = actors::spawn<serving::RolloutEngine>(
      serving::rollout_engine_actor_options({{"CPU", 1}}), engine);
  first_sample(serve_engine(actor));
  const double seconds = seconds_since(start);
  actors::shutdown();
  return seconds;
}

// kRepeats times: SIGKILL engine 1, recover, first sample from the restarted engine.
std::vector<double> recovery_seconds(const std::string& model, bool colocate) {
  const Config config = load_config(train_schema(), "", job_flags(model, colocate));
  const TrainPlan plan = TrainPlan::resolve(config, /*num_prompts=*/8);
  std::vector<double> seconds;
  {
    RlProcesses job = start_rl_processes(config, plan, policy_init(config, plan));
    EngineSupervisor supervisor(config, job);
    // One step, so a restarted engine has weights to catch up on.
    trainer::TrainBatch batch;
    for (int s = 0; s < 4; ++s) {
      batch.samples.push_back(trainer::language_modeling_sample({5, 6, 7, 8, 9, 10, int64_t{s}}));
    }
    trainer::train_step(job.trainers, batch, fsdp::PackingOptions{});
    actors::get_all(job.trainers.call_all(&trainer::TrainActor::update_weights, int64_t{1}, true));
    for (int r = 0; r < kRepeats; ++r) {
      const int pid = job.engines[1].info().pid;
      const Clock::time_point killed = Clock::now();
      if (::kill(pid, SIGKILL) != 0)
        throw Error("cannot kill engine 1 (pid " + std::to_string(pid) + ")");
      if (supervisor.recover(1) != 1) throw Error("recover() restarted no engine after a SIGKILL");
      first_sample(supervisor.urls()[1]);
      seconds.push_back(seconds_since(killed));
    }
  }
  actors::shutdown();
  return seconds;
}

void run() {
  bench::ScopedTempDir dir("engine-recovery-bench");
  models::ModelInitOptions model;
  model.hidden_size = 256;
  model.num_layers = 4;
  model.tokenizer = "byte";
  model.out_dir = dir.path("model");
  models::init_hf_model(model);

  std::vector<double> cold;
  for (int r = 0; r < kRepeats; ++r) cold.push_back(cold_start_seconds(model.out_dir));
  const double baseline = median(cold);
  print_line(kBench, "cold_start_to_first_sample", baseline, "s", std::nullopt, std::nullopt);
  for (bool colocate : {true, false}) {
    const double recovery = median(recovery_seconds(model.out_dir, colocate));
    print_line(kBench,
               std::string("kill9_to_first_sample_") + (colocate ? "colocated" : "disaggregated"),
               recovery, "s", baseline, recovery / baseline);
  }
}

}  // namespace
}  // namespace ooze::launcher

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  ooze::actors::run_worker_if_requested();    // trainer ranks and engines are this program
  ::setenv("OMP_NUM_THREADS", "1", 1);
  at::set_num_threads(1);
  try {
    ooze::launcher::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_recovery_bench: %s\n", e.what());
    if (ooze::actors::is_initialized()) ooze::actors::shutdown();
    return 1;
  }
  return 0;
}
