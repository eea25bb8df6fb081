#include "launcher/sft_demo.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "actors/actor_group.h"
#include "actors/placement_group.h"
#include "actors/runtime.h"
#include "core/config.h"
#include "core/metrics.h"
#include "fsdp/packing.h"
#include "fsdp/train_step.h"
#include "launcher/train_actor.h"
#include "launcher/trainer_options.h"
#include "models/model_init.h"
#include "models/tokenizer.h"

namespace ooze::launcher {
namespace {

ConfigSchema build_sft_demo_schema() {
  ConfigSchema schema;
  schema.section("sft-demo");
  schema.add_string("out", "runs/sft-demo", "Output directory (model, data, trained model).");
  schema.add_int("world_size", 2, "FSDP ranks (TrainActors).").min(1).max(64);
  schema.add_int("steps", 30, "Optimizer steps of the whole run (a resumed run included).").min(1);
  schema.add_int("batch_size", 16, "Sequences per global batch.").min(1);
  schema.add_int("hidden_size", 128, "Hidden size of the generated model.").min(8);
  schema.add_int("layers", 2, "Decoder layers of the generated model.").min(1);
  schema.add_int("seed", 1, "Seed of the model and the data.").min(0);
  schema.add_string("save", "", "Directory of sharded checkpoints; empty: OUT/checkpoints.");
  schema.add_int("save_interval", 0, "Save every N steps; 0 saves only at the end.").min(0);
  schema.add_check("batch_size_divisible_by_world_size", [](const Config& c) {
    int64_t batch = c.get<int64_t>("batch_size"), world = c.get<int64_t>("world_size");
    if (batch % world == 0) return std::string();
    return "batch_size = " + std::to_string(batch) +
           " is not divisible by world_size = " + std::to_string(world) +
           ": every rank must get the same number of sequences";
  });
  // A tiny model learns in a few dozen steps at a large rate. Each rank's share of a batch
  // (short texts) fits one micro-batch, and the loss is the mean over every predicted token.
  TrainerOptions defaults;
  defaults.lr = 3e-3;
  defaults.min_lr = 3e-4;
  defaults.lr_warmup_iters = 3;
  defaults.lr_decay_style = "cosine";
  defaults.packing.use_dynamic_batch_size = true;
  defaults.packing.max_tokens_per_gpu = 4096;
  defaults.loss_aggregation = algorithms::LossAggregation::kTokenMean;
  defaults.loss_type = fsdp::LossType::kSftLoss;
  add_trainer_fields(schema, defaults);
  return schema;
}

// Short texts with structure a small model learns in a few steps: counting runs and
// repeated words, as {"text": ...} lines.
std::string write_dataset(const std::string& path, int lines, uint64_t seed) {
  std::mt19937_64 random(seed);
  const std::vector<std::string> words = {"ooze", "actor", "shard", "token", "reward", "policy"};
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    std::string text;
    if (i % 2 == 0) {
      int start = static_cast<int>(random() % 50);
      for (int k = 0; k < 12; ++k) text += std::to_string(start + k) + " ";
    } else {
      const std::string& word = words[random() % words.size()];
      for (int k = 0; k < 6; ++k) text += word + " ";
    }
    out << nlohmann::json{{"text", text}}.dump() << "\n";
  }
  return path;
}

std::vector<std::vector<int64_t>> read_dataset(const std::string& path,
                                               const models::Tokenizer& tokenizer) {
  std::vector<std::vector<int64_t>> sequences;
  std::ifstream in(path);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || !record.contains("text") || !record["text"].is_string()) {
      throw FormatError(path + ":" + std::to_string(number) + ": expected {\"text\": \"...\"}");
    }
    sequences.push_back(tokenizer.encode(record["text"].get<std::string>()));
  }
  return sequences;
}

}  // namespace

const ConfigSchema& sft_demo_schema() {
  static const ConfigSchema schema = build_sft_demo_schema();
  return schema;
}

