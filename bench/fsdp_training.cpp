// Training throughput of a ~20M-parameter Qwen3-shaped model on packed batches, and what fully
// sharded data parallelism (fsdp/) costs on top of plain training:
//
//   fsdp.train.unsharded_w1  the plain TransformerModel: forward, loss, backward, global-norm
//                            clipping (fp64 norm, as fsdp/), torch::optim::AdamW (the baseline)
//   fsdp.train.fsdp_w1       the same model through trainer::train_step (trainer/train_step.h:
//   plan,
//                            pack, FsdpTransformer, the SFT loss of algorithms/, ShardedAdamW),
//                            the step every TrainActor runs, on one rank (no communicator)
//   fsdp.train.fsdp_w2       the same on 2 real processes over Gloo on loopback, each rank with
//                            its own data (weak scaling: per-rank tokens as above)
//
// One step = one packed batch per rank of kSequences sequences of kSequenceLength random tokens
// (fixed seeds), forward, mean next-token loss, backward, clip to 1.0, AdamW (lr 1e-4, weight
// decay 0.01). Tokens/s = input tokens of every rank / step time (median of kTimedSteps steps
// after kWarmupSteps; for W = 2 a step's time is that of the slower rank). Every `ratio` compares
// with unsharded_w1 measured in the same run; fsdp_w2 adds scaling_efficiency = ratio / 2.
//
// Compute vs communication: the FSDP model's communicator is wrapped in a timing decorator that
// adds up the wall time the trainer spends inside communicator calls and blocked in Work::wait()
// (gathers, reduce-scatters, the all-reduce of the gradient norm): exposed communication, the
// part that prefetching did not hide. Compute = step time - exposed communication (rank 0's).
//
// Every configuration runs with at::set_num_threads(1), so W = 2 uses two cores, one per rank.
// As a correctness guard, the parameters of unsharded_w1 and fsdp_w1 after the same steps from
// the same initialisation are compared (max_abs_param_diff of the fsdp_w1 line).
//
//   bench_fsdp_training            # runs all three; starts the 2 ranks of W = 2 itself
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "bench/timed_communicator.h"
#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"
#include "core/error.h"
#include "core/load_time_settings.h"
#include "core/timer.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/optimizer_step.h"
#include "fsdp/packing.h"
#include "fsdp/sharded_adamw.h"
#include "models/log_probs.h"
#include "models/model_config.h"
#include "models/transformer.h"
#include "trainer/train_step.h"

using Clock = std::chrono::steady_clock;
using namespace ooze;
using ooze::bench::TimedCommunicator;

