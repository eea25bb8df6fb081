// ooze at a real model size, end to end, on the real `ooze` binary as users run it (found beside
// this bench: <build>/launcher/ooze). In a temporary directory `ooze model init` writes a random
// model of Qwen3-0.6B's shape (hidden 1024, 28 layers, 16 query and 8 key/value heads of 128,
// MLP 3072, tied embeddings, 151,936-token vocabulary: 596M parameters, 2.38 GB in fp32) with
// the real Qwen3 tokenizer. Every process runs one intra-op thread (OMP_NUM_THREADS=1). Takes
// about 50 minutes on 2 cores, so `make bench` leaves it out: run `make bench-scale`.
//
//   1. One GRPO rollout step, 8 prompts x 4 samples x 128 response tokens (the random model never
//      stops early), one optimizer step of the 32 samples, 2 trainer ranks and 1 engine, colocated
//      (--colocate) and disaggregated. Per mode (prefix rl_step.colocated. / .disaggregated.):
//        step_time, and rollout, log_probs, train, sync, other: seconds, baseline the step,
//        ratio its share (as bench_rl_step_bench)
//        samples_per_s, gen_tokens_per_s, train_tokens_per_s
//        sync_gb_per_s     the whole model to the engine (perf/update_weights_bytes / time),
//                          baseline a memcpy of as many bytes in this process, ratio sync/memcpy.
//                          A one-rollout run has only its first sync, which also does the work
//                          done once per run (colocated: the engine moves its parameters into
//                          shared memory; disaggregated: the broadcast group forms). So:
//        later_sync_gb_per_s  the same for the syncs after rollouts 2-6 of a short run (2 prompts
//                          x 1 sample x 8 tokens), the rate every later sync runs at: the median
//                          of the five, with its split (later_sync_pack, _transfer, _control);
//                          also rl_step.colocated_bf16.: into an engine in bf16 (the trainer
//                          keeps fp32 masters, so the sync converts as it writes)
//      The disaggregated run saves its rollout (--save-debug-rollout-data) for step 2, and its
//      start-up (launch to the first rollout: processes, model loads, engine serving) is
//      startup.fresh.
//   2. Trainer memory per rank at W = 1, 2 and 4, the largest last (--debug-train-only on the
//      saved rollout: the same model and batch at every W, no engine). memory.wW.:
//        state_gb          the rank's shards of parameters, gradients and AdamW moments
//                          (perf/trainer_state_gb), baseline W = 1's, ratio (goal 1/W)
//        peak_rss_gb       the most resident memory a rank held during the train step
//                          (perf/trainer_peak_rss_gb), baseline W = 1's
//        step_gb           peak_rss - state: what a step holds on top of its shards (gathered
//                          layers, gradients in flight, activations, logits, the runtime), baseline
//                          W = 1's
//        train_time        seconds of the rollout's train phase, baseline W = 1's
//   3. Checkpoints (W = 2): the W = 2 run trains two rollouts with --save-interval 1, then a
//      second run resumes from the checkpoint (--load) and trains a third.
//        checkpoint.save_gb_per_s  bytes of the checkpoint directory / perf/save_time, baseline a
//                                  plain write + fsync of as many bytes in this process
//        checkpoint.load_gb_per_s  the same over perf/load_time, baseline reading its files
//        startup.resumed           launch to the first rollout of the resumed run (seconds)
//
//   bench_scale_bench [--later-syncs-only]   (the second: only those two short runs, a few minutes)
//
// Qwen3-1.7B is left out: its fp32 master weights, gradients and two AdamW moments take
// 16 B x 1.72B = 27.5 GB over all ranks whatever W, more than this 24 GiB machine holds.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "core/load_time_settings.h"