int run_sft_demo(const std::vector<std::string>& args) {
  std::optional<Config> loaded = load_config_from_command_line(sft_demo_schema(), args);
  if (!loaded) {
    std::printf("usage: ooze sft-demo [--config FILE] [--FIELD VALUE ...]\n\n%s",
                sft_demo_schema().help().c_str());
    return 0;
  }
  const Config& flags = *loaded;
  const std::string out = std::filesystem::absolute(flags.get<std::string>("out")).string();
  const int world = static_cast<int>(flags.get<int64_t>("world_size"));
  const int steps = static_cast<int>(flags.get<int64_t>("steps"));
  const int batch_size = static_cast<int>(flags.get<int64_t>("batch_size"));
  const TrainerOptions trainer = trainer_options_from_config(flags, steps);  // checks, first
  const std::string flag_save = flags.get<std::string>("save");
  const std::string save_dir =
      std::filesystem::absolute(flag_save.empty() ? out + "/checkpoints" : flag_save).string();
  const int64_t save_interval = flags.get<int64_t>("save_interval");
  const std::string load_dir = flags.get<std::string>("load");
  // A fresh run would collide with the checkpoints of an earlier one (fsdp/checkpoint.h never
  // overwrites the iteration its tracker names). Those under OUT are this command's own output,
  // regenerated like the model and the data; elsewhere they are the user's to keep.
  const bool earlier_checkpoints =
      std::filesystem::exists(save_dir + "/latest_checkpointed_iteration.txt");
  if (load_dir.empty() && earlier_checkpoints) {
    if (!flag_save.empty()) {
      throw ConfigError("--save " + flag_save +
                        " already holds checkpoints of another run: resume it with --load " +
                        flag_save + ", or save elsewhere");
    }
    std::filesystem::remove_all(save_dir);
  }
  std::filesystem::create_directories(out);
  flags.save_effective_config(out);
  // A resumed run continues the metrics of the run it resumes; a fresh one starts them over.
  if (load_dir.empty()) std::filesystem::remove(out + "/metrics.jsonl");
  MetricsSink metrics(out + "/metrics.jsonl");

  models::ModelInitOptions model;
  model.arch = "qwen3";
  model.hidden_size = flags.get<int64_t>("hidden_size");
  model.num_layers = flags.get<int64_t>("layers");
  model.num_heads = 4;
  model.num_kv_heads = 2;
  model.tokenizer = "byte";
  model.out_dir = out + "/model";
  model.seed = static_cast<uint64_t>(flags.get<int64_t>("seed"));
  models::init_hf_model(model);
  std::string data = write_dataset(out + "/data.jsonl", steps * batch_size,
                                   static_cast<uint64_t>(flags.get<int64_t>("seed")));
  auto sequences = read_dataset(data, models::load_tokenizer(model.out_dir));
  std::printf("model %s (qwen3, hidden %ld, %ld layers), data %s (%zu sequences)\n",
              model.out_dir.c_str(), static_cast<long>(model.hidden_size),
              static_cast<long>(model.num_layers), data.c_str(), sequences.size());

  actors::init();
  auto placement = actors::PlacementGroup::create(
      std::vector<actors::ResourceSet>(world, {{"CPU", 1}}), "PACK", "trainers");
  placement.ready();
  actors::ActorGroupOptions options;
  options.actor.resources = {{"CPU", 1}};
  options.placement_group = &placement;
  options.group_name = "sft-" + actors::random_id(4);
  auto trainers = actors::ActorGroup<TrainActor>::spawn(world, options);
  TrainInit init;
  init.model_dir = model.out_dir;
  init.group_name = options.group_name;
  init.options = trainer;
  int64_t parameters = actors::get_all(trainers.call_all(&TrainActor::init, init)).front();
  std::printf("%d FSDP ranks (TrainActors) hold %.2fM parameters sharded\n", world,
              parameters / 1e6);

  TrainProgress progress;
  if (!load_dir.empty()) {
    progress = actors::get_all(trainers.call_all(&TrainActor::load, load_dir)).front();
    std::printf("resumed from %s at step %ld (%ld sequences consumed)\n", load_dir.c_str(),
                static_cast<long>(progress.iteration),
                static_cast<long>(progress.consumed_samples));
    if (progress.iteration >= steps) {
      throw ConfigError("the checkpoint in " + load_dir + " is at step " +
                        std::to_string(progress.iteration) + ": --steps " + std::to_string(steps) +
                        " leaves nothing to train; raise --steps");
    }
    const int64_t needed = progress.consumed_samples + (steps - progress.iteration) * batch_size;
    if (needed > static_cast<int64_t>(sequences.size())) {
      throw ConfigError("the checkpoint in " + load_dir + " has consumed " +
                        std::to_string(progress.consumed_samples) + " sequences: the remaining " +
                        std::to_string(steps - progress.iteration) + " steps of --batch-size " +
                        std::to_string(batch_size) + " need " + std::to_string(needed) +
                        " of the " + std::to_string(sequences.size()) + " this run generates");
    }
  }
  auto save = [&] {
    TrainProgress saved = actors::get_all(trainers.call_all(&TrainActor::save, save_dir)).front();
    std::printf("checkpoint of step %ld saved in %s\n", static_cast<long>(saved.iteration),
                save_dir.c_str());
    return saved.iteration;
  };

  double first_loss = 0.0, last_loss = 0.0, total_tokens = 0.0, total_seconds = 0.0;
  int64_t last_saved = -1;
  const int first_step = static_cast<int>(progress.iteration);
  for (int step = first_step; step < steps; ++step) {
    // The global batch continues where the consumed samples end; it is dealt out to the ranks
    // as --balance-data says (round robin by default: rank r takes every W-th sequence).
    std::vector<fsdp::PackingSample> global(batch_size);
    for (int i = 0; i < batch_size; ++i) {
      global[i] = fsdp::language_modeling_sample(
          sequences[static_cast<size_t>(progress.consumed_samples + i)]);
    }
    const std::vector<std::vector<int64_t>> shares =
        fsdp::split_across_ranks(fsdp::sample_lengths(global), world, trainer.packing);
    std::vector<TrainBatch> batches(world);
    for (int rank = 0; rank < world; ++rank) {
      for (int64_t index : shares[rank]) batches[rank].samples.push_back(global[index]);
    }
    auto start = std::chrono::steady_clock::now();
    auto results = actors::get_all(trainers.call_each(
        &TrainActor::train_step, [&](int rank) { return std::make_tuple(batches[rank]); }));
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress.iteration += 1;
    progress.consumed_samples += batch_size;
    const TrainStepResult& result = results.front();  // step values, the same on every rank
    const double loss = result.metrics.at("loss");
    const int64_t tokens = result.loss_tokens;
    if (step == first_step) first_loss = loss;
    last_loss = loss;
    total_tokens += static_cast<double>(tokens);
    total_seconds += seconds;
    std::printf("step %3d  loss %.6f  grad_norm %.3f  lr %.2e  %.0f tokens/s\n", step + 1, loss,
                result.grad_norm, result.lr, tokens / seconds);
    metrics.log(step + 1, {{"loss", loss},
                           {"grad_norm", result.grad_norm},
                           {"lr", result.lr},
                           {"tokens_per_second", tokens / seconds},
                           {"skipped", result.skipped ? 1.0 : 0.0}});
    std::fflush(stdout);
    if (save_interval > 0 && (step + 1) % save_interval == 0) last_saved = save();
  }
  if (last_saved != steps) save();
  std::string trained = out + "/trained";
  actors::get_all(trainers.call_all(&TrainActor::save_hf, trained));
  std::printf(
      "loss %.4f -> %.4f over steps %d-%d, %.0f tokens/s overall; trained model: %s; "
      "metrics: %s\n",
      first_loss, last_loss, first_step + 1, steps, total_tokens / total_seconds, trained.c_str(),
      metrics.path().c_str());
  actors::shutdown();
  return steps - first_step < 2 || last_loss < first_loss ? 0 : 1;
}

}  // namespace ooze::launcher
