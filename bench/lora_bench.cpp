// LoRA against full training on one trainer rank, each configuration in a fresh child process
// so that its peak RSS is its own. One intra-op thread, as every trainer rank runs. The model is
// Qwen3-shaped with Qwen3's 151,936-token vocabulary and tied embeddings, random weights (speed
// and memory do not depend on them):
//   default                 hidden 512, 8 layers, 8 heads (4 for keys and values), 1536 wide MLP
//   --shape qwen3-0.6b      hidden 1024, 28 layers, 16 heads (8), 3072 wide MLP: Qwen3-0.6B
//
// lora_train   peak_rss_mb and step_seconds of full training (fp32 weights, gradients and
//              AdamW moments) and of LoRA at rank 16 on all linear layers (the frozen base in
//              fp32, the adapters trained): value LoRA, baseline full, ratio LoRA / full (goal:
//              memory <= 0.4). One step: 4 sequences of 256 tokens, the SFT loss, the step users
//              run (trainer::train_step); the best of 2 steps after one warm-up step. Measured
//              as it is and with --gradient-checkpointing on both sides (_checkpointed).
// lora_sync    the bytes an fp32 engine receives per sync after its first: full training (every
//              weight), LoRA merged (the adapted weights) and LoRA adapter (A and B alone), as
//              WeightSyncer plans them, and the trainer's time to gather and pack them
//              (TrainerBuckets::pack of every bucket, no engine): ratio against full (goal:
//              adapter bytes <= 0.05).
// opd_overhead the teacher's scoring of the step's samples in the trainer (--opd-type trainer: a
//              frozen sharded copy of the same shape) against the training step: what on-policy
//              distillation adds to a GRPO step whose old log-probs are computed anyway.
//
//   build/bench/bench_lora_bench [--shape qwen3-0.6b]
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "core/load_time_settings.h"
#include "core/timer.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/sharded_adamw.h"
#include "models/lora.h"
#include "models/model_init.h"
#include "models/transformer.h"
#include "trainer/lora_weights.h"
#include "trainer/reference_model.h"
#include "trainer/train_step.h"
#include "trainer/trainer_buckets.h"

namespace {

using ooze::Timer;
using ooze::bench::print_line;

constexpr int64_t kLoraRank = 16;
constexpr int kSequences = 4;
constexpr int kTokens = 256;

ooze::models::ModelConfig model_config(bool qwen3_06b) {
  return ooze::models::ModelConfig::from_json(
      nlohmann::json{{"model_type", "qwen3"},
                     {"vocab_size", ooze::models::kQwenPaddedVocabSize},
                     {"hidden_size", qwen3_06b ? 1024 : 512},
                     {"intermediate_size", qwen3_06b ? 3072 : 1536},
                     {"num_hidden_layers", qwen3_06b ? 28 : 8},
                     {"num_attention_heads", qwen3_06b ? 16 : 8},
                     {"num_key_value_heads", qwen3_06b ? 8 : 4},
                     {"head_dim", qwen3_06b ? 128 : 64},
                     {"rms_norm_eps", 1e-6},
                     {"rope_theta", 1000000.0},
                     {"tie_word_embeddings", true},
                     {"torch_dtype", "float32"}},
      "the bench's model");
}

std::vector<ooze::fsdp::PackingSample> batch(int64_t vocab) {
  std::mt19937_64 random(7);
  std::vector<ooze::fsdp::PackingSample> samples;
  for (int s = 0; s < kSequences; ++s) {
    std::vector<int64_t> tokens(kTokens);
    for (int64_t& token : tokens) token = static_cast<int64_t>(random() % vocab);
    samples.push_back(ooze::trainer::language_modeling_sample(tokens));
  }
  return samples;
}

// A model on one rank, as TrainActor builds it: LoRA freezes the base and shards the adapters.
std::unique_ptr<ooze::fsdp::FsdpTransformer> trainer_model(const ooze::models::ModelConfig& config,
                                                           bool lora, bool checkpointed = false) {
  ooze::models::TransformerModel model(config);
  model->init_weights(1);
  ooze::fsdp::FsdpTransformerOptions options;
  options.activation_checkpointing = checkpointed;
  if (lora) {
    ooze::models::LoraOptions adapters;
    adapters.rank = kLoraRank;
    adapters.alpha = 2 * kLoraRank;
    ooze::models::add_lora_adapters(*model, adapters, 0);
    options.shard.replicate_frozen = true;
  }
  return std::make_unique<ooze::fsdp::FsdpTransformer>(model, nullptr, options);
}

// Runs `measure` in a child process and returns the numbers it reports (name -> value).
std::map<std::string, double> in_child(
    const std::function<std::map<std::string, double>()>& measure) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) throw ooze::bench::BenchFailure("pipe failed");
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_ends[0]);
    at::set_num_threads(1);
    std::string text;
    try {
      for (const auto& [name, value] : measure()) text += name + " " + std::to_string(value) + "\n";
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      _exit(1);
    }
    if (write(pipe_ends[1], text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      _exit(1);
    _exit(0);
  }
  close(pipe_ends[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(pipe_ends[0], buffer, sizeof(buffer))) > 0) text.append(buffer, n);
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw ooze::bench::BenchFailure(ooze::bench::program_name() + ": a measuring child failed");
  }
  std::map<std::string, double> values;
  std::istringstream lines(text);
  std::string name;
  double value;
  while (lines >> name >> value) values[name] = value;
  return values;
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