namespace {

using nlohmann::json;
using ooze::bench::BenchFailure;
using ooze::bench::metric;
using ooze::bench::print_line;
using ooze::bench::ScopedTempDir;

constexpr int kPrompts = 8;
constexpr int kSamplesPerPrompt = 4;
constexpr int kResponseTokens = 128;
const std::string kBench = "scale";
// Syncs after the first of a short run, of which the median is reported: one is noisy here, and
// with three a run's median still fell on a slow one now and then (the host's memory bandwidth
// varies from second to second: 15 and 24 GB/s for the same bf16 sync in one run).
constexpr int kLaterSyncs = 5;

// Questions of a few dozen tokens, as a math RL dataset's.
void write_prompts(const std::string& path) {
  std::ofstream out(path);
  for (int i = 0; i < kPrompts; ++i) {
    const int a = 17 * i + 23, b = 31 * i + 9;
    out << json{{"input", "A store sells " + std::to_string(a) + " apples in the morning and " +
                              std::to_string(b) +
                              " in the afternoon. How many apples does it sell in the whole "
                              "day? Think step by step, then give the number."},
                {"label", std::to_string(a + b)}}
               .dump()
        << "\n";
  }
}

void init_model(const std::string& ooze, const std::string& dir, const std::string& log,
                const std::string& dtype = "float32") {
  ooze::bench::run_logged({ooze,          "model",
                           "init",        "--arch",
                           "qwen3",       "--hidden-size",
                           "1024",        "--layers",
                           "28",          "--heads",
                           "16",          "--kv-heads",
                           "8",           "--head-dim",
                           "128",         "--intermediate-size",
                           "3072",        "--tie-embeddings",
                           "--tokenizer", "qwen3",
                           "--dtype",     dtype,
                           "--out",       dir},
                          log);
}

// The rollout's shape: prompts x samples, each up to `response_tokens` long.
struct RolloutShape {
  int prompts = kPrompts;
  int samples_per_prompt = kSamplesPerPrompt;
  int response_tokens = kResponseTokens;
};

// `ooze train` GRPO on the model and prompts: one optimizer step per rollout.
std::vector<std::string> train_command(const std::string& ooze, const ScopedTempDir& files,
                                       int num_rollout, const std::string& out_dir,
                                       const RolloutShape& shape = {}) {
  return {ooze,
          "train",
          "--hf-checkpoint",
          files.path("model"),
          "--prompt-data",
          files.path("prompts.jsonl"),
          "--input-key",
          "input",
          "--label-key",
          "label",
          "--rm-type",
          "f1",
          "--rollout-batch-size",
          std::to_string(shape.prompts),
          "--n-samples-per-prompt",
          std::to_string(shape.samples_per_prompt),
          "--rollout-max-response-len",
          std::to_string(shape.response_tokens),
          "--global-batch-size",
          std::to_string(shape.prompts * shape.samples_per_prompt),
          "--rollout-temperature",
          "1.0",
          "--num-rollout",
          std::to_string(num_rollout),
          "--output-dir",
          out_dir};
}

std::vector<json> run_train(std::vector<std::string> command, const std::string& out_dir,
                            int64_t first_rollout, size_t rollouts) {
  ooze::bench::run_logged(command, out_dir + ".log");
  return ooze::bench::rollout_lines(out_dir + "/metrics.jsonl", first_rollout, rollouts);
}

// GB/s of copying `bytes` once with memcpy (the best of 3), the anchor of the sync figures.
double memcpy_gb_per_s(size_t bytes) {
  std::vector<char> from(bytes, 1), to(bytes, 0);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    best = std::max(best, bytes / 1e9 / ooze::bench::seconds_since(start));
  }
  return best;
}

uint64_t directory_bytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) bytes += entry.file_size();
  }
  return bytes;
}

// GB/s of writing `bytes` to a new file beside the checkpoints in 64 MiB writes, then fsync:
// what the disk takes without ooze.
double plain_write_gb_per_s(const std::string& path, uint64_t bytes) {
  std::vector<char> block(size_t{64} << 20, 1);
  const auto start = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw BenchFailure("cannot create " + path);
  for (uint64_t written = 0; written < bytes;) {
    const size_t chunk = std::min<uint64_t>(block.size(), bytes - written);
    const ssize_t n = ::write(fd, block.data(), chunk);
    if (n <= 0) throw BenchFailure("cannot write " + path);
    written += static_cast<uint64_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  const double seconds = ooze::bench::seconds_since(start);
  std::filesystem::remove(path);
  return bytes / 1e9 / seconds;
}

// GB/s of reading every file of `dir` in 64 MiB reads.
double plain_read_gb_per_s(const std::string& dir) {
  std::vector<char> block(size_t{64} << 20);
  uint64_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
      bytes += static_cast<uint64_t>(in.gcount());
    }
  }
  return bytes / 1e9 / ooze::bench::seconds_since(start);
}

double sync_gb_per_s(const json& line) {
  return metric(line, "perf/update_weights_bytes") / 1e9 / metric(line, "perf/update_weights_time");
}

// 2 trainer ranks and 1 engine, as the RL step runs them.
std::vector<std::string> placement_flags(const std::string& mode) {
  std::vector<std::string> flags = {"--actor-num-gpus-per-node", "2", "--rollout-num-gpus", "1"};
  if (mode == "colocated") flags.push_back("--colocate");
  return flags;
}

