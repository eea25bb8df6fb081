#include "launcher/train_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "actors/runtime.h"
#include "algorithms/algorithm_options.h"
#include "core/atomic_file.h"
#include "core/config.h"
#include "core/error.h"
#include "core/metrics.h"
#include "core/tensorboard_writer.h"
#include "launcher/debug_rollout_data.h"
#include "launcher/experiment_data.h"
#include "launcher/trainer_group.h"
#include "launcher/training_batch.h"
#include "rollout/prompt_source.h"
#include "rollout/reward_model.h"
#include "rollout/rollout_engine_actor.h"
#include "rollout/rollout_manager.h"
#include "rollout/rollout_metrics.h"
#include "rollout/rollout_options.h"
#include "rollout/router.h"
#include "weight_sync/weight_sync_options.h"

namespace ooze::launcher {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

ConfigSchema build_schema() {
  ConfigSchema schema;
  schema.section("model");
  schema.add_string("hf_checkpoint", "", "Hugging Face model directory: the initial policy.")
      .required();
  schema.add_string("ref_load", "",
                    "Hugging Face model directory of the reference model; empty: the initial "
                    "policy.");
  schema.section("placement");
  schema.add_int("actor_num_nodes", 1, "Nodes of the trainer.").min(1);
  schema
      .add_int("actor_num_gpus_per_node", 1,
               "Trainer ranks per node (a GPU each; a process slot on the CPU).")
      .min(1);
  schema.add_int("rollout_num_gpus", 1, "GPUs (process slots) of all rollout engines.").min(1);
  schema.add_int("rollout_num_gpus_per_engine", 1, "GPUs of one engine (tensor parallel).").min(1);
  schema.add_bool("colocate", false,
                  "Engines share the trainer ranks' nodes (GPUs) and receive weights through "
                  "shared memory (CUDA IPC); otherwise by broadcast.");
  schema.section("engines");
  schema.add_int("engine_max_running_requests", 64, "Sequences each engine decodes at once.")
      .min(1);
  schema.add_int("engine_kv_cache_memory_mb", 1024, "KV-cache memory of each engine.").min(1);
  schema.add_int("engine_threads", 1, "Intra-op CPU threads of each engine.").min(1);
  schema.section("training");
  schema
      .add_int("global_batch_size", 0,
               "Samples per optimizer step; 0: the whole rollout (rollout_batch_size * "
               "n_samples_per_prompt) in one step.")
      .min(0);
  schema.add_bool("use_rollout_logprobs", false,
                  "Use the engines' log-probs as the old policy's instead of recomputing them.");
  schema.section("output");
  schema.add_string("output_dir", "runs/train", "Where config.json and metrics.jsonl go.");
  schema.add_string("save", "",
                    "Directory of checkpoints (trainer, optimizer, schedule, RNG, rollout id, "
                    "prompt position); --load resumes from it.");
  schema.add_int("save_interval", 0, "Save every N rollouts; 0: only after the last.").min(0);
  schema.add_string("save_hf", "",
                    "Write the final policy here as a Hugging Face model directory (what "
                    "ooze serve and --hf-checkpoint load).");
  schema.section("debug");
  schema.add_string("save_debug_rollout_data", "",
                    "Write each rollout's kept samples as JSON lines; {rollout_id} in the path "
                    "is replaced.");
  schema.add_string("load_debug_rollout_data", "",
                    "Train on the samples a run saved with --save-debug-rollout-data instead of "
                    "generating ({rollout_id} replaced); no engine starts.");
  schema.add_bool("debug_rollout_only", false, "Generate and score only: no trainer starts.");
  schema.add_bool("debug_train_only", false,
                  "Train only, on --load-debug-rollout-data: no engine starts.");
  rollout::add_prompt_data_fields(schema);
  rollout::add_rollout_fields(schema);
  rollout::add_reward_fields(schema);
  rollout::add_eval_fields(schema);
  algorithms::add_algorithm_fields(schema);
  add_trainer_fields(schema);
  weight_sync::add_weight_sync_fields(schema);
  schema.add_check("debug_modes", [](const Config& c) -> std::string {
    const bool loads = !c.get<std::string>("load_debug_rollout_data").empty();
    if (c.get<bool>("debug_rollout_only") && (loads || c.get<bool>("debug_train_only"))) {
      return "--debug-rollout-only trains nothing: drop --debug-train-only and "
             "--load-debug-rollout-data";
    }
    if (c.get<bool>("debug_train_only") && !loads) {
      return "--debug-train-only trains on saved samples: give --load-debug-rollout-data";
    }
    return "";
  });
  schema.add_check("rollout_num_gpus_per_engine", [](const Config& c) -> std::string {
    if (c.get<int64_t>("rollout_num_gpus_per_engine") != 1) {
      return "--rollout-num-gpus-per-engine must be 1: engines are not tensor parallel yet";
    }
    return "";
  });
  return schema;
}

// Mean |old - rollout| log-prob over the counted response tokens: how far the trainer's
// recomputation is from the engines' (Slime's train/train_rollout_logprob_abs_diff).
double logprob_abs_diff(const TrainingBatch& batch) {
  const std::vector<at::Tensor> old = batch.get("old_log_probs");
  const std::vector<at::Tensor> rollout = batch.get("rollout_log_probs");
  double sum = 0, count = 0;
  for (size_t i = 0; i < old.size(); ++i) {
    const at::Tensor& mask = batch.samples[i].response_mask;
    sum += ((old[i] - rollout[i]).abs() * mask).sum().item<double>();
    count += mask.sum().item<double>();
  }
  return count > 0 ? sum / count : 0.0;
}

// The oldest weight version that sampled a token of the rollout: rollout_id when every engine
// had the last sync's weights.
double oldest_weight_version(const rollout::RolloutResult& result) {
  int64_t oldest = -1;
  for (const auto& group : result.groups) {
    for (const rollout::Sample& sample : group) {
      for (int64_t version : sample.weight_versions) {
        if (version >= 0 && (oldest < 0 || version < oldest)) oldest = version;
      }
    }
  }
  return static_cast<double>(oldest);
}

// What a checkpoint holds beyond the trainer's own files: where the run stands. It is written
// as SAVE/rollout_state_<iteration>.json before the trainer's checkpoint, whose tracker names
// the iteration only once everything is on disk: a crash in between leaves the previous
// checkpoint the one that loads.
std::string rollout_state_path(const std::string& dir, int64_t iteration) {
  return dir + "/rollout_state_" + std::to_string(iteration) + ".json";
}

nlohmann::json read_rollout_state(const std::string& dir, int64_t iteration) {
  const std::string path = rollout_state_path(dir, iteration);
  std::ifstream in(path);
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!in.is_open() || state.is_discarded() || !state.contains("next_rollout_id")) {
    throw FormatError(path + " is missing or not a rollout state: the checkpoint of iteration " +
                      std::to_string(iteration) + " in " + dir + " was not written by ooze train");
  }
  return state;
}