std::map<std::string, double> train(const ooze::models::ModelConfig& config, bool lora,
                                    bool with_teacher, bool checkpointed = false) {
  auto model = trainer_model(config, lora, checkpointed);
  ooze::fsdp::ShardedAdamW optimizer(model->sharded(), {});
  ooze::trainer::TrainStepOptions options;
  options.loss_type = ooze::trainer::LossType::kSftLoss;
  options.packing.micro_batch_size = kSequences;
  const auto samples = batch(config.vocab_size);
  std::map<std::string, double> out;
  double best = 1e30;
  for (int step = 0; step < 3; ++step) {
    Timer watch;
    ooze::trainer::train_step(*model, optimizer, 1e-5, samples, options);
    if (step > 0) best = std::min(best, watch.elapsed());
  }
  out["step_seconds"] = best;
  out["peak_rss_mb"] = peak_rss_mb();
  if (with_teacher) {
    ooze::models::TransformerModel teacher_model(config);
    teacher_model->init_weights(2);
    ooze::trainer::ReferenceModel teacher(teacher_model, nullptr);
    double scoring = 1e30;
    for (int i = 0; i < 3; ++i) {
      Timer watch;
      teacher.compute_log_probs(samples, options.packing);
      if (i > 0) scoring = std::min(scoring, watch.elapsed());
    }
    out["teacher_seconds"] = scoring;
  }
  return out;
}

// Bytes and packing time of what a sync after the first sends.
std::map<std::string, double> sync_walk(const ooze::models::ModelConfig& config,
                                        const std::string& mode) {
  auto model = trainer_model(config, mode != "full");
  std::vector<ooze::trainer::SyncedTensor> tensors =
      mode == "full"     ? ooze::trainer::sharded_parameters(model->sharded())
      : mode == "merged" ? ooze::trainer::merged_lora_weights(*model, /*adapted_only=*/true)
                         : ooze::trainer::lora_adapter_weights(*model, /*adapters_only=*/true);
  ooze::trainer::TrainerBuckets buckets(model->sharded(), std::move(tensors), at::kFloat,
                                        int64_t{512} << 20);
  at::Tensor buffer = at::empty({buckets.largest_bucket_bytes()}, at::kByte);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    Timer watch;
    for (size_t k = 0; k < buckets.plan().size(); ++k) buckets.pack(k, &buffer);
    best = std::min(best, watch.elapsed());
  }
  return {{"bytes", static_cast<double>(buckets.total_bytes())}, {"pack_seconds", best}};
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  const bool qwen3_06b =
      argc > 2 && std::string(argv[1]) == "--shape" && std::string(argv[2]) == "qwen3-0.6b";
  const ooze::models::ModelConfig config = model_config(qwen3_06b);
  const std::string shape = qwen3_06b ? "qwen3_0.6b" : "qwen3_h512_l8";

  const auto full = in_child([&] { return train(config, false, /*with_teacher=*/true); });
  const auto lora = in_child([&] { return train(config, true, false); });
  print_line("lora_train", shape + "_peak_rss_mb_r16", lora.at("peak_rss_mb"), "MB",
             full.at("peak_rss_mb"), lora.at("peak_rss_mb") / full.at("peak_rss_mb"));
  print_line("lora_train", shape + "_step_seconds_r16", lora.at("step_seconds"), "s",
             full.at("step_seconds"), lora.at("step_seconds") / full.at("step_seconds"));
  // With --gradient-checkpointing on both sides, as LoRA is usually run: the activations, which
  // LoRA does not shrink, stop dominating.
  const auto full_checkpointed = in_child([&] { return train(config, false, false, true); });
  const auto lora_checkpointed = in_child([&] { return train(config, true, false, true); });
  print_line("lora_train", shape + "_peak_rss_mb_r16_checkpointed",
             lora_checkpointed.at("peak_rss_mb"), "MB", full_checkpointed.at("peak_rss_mb"),
             lora_checkpointed.at("peak_rss_mb") / full_checkpointed.at("peak_rss_mb"));
  print_line("lora_train", shape + "_step_seconds_r16_checkpointed",
             lora_checkpointed.at("step_seconds"), "s", full_checkpointed.at("step_seconds"),
             lora_checkpointed.at("step_seconds") / full_checkpointed.at("step_seconds"));
  print_line("opd_overhead", shape + "_teacher_scoring_vs_step", full.at("teacher_seconds"), "s",
             full.at("step_seconds"), full.at("teacher_seconds") / full.at("step_seconds"));

  const auto full_sync = in_child([&] { return sync_walk(config, "full"); });
  for (const std::string mode : {"merged", "adapter"}) {
    const auto sync = in_child([&] { return sync_walk(config, mode); });
    print_line("lora_sync", shape + "_" + mode + "_bytes_r16", sync.at("bytes"), "B",
               full_sync.at("bytes"), sync.at("bytes") / full_sync.at("bytes"));
    print_line("lora_sync", shape + "_" + mode + "_pack_seconds_r16", sync.at("pack_seconds"), "s",
               full_sync.at("pack_seconds"),
               sync.at("pack_seconds") / full_sync.at("pack_seconds"));
  }
  return 0;
}