// `name`: colocated, disaggregated or colocated_bf16 (colocated into a bf16 engine).
void print_later_sync(const std::string& name, const ScopedTempDir& files, const std::string& ooze,
                      double memcpy_rate) {
  const std::string out = files.path(name + "-later-sync");
  std::vector<std::string> command =
      train_command(ooze, files, 1 + kLaterSyncs, out, RolloutShape{2, 1, 8});
  const bool bf16 = name == "colocated_bf16";
  const std::vector<std::string> flags = placement_flags(bf16 ? "colocated" : name);
  command.insert(command.end(), flags.begin(), flags.end());
  if (bf16) {
    // The same shape in bf16: the engine loads it in bf16, the trainer keeps fp32 masters.
    init_model(ooze, files.path("model-bf16"), files.path("model-bf16-init.log"), "bfloat16");
    *(std::find(command.begin(), command.end(), "--hf-checkpoint") + 1) = files.path("model-bf16");
  }
  std::vector<json> lines = run_train(command, out, 1, kLaterSyncs);
  std::sort(lines.begin(), lines.end(),
            [](const json& a, const json& b) { return sync_gb_per_s(a) < sync_gb_per_s(b); });
  std::cerr << name << " later syncs:";
  for (const json& each : lines) std::cerr << " " << sync_gb_per_s(each) << " GB/s";
  std::cerr << std::endl;
  const json& line = lines[lines.size() / 2];  // the median
  const double rate = sync_gb_per_s(line);
  print_line(kBench, "rl_step." + name + ".later_sync_gb_per_s", rate, "GB/s", memcpy_rate,
             rate / memcpy_rate);
  const double seconds = metric(line, "perf/update_weights_time");
  for (const std::string part : {"pack", "transfer", "control"}) {
    const double part_seconds = metric(line, "perf/update_weights_" + part + "_time");
    print_line(kBench, "rl_step." + name + ".later_sync_" + part, part_seconds, "s", seconds,
               part_seconds / seconds);
  }
}

void print_rl_step(const std::string& mode, const json& line, double memcpy_rate) {
  const std::string prefix = "rl_step." + mode + ".";
  const double step = metric(line, "perf/step_time");
  print_line(kBench, prefix + "step_time", step, "s", std::nullopt, std::nullopt);
  double phases = 0;
  for (const auto& [name, key] :
       std::vector<std::pair<std::string, std::string>>{{"rollout", "perf/rollout_time"},
                                                        {"log_probs", "perf/log_probs_time"},
                                                        {"train", "perf/train_time"},
                                                        {"sync", "perf/update_weights_time"}}) {
    const double seconds = metric(line, key);
    phases += seconds;
    print_line(kBench, prefix + name, seconds, "s", step, seconds / step);
  }
  print_line(kBench, prefix + "other", step - phases, "s", step, (step - phases) / step);
  print_line(kBench, prefix + "samples_per_s", kPrompts * kSamplesPerPrompt / step, "samples/s",
             std::nullopt, std::nullopt);
  const double generated = kPrompts * kSamplesPerPrompt * metric(line, "rollout/response_len/mean");
  print_line(kBench, prefix + "gen_tokens_per_s", generated / metric(line, "perf/rollout_time"),
             "tokens/s", std::nullopt, std::nullopt);
  print_line(kBench, prefix + "train_tokens_per_s", metric(line, "perf/train_tokens_per_sec"),
             "tokens/s", std::nullopt, std::nullopt);
  const double sync_rate = sync_gb_per_s(line);
  print_line(kBench, prefix + "sync_gb_per_s", sync_rate, "GB/s", memcpy_rate,
             sync_rate / memcpy_rate);
}

// `ooze train --debug-train-only` on W ranks over the saved rollout (the same one for every
// rollout id), `num_rollout` rollouts from `first_rollout`: their lines.
std::vector<json> train_only(const std::string& ooze, const ScopedTempDir& files, int world,
                             int num_rollout, const std::vector<std::string>& flags,
                             int64_t first_rollout = 0) {
  const std::string out =
      files.path("train-w" + std::to_string(world) + "-" + std::to_string(first_rollout));
  std::vector<std::string> command = train_command(ooze, files, num_rollout, out);
  command.insert(command.end(),
                 {"--debug-train-only", "--load-debug-rollout-data", files.path("rollout_0.pt"),
                  "--actor-num-gpus-per-node", std::to_string(world)});
  command.insert(command.end(), flags.begin(), flags.end());
  std::vector<json> lines =
      run_train(command, out, first_rollout, static_cast<size_t>(num_rollout - first_rollout));
  std::cerr << "W = " << world << ": train " << metric(lines.front(), "perf/train_time") << " s"
            << std::endl;
  return lines;
}