namespace {

constexpr int kWorld = 2;
constexpr int64_t kSequences = 4;
constexpr int64_t kSequenceLength = 256;
constexpr int64_t kTokensPerStep = kSequences * kSequenceLength;  // per rank
constexpr int kWarmupSteps = 1;
constexpr int kTimedSteps = 5;
constexpr uint64_t kInitSeed = 1234;
constexpr double kLr = 1e-4;
constexpr double kWeightDecay = 0.01;
constexpr double kClipGrad = 1.0;

models::ModelConfig bench_config() {
  models::ModelConfig config;
  config.model_type = "qwen3";
  config.vocab_size = 2048;
  config.hidden_size = 512;
  config.intermediate_size = 1408;
  config.num_hidden_layers = 6;
  config.num_attention_heads = 8;
  config.num_key_value_heads = 4;
  config.head_dim = 64;
  config.max_position_embeddings = 4096;
  config.tie_word_embeddings = false;  // the embeddings are a unit of their own under FSDP
  config.torch_dtype = "float32";
  config.validate();
  return config;
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

// --- data ---------------------------------------------------------------------------------

// kSequences random sequences trained on every next token; the same (rank, step) gives the same
// batch.
std::vector<fsdp::PackingSample> make_batch(int64_t vocab_size, int rank, int step) {
  std::mt19937_64 rng(1000003ull * static_cast<uint64_t>(rank + 1) + static_cast<uint64_t>(step));
  std::uniform_int_distribution<int64_t> token(0, vocab_size - 1);
  std::vector<fsdp::PackingSample> samples;
  for (int64_t s = 0; s < kSequences; ++s) {
    std::vector<int64_t> sequence(kSequenceLength);
    for (auto& id : sequence) id = token(rng);
    samples.push_back(trainer::language_modeling_sample(sequence));
  }
  return samples;
}

// The baseline's loss, written plainly: the mean next-token negative log-likelihood over the
// packed batch's counted tokens (the token after position t is predicted from position t).
torch::Tensor next_token_loss(models::TransformerModel& model,
                              const fsdp::PackedMicroBatch& batch) {
  torch::Tensor hidden = model->forward(batch.tokens, batch.position_ids, batch.cu_seqlens);
  const torch::Tensor targets = torch::roll(batch.tokens, -1);
  const torch::Tensor counted = torch::roll(batch.loss_mask, -1);
  models::TokenLogProbs out =
      models::compute_token_log_probs(hidden, model->lm_head_weight(), targets);
  return -(out.log_probs.to(torch::kFloat) * counted).sum() / counted.sum().item<double>();
}

// --- the three configurations -------------------------------------------------------------

struct StepTimes {
  std::vector<double> step_seconds;     // the slowest rank's
  std::vector<double> comm_seconds;     // rank 0's exposed communication
  std::vector<double> compute_seconds;  // rank 0's step time minus its communication
  double last_loss = 0;
};

// torch::nn::utils::clip_grad_norm_ with the norm summed in fp64, as fsdp::clip_grad_norm does:
// LibTorch's fp32 norm of 20M elements differs from it in the 6th digit, and the clipped
// updates would then differ too, hiding whether FSDP at W = 1 trains bit for bit as plain.
void clip_grad_norm_fp64(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  double squares = 0;
  for (const auto& p : params) squares += p.grad().to(torch::kDouble).square().sum().item<double>();
  const double coef = max_norm / (std::sqrt(squares) + 1e-6);
  if (coef >= 1.0) return;
  for (const auto& p : params) p.grad().mul_(coef);
}

StepTimes train_unsharded(models::TransformerModel& model) {
  std::vector<torch::Tensor> params = model->parameters();
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(kLr).weight_decay(kWeightDecay));
  StepTimes times;
  for (int step = 0; step < kWarmupSteps + kTimedSteps; ++step) {
    const auto samples = make_batch(model->config().vocab_size, 0, step);
    const auto start = Clock::now();
    const fsdp::PackedMicroBatch batch = fsdp::pack_micro_batch(samples, {0, 1, 2, 3});
    torch::Tensor loss = next_token_loss(model, batch);
    loss.backward();
    clip_grad_norm_fp64(params, kClipGrad);
    optimizer.step();
    optimizer.zero_grad();
    const double seconds = seconds_since(start);
    times.last_loss = loss.item<double>();
    if (step < kWarmupSteps) continue;
    times.step_seconds.push_back(seconds);
    times.comm_seconds.push_back(0.0);
    times.compute_seconds.push_back(seconds);
  }
  return times;
}

// Trains `fsdp` on rank `rank`'s batches. `timed_comm` is the communicator the model uses (null
// for one rank); `raw_comm` the same group without timing, for the barrier that starts every
// step together and the max of the step times (both outside the timed region).
StepTimes train_fsdp(fsdp::FsdpTransformer& fsdp, int rank, TimedCommunicator* timed_comm,
                     comm::Communicator* raw_comm) {
  fsdp::ShardedAdamWOptions adam;
  adam.weight_decay = kWeightDecay;
  fsdp::ShardedAdamW optimizer(fsdp.sharded(), adam);
  trainer::TrainStepOptions options;
  options.packing.micro_batch_size = kSequences;  // one micro-batch, as the baseline
  options.loss_aggregation = algorithms::LossAggregation::kTokenMean;
  options.loss_type = trainer::LossType::kSftLoss;  // the baseline's loss
  options.clip_grad = kClipGrad;
  StepTimes times;
  for (int step = 0; step < kWarmupSteps + kTimedSteps; ++step) {
    const auto samples = make_batch(fsdp.model()->config().vocab_size, rank, step);
    if (raw_comm) raw_comm->barrier();
    if (timed_comm) timed_comm->reset();
    const auto start = Clock::now();
    const trainer::TrainStepResult out =
        trainer::train_step(fsdp, optimizer, kLr, samples, options);
    const double seconds = seconds_since(start);
    const double comm_seconds = timed_comm ? timed_comm->blocked_seconds() : 0.0;
    double slowest = seconds;
    if (raw_comm) {
      at::Tensor t = at::full({1}, seconds, at::kDouble);
      raw_comm->all_reduce(t, comm::ReduceOp::MAX);
      slowest = t.item<double>();
    }
    times.last_loss = out.metrics.at("loss");
    if (step < kWarmupSteps) continue;
    times.step_seconds.push_back(slowest);
    times.comm_seconds.push_back(comm_seconds);
    times.compute_seconds.push_back(seconds - comm_seconds);
  }
  return times;
}

// A rank process of the W = 2 run. Rank 0 writes one line per timed step to the file `report`:
// "<slowest rank's step seconds> <own comm seconds> <own compute seconds>", then "loss <value>".
int run_rank(int rank, int port, const std::string& report) {
  at::set_num_threads(1);
  auto store =
      std::make_shared<comm::TcpStore>("127.0.0.1", port, rank, false, std::chrono::seconds(60));
  std::shared_ptr<comm::Communicator> raw =
      comm::make_gloo_communicator(store, rank, kWorld, "bench_fsdp", std::chrono::seconds(120));
  auto timed = std::make_shared<TimedCommunicator>(raw);
  models::TransformerModel model(bench_config());
  model->init_weights(kInitSeed);
  fsdp::FsdpTransformer fsdp(model, timed);
  StepTimes times = train_fsdp(fsdp, rank, timed.get(), raw.get());
  if (rank == 0) {
    std::ofstream out(report);
    out.precision(9);
    for (size_t i = 0; i < times.step_seconds.size(); ++i) {
      out << times.step_seconds[i] << " " << times.comm_seconds[i] << " "
          << times.compute_seconds[i] << "\n";
    }
    out << "loss " << times.last_loss << "\n";
    if (!out.flush()) {
      std::fprintf(stderr, "bench_fsdp_training: rank 0 could not write its report %s\n",
                   report.c_str());
      return 1;
    }
  }
  raw->barrier();
  return 0;
}

// Starts the kWorld rank processes (this executable with --rank), waits for them and returns
// rank 0's figures; throws ooze::Error when a rank fails.
StepTimes run_world2() {
  const bench::ScopedTempDir dir("bench-fsdp-training");
  const std::string report = dir.path("report");
  bench::run_bench_ranks(
      kWorld,
      [&](int rank, int port) {
        return std::vector<std::string>{
            "/proc/self/exe", "--rank", std::to_string(rank), "--port", std::to_string(port),
            "--report",       report};
      },
      "the W = 2 run");

  StepTimes times;
  std::istringstream lines(bench::text_of(report));
  std::string word;
  while (lines >> word) {
    if (word == "loss") {
      lines >> times.last_loss;
      continue;
    }
    double comm_seconds = 0, compute_seconds = 0;
    lines >> comm_seconds >> compute_seconds;
    times.step_seconds.push_back(std::stod(word));
    times.comm_seconds.push_back(comm_seconds);
    times.compute_seconds.push_back(compute_seconds);
  }
  if (times.step_seconds.size() != static_cast<size_t>(kTimedSteps)) {
    throw Error("bench_fsdp_training: rank 0 of the W = 2 run reported " +
                std::to_string(times.step_seconds.size()) + " steps, expected " +
                std::to_string(kTimedSteps));
  }
  return times;
}

double max_abs_param_diff(models::TransformerModel& a, models::TransformerModel& b) {
  torch::NoGradGuard no_grad;
  auto b_params = b->named_parameters();
  double diff = 0;
  for (const auto& item : a->named_parameters()) {
    const torch::Tensor other = b_params[item.key()];
    diff = std::max(diff, (item.value() - other).abs().max().item<double>());
  }
  return diff;
}

void print_line(const std::string& name, int world, const StepTimes& times, double baseline,
                const std::string& extra) {
  const double step_seconds = median(times.step_seconds);
  const double value = world * kTokensPerStep / step_seconds;
  // What a step takes beyond the unsharded step of the same per-rank batch.
  const double overhead_seconds = step_seconds - kTokensPerStep / baseline;
  std::printf(
      "{\"bench\": \"fsdp.train.%s\", \"metric\": \"throughput\", \"value\": %.1f, "
      "\"unit\": \"tokens/s\", \"baseline\": %.1f, \"ratio\": %.4f, \"world_size\": %d, "
      "\"tokens_per_step\": %lld, \"step_s\": %.4f, \"compute_s_per_step\": %.4f, "
      "\"comm_s_per_step\": %.4f, \"overhead_s_per_step\": %.4f, \"final_loss\": %.4f%s}\n",
      name.c_str(), value, baseline, value / baseline, world,
      static_cast<long long>(world * kTokensPerStep), step_seconds, median(times.compute_seconds),
      median(times.comm_seconds), overhead_seconds, times.last_loss, extra.c_str());
  std::fflush(stdout);
}

int run_bench() {
  at::set_num_threads(1);
  const models::ModelConfig config = bench_config();
  const std::string note =
      ", \"note\": \"at::set_num_threads(1) per process; fsdp_w2 = 2 processes (2 cores), "
      "per-rank batch as W=1; tokens = packed input tokens; median of " +
      std::to_string(kTimedSteps) + " steps\"";

  models::TransformerModel plain(config);
  plain->init_weights(kInitSeed);
  const StepTimes unsharded = train_unsharded(plain);
  const double baseline = kTokensPerStep / median(unsharded.step_seconds);
  print_line("unsharded_w1", 1, unsharded, baseline,
             ", \"params\": " + std::to_string(config.num_parameters()) + note);

  models::TransformerModel sharded_model(config);
  sharded_model->init_weights(kInitSeed);
  fsdp::FsdpTransformer fsdp_w1(sharded_model, nullptr);  // one rank: no communicator
  const StepTimes w1 = train_fsdp(fsdp_w1, 0, nullptr, nullptr);
  // W = 1 fp32: the module's parameters are the master shards themselves (fsdp/flat_param.h).
  char diff[64];
  std::snprintf(diff, sizeof(diff), ", \"max_abs_param_diff\": %.3e",
                max_abs_param_diff(plain, fsdp_w1.model()));
  print_line("fsdp_w1", 1, w1, baseline, diff + note);

  const StepTimes w2 = run_world2();
  const double ratio = kWorld * kTokensPerStep / median(w2.step_seconds) / baseline;
  char efficiency[64];
  std::snprintf(efficiency, sizeof(efficiency), ", \"scaling_efficiency\": %.4f", ratio / kWorld);
  print_line("fsdp_w2", kWorld, w2, baseline, efficiency + note);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  try {
    if (argc == 7 && std::string(argv[1]) == "--rank") {
      return run_rank(std::atoi(argv[2]), std::atoi(argv[4]), argv[6]);
    }
    return run_bench();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_fsdp_training: %s\n", error.what());
    return 1;
  }
}