// The engines: a RolloutEngine actor each, its HTTP server started inside, all behind a router.
struct Engines {
  std::vector<actors::ActorHandle<rollout::RolloutEngine>> actors;
  std::unique_ptr<rollout::Router> router;
};

Engines start_engines(const Config& config, int count) {
  rollout::EngineOptions engine;
  engine.model_dir = config.get<std::string>("hf_checkpoint");
  engine.max_running_requests = config.get<int64_t>("engine_max_running_requests");
  engine.kv_cache_memory_mb = config.get<int64_t>("engine_kv_cache_memory_mb");
  engine.intra_op_threads = static_cast<int>(config.get<int64_t>("engine_threads"));
  Engines engines;
  for (int i = 0; i < count; ++i) {
    engines.actors.push_back(
        actors::spawn<rollout::RolloutEngine>(rollout::rollout_engine_actor_options(), engine));
  }
  rollout::RouterOptions router;
  for (const auto& handle : engines.actors) {
    router.engine_urls.push_back(
        handle
            .call(&rollout::RolloutEngine::start_server, std::string("127.0.0.1"), 0, std::string())
            .get(std::chrono::minutes(10)));
  }
  engines.router = std::make_unique<rollout::Router>(router);
  return engines;
}

}  // namespace

int run_train_command(const std::vector<std::string>& args, std::ostream& out) {
  static const ConfigSchema schema = build_schema();
  const std::optional<Config> config = load_config_from_command_line(schema, args);
  if (!config) {
    out << "usage: ooze train --hf-checkpoint DIR --prompt-data FILE --rm-type TYPE [flags]\n\n"
        << schema.help();
    return 0;
  }
  // Everything that can be refused is checked before any process starts.
  const std::string model_dir = config->get<std::string>("hf_checkpoint");
  const std::string output_dir = config->get<std::string>("output_dir");
  const ExperimentData data = ExperimentData::load(*config);
  rollout::RewardModel rewards(rollout::RewardOptions::from_config(*config));
  const rollout::RolloutOptions rollout_options = rollout::RolloutOptions::from_config(*config);
  const algorithms::AlgorithmOptions algorithm = algorithms::AlgorithmOptions::from_config(*config);
  const int64_t num_rollout =
      rollout::num_rollouts(*config, data.prompts->size(), rollout_options.rollout_batch_size);
  const int64_t rollout_samples =
      rollout_options.rollout_batch_size * rollout_options.n_samples_per_prompt;
  const int64_t global_batch_size = config->get<int64_t>("global_batch_size") > 0
                                        ? config->get<int64_t>("global_batch_size")
                                        : rollout_samples;
  if (rollout_samples % global_batch_size != 0) {
    throw ConfigError("--global-batch-size " + std::to_string(global_batch_size) +
                      " does not divide a rollout's " + std::to_string(rollout_samples) +
                      " samples (--rollout-batch-size * --n-samples-per-prompt)");
  }
  const int64_t steps_per_rollout = rollout_samples / global_batch_size;
  const int world_size = static_cast<int>(config->get<int64_t>("actor_num_nodes") *
                                          config->get<int64_t>("actor_num_gpus_per_node"));
  const int num_engines = static_cast<int>(config->get<int64_t>("rollout_num_gpus") /
                                           config->get<int64_t>("rollout_num_gpus_per_engine"));
  if (global_batch_size < world_size) {
    throw ConfigError("--global-batch-size " + std::to_string(global_batch_size) +
                      " is smaller than the " + std::to_string(world_size) +
                      " trainer ranks: every rank needs a sample per step");
  }
  TrainerOptions trainer = trainer_options_from_config(*config, num_rollout * steps_per_rollout);
  trainer.policy_loss = algorithm.policy_loss;
  // The policy's log-probs are those of the distribution the rollouts sampled (greedy: T = 1).
  trainer.temperature =
      rollout_options.sampling.temperature > 0 ? rollout_options.sampling.temperature : 1.0;
  const bool needs_reference =
      algorithm.policy_loss.use_kl_loss || algorithm.advantage.kl_coef != 0;
  const bool use_rollout_logprobs = config->get<bool>("use_rollout_logprobs");
  const std::string save_debug_data = config->get<std::string>("save_debug_rollout_data");
  const std::string load_debug_data = config->get<std::string>("load_debug_rollout_data");
  const bool with_trainers = !config->get<bool>("debug_rollout_only");
  const bool with_engines = load_debug_data.empty();
  config->save_effective_config(output_dir);
  MetricsSink metrics(output_dir + "/metrics.jsonl");
  TensorBoardWriter tensorboard(output_dir + "/tensorboard");

  // The processes: trainer ranks and engines, each in a slot of its own.
  actors::RuntimeOptions runtime;
  runtime.resources = {{"CPU", static_cast<double>((with_trainers ? world_size : 0) +
                                                   (with_engines ? num_engines : 0))}};
  actors::init(runtime);
  actors::ActorGroupOptions group_options;
  group_options.actor.resources = {{"CPU", 1}};
  group_options.group_name = "train-" + actors::random_id(4);
  const TrainerGroup trainers =
      with_trainers ? TrainerGroup::spawn(world_size, group_options) : TrainerGroup();
  if (with_trainers) {
    TrainInit init;
    init.model_dir = model_dir;
    init.group_name = group_options.group_name;
    init.options = trainer;
    init.reference_model = needs_reference;
    init.ref_load = config->get<std::string>("ref_load");
    actors::get_all(trainers.call_all(&TrainActor::init, init));
  }
  Engines engines;
  std::unique_ptr<rollout::PromptSource> source;
  std::unique_ptr<rollout::RolloutManager> manager;
  if (with_engines) {
    engines = start_engines(*config, num_engines);
    source = std::make_unique<rollout::PromptSource>(
        data.prompts, rollout::PromptSourceOptions::from_config(*config));
    manager = std::make_unique<rollout::RolloutManager>(rollout_options, *source, *engines.router,
                                                        data.tokenizer, rewards);
  }
  if (with_trainers && with_engines) {
    RolloutEngineConnection connection;
    connection.engines = engines.actors;
    connection.colocate = config->get<bool>("colocate");
    connection.options = weight_sync::WeightSyncOptions::from_config(*config);
    actors::get_all(trainers.call_all(&TrainActor::connect_rollout_engines, connection));
  }

  // --load: the trainer's state, then where the rollouts stood; the engines, started from the
  // initial model, get the loaded weights before they generate.
  int64_t first_rollout = 0;
  int64_t optimizer_steps = 0;
  const std::string load_dir = config->get<std::string>("load");
  if (!load_dir.empty() && with_trainers) {
    const TrainProgress progress =
        actors::get_all(trainers.call_all(&TrainActor::load, load_dir)).front();
    const nlohmann::json state = read_rollout_state(load_dir, progress.iteration);
    first_rollout = state["next_rollout_id"].get<int64_t>();
    optimizer_steps = state["optimizer_steps"].get<int64_t>();
    if (manager && !state["rollout_manager"].is_null()) manager->restore(state["rollout_manager"]);
    if (with_engines) {
      actors::get_all(trainers.call_all(&TrainActor::update_weights, first_rollout,
                                        /*abort_in_flight=*/true));
    }
    out << "resumed from " << load_dir << " at iteration " << progress.iteration << ", rollout "
        << first_rollout << std::endl;
  }
  const std::string save_dir = config->get<std::string>("save");
  const int64_t save_interval = config->get<int64_t>("save_interval");
  auto save = [&](int64_t next_rollout_id) {
    nlohmann::json state = {{"next_rollout_id", next_rollout_id},
                            {"optimizer_steps", optimizer_steps},
                            {"rollout_manager", manager ? manager->state() : nlohmann::json()}};
    std::filesystem::create_directories(save_dir);
    write_file_atomically(rollout_state_path(save_dir, optimizer_steps), state.dump(2) + "\n");
    actors::get_all(trainers.call_all(&TrainActor::save, save_dir));
  };

  // A line of metrics goes to OUT/metrics.jsonl (step: the rollout id), to TensorBoard (step:
  // the optimizer step for a train step's line, else the rollout id) and to stdout.
  auto emit = [&](int64_t rollout_id, const std::map<std::string, double>& line) {
    metrics.log(rollout_id, line);
    auto step = line.find("train/step");
    tensorboard.add_scalars(step == line.end() ? rollout_id : static_cast<int64_t>(step->second),
                            line);
    nlohmann::json printed(line);
    printed["rollout_id"] = rollout_id;
    out << printed.dump() << std::endl;
  };
  auto evaluate = [&](int64_t rollout_id) {
    const Clock::time_point start = Clock::now();
    rollout::MetricMap line = manager->evaluate(data.eval_datasets, data.eval_options);
    line["perf/eval_time"] = seconds_since(start);
    emit(rollout_id, line);
  };
  const bool evaluating =
      with_engines && !data.eval_datasets.empty() && data.eval_options.eval_interval > 0;

  for (int64_t rollout_id = first_rollout; rollout_id < num_rollout; ++rollout_id) {
    if (evaluating && rollout_id % data.eval_options.eval_interval == 0) evaluate(rollout_id);
    std::map<std::string, double> line;
    Clock::time_point start = Clock::now();
    rollout::RolloutResult result;
    if (with_engines) {
      result = manager->generate(rollout_id);
    } else {
      result.rollout_id = rollout_id;
      result.groups = load_debug_rollout_data(debug_rollout_path(load_debug_data, rollout_id));
      result.metrics = rollout::rollout_metrics(result.groups, rewards.options().reward_key);
    }
    line = result.metrics;
    line["perf/rollout_time"] = seconds_since(start);
    line["rollout/oldest_weight_version"] = oldest_weight_version(result);
    if (!save_debug_data.empty()) {
      save_debug_rollout_data(debug_rollout_path(save_debug_data, rollout_id), result.groups);
    }
    if (!with_trainers) {
      emit(rollout_id, line);
      continue;
    }

    TrainingBatch batch = training_batch(result.groups, rewards.options().reward_key);
    const TrainBatch everything{batch.samples};
    start = Clock::now();
    batch.set("old_log_probs",
              use_rollout_logprobs
                  ? batch.get("rollout_log_probs")
                  : log_probs(trainers, everything, trainer.packing, trainer.temperature));
    line["perf/log_probs_time"] = seconds_since(start);
    line["train/train_rollout_logprob_abs_diff"] = logprob_abs_diff(batch);
    if (needs_reference) {
      start = Clock::now();
      batch.set("ref_log_probs", log_probs(trainers, everything, trainer.packing,
                                           trainer.temperature, Scorer::kReference));
      line["perf/ref_log_probs_time"] = seconds_since(start);
    }
    compute_advantages(batch, algorithm.advantage, algorithm.policy_loss.kl_loss_type);

    // Each optimizer step logs a line of its own, "train/step" counting them over the run.
    start = Clock::now();
    for (const TrainBatch& step : batch.global_batches(global_batch_size)) {
      const TrainStepResult trained = train_step(trainers, step, trainer.packing);
      std::map<std::string, double> step_line;
      for (const auto& [key, value] : trained.metrics) step_line["train/" + key] = value;
      step_line["train/grad_norm"] = trained.grad_norm;
      step_line["train/lr"] = trained.lr;
      step_line["train/step"] = static_cast<double>(++optimizer_steps);
      emit(rollout_id, step_line);
    }
    line["perf/train_time"] = seconds_since(start);

    if (with_engines) {
      start = Clock::now();
      const auto synced = actors::get_all(
          trainers.call_all(&TrainActor::update_weights, rollout_id + 1, /*abort_in_flight=*/true));
      line["perf/update_weights_time"] = seconds_since(start);
      line["perf/update_weights_bytes"] = static_cast<double>(synced.front().bytes);
    }

    emit(rollout_id, line);
    const bool last = rollout_id + 1 == num_rollout;
    if (!save_dir.empty() &&
        (last || (save_interval > 0 && (rollout_id + 1) % save_interval == 0))) {
      save(rollout_id + 1);
    }
  }
  if (evaluating) evaluate(num_rollout);
  const std::string save_hf = config->get<std::string>("save_hf");
  if (!save_hf.empty() && with_trainers) {
    actors::get_all(trainers.call_all(&TrainActor::save_hf, save_hf));
    out << "final policy written to " << save_hf << std::endl;
  }
  actors::shutdown();
  return 0;
}

}  // namespace ooze::launcher