void print_memory(int world, const json& line, const json& one) {
  const std::string prefix = "memory.w" + std::to_string(world) + ".";
  const double state = metric(line, "perf/trainer_state_gb");
  const double peak = metric(line, "perf/trainer_peak_rss_gb");
  const double one_state = metric(one, "perf/trainer_state_gb");
  const double one_peak = metric(one, "perf/trainer_peak_rss_gb");
  print_line(kBench, prefix + "state_gb", state, "GB", one_state, state / one_state);
  print_line(kBench, prefix + "peak_rss_gb", peak, "GB", one_peak, peak / one_peak);
  print_line(kBench, prefix + "step_gb", peak - state, "GB", one_peak - one_state,
             (peak - state) / (one_peak - one_state));
  const double train = metric(line, "perf/train_time");
  const double one_train = metric(one, "perf/train_time");
  print_line(kBench, prefix + "train_time", train, "s", one_train, train / one_train);
}

void run_bench(bool later_syncs_only) {
  const std::string ooze = ooze::bench::ooze_binary();
  ScopedTempDir files("ooze-scale-bench");
  init_model(ooze, files.path("model"), files.path("model-init.log"));
  write_prompts(files.path("prompts.jsonl"));
  const double memcpy_rate = memcpy_gb_per_s(
      static_cast<size_t>(std::filesystem::file_size(files.path("model/model.safetensors"))));
  for (const std::string name : {"colocated", "colocated_bf16", "disaggregated"}) {
    print_later_sync(name, files, ooze, memcpy_rate);
  }
  if (later_syncs_only) return;

  // 1. The RL step, both placements.
  // The disaggregated run saves its rollout: rollout_0.pt, which the train-only runs replay.
  const std::string rollout_data = files.path("rollout_{rollout_id}.pt");
  for (const std::string mode : {"colocated", "disaggregated"}) {
    const std::string out = files.path(mode);
    std::vector<std::string> command = train_command(ooze, files, 1, out);
    const std::vector<std::string> flags = placement_flags(mode);
    command.insert(command.end(), flags.begin(), flags.end());
    if (mode == "disaggregated")
      command.insert(command.end(), {"--save-debug-rollout-data", rollout_data});
    const json line = run_train(command, out, 0, 1).front();
    std::cerr << mode << ": " << metric(line, "perf/step_time") << " s per step" << std::endl;
    print_rl_step(mode, line, memcpy_rate);
    if (mode == "disaggregated") {
      print_line(kBench, "startup.fresh", metric(line, "perf/startup_time"), "s", std::nullopt,
                 std::nullopt);
    }
  }
  // 2 and 3. Train-only runs on the saved rollout; W = 4, the largest, last.
  const std::string checkpoints = files.path("checkpoints");
  const json one = train_only(ooze, files, 1, 1, {}).front();
  print_memory(1, one, one);
  const std::vector<json> two =
      train_only(ooze, files, 2, 2, {"--save", checkpoints, "--save-interval", "1"});
  print_memory(2, two.front(), one);
  // Rollout 1's line carries the checkpoint written after rollout 0.
  const std::string first = checkpoints + "/iter_0000001";
  const double bytes = static_cast<double>(directory_bytes(first));
  const double save_rate = bytes / 1e9 / metric(two.back(), "perf/save_time");
  const double disk_rate = plain_write_gb_per_s(files.path("plain-write"), bytes);
  print_line(kBench, "checkpoint.save_gb_per_s", save_rate, "GB/s", disk_rate,
             save_rate / disk_rate);
  // A third rollout, resumed from the last checkpoint (iteration 2).
  const json resumed = train_only(ooze, files, 2, 3, {"--load", checkpoints}, 2).front();
  const std::string last = checkpoints + "/iter_0000002";
  const double load_rate = directory_bytes(last) / 1e9 / metric(resumed, "perf/load_time");
  const double read_rate = plain_read_gb_per_s(last);
  print_line(kBench, "checkpoint.load_gb_per_s", load_rate, "GB/s", read_rate,
             load_rate / read_rate);
  print_line(kBench, "startup.resumed", metric(resumed, "perf/startup_time"), "s", std::nullopt,
             std::nullopt);
  print_memory(4, train_only(ooze, files, 4, 1, {}).front(), one);
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  const bool later_syncs_only = argc == 2 && std::string(argv[1]) == "--later-syncs-only";
  if (argc > 2 || (argc == 2 && !later_syncs_only)) {
    std::fprintf(stderr, "usage: bench_scale_bench [--later-syncs-only]\n");
    return 2;
  }
  try {
    run_bench(later_syncs_only);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
