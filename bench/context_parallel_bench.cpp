// Context parallelism on one long sequence: what splitting its tokens over C = 2 ranks buys in
// speed and activation memory per rank over C = 1, and what ring attention spends on
// communication next to its compute.
//
//   cp.model                  the bench shape (Qwen3, hidden 384, 8 layers, 6 query heads over 2
//                             key/value heads, vocab 4096, untied, fp32): its parameter count
//   cp.train.c1_tN            one training step (trainer::train_step: SFT loss over every next
//   cp.train.c2_tN            token, backward, clipping, ShardedAdamW) on one sequence of N random
//                             tokens, on 1 rank and on a CP group of 2 ranks (ring attention):
//                             tokens/s and the peak activation memory of the busier rank, each
//                             against C = 1 measured in the same run
//   cp.train.c1_tT            C = 1 at the target length T: estimated, not run (see below)
//   cp.attention.*_tT         the attention alone, forward and backward, on random q, k, v of T
//                             tokens with the bench's heads: the ring at C = 1 (one rank, no peer:
//                             the compute alone, the baseline), the ring and the all-gather
//                             variant at C = 2 per rank, with the time blocked on communication
//                             against the rest (compute), and the same transfers timed alone
//
// Activation memory: a wrapping CPU allocator counts the bytes held; a step's peak above what
// was held before it (parameters, gradient shards, optimizer state, made by a short warm-up
// step). Communication: the communicator is wrapped in a decorator that adds up the wall time
// spent issuing communication and blocked in Work::wait(): exposed communication, what was not
// hidden behind compute (waiting for a slower peer included). Times are the slower rank's.
//
// Lengths: the target T is 16384 tokens. At C = 1 the trainer runs the packed attention of
// models/, which keeps every query's probabilities for backward, O(T^2) per layer: about 34 GB of
// activations at 16k tokens, more than this 24 GB machine has, so C = 1 trains on the largest
// power of two that fits (8192 tokens, ~10 GB) and C = 2 is measured at that length for the
// ratios, then on T tokens (~3.3 GB per rank). All of it takes about 3 minutes on two free cores;
// --no-long-training leaves out the C = 2 step on T tokens (about 80 s of them).
//
// Every process runs with one intra-op thread, so C = 2 uses two cores, one per rank: its times
// mean something only when two cores are free. The ranks are real processes (this executable
// re-executed) over Gloo on loopback.
//
//   bench_context_parallel_bench [--tokens T] [--c1-tokens N] [--no-long-training]
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "bench/timed_communicator.h"
#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"
#include "core/cpu_memory_counter.h"
#include "core/error.h"
#include "core/load_time_settings.h"
#include "fsdp/fsdp_transformer.h"
#include "fsdp/packing.h"
#include "fsdp/sharded_adamw.h"
#include "models/context_parallel_split.h"
#include "models/model_config.h"
#include "models/ring_attention.h"
#include "models/transformer.h"
#include "trainer/train_step.h"

using Clock = std::chrono::steady_clock;
using namespace ooze;
using ooze::bench::TimedCommunicator;

namespace {

// The target length, and the largest power of two one rank can train on here (see the top).
constexpr int64_t kTokens = 16384;
constexpr int64_t kOneRankTokens = 8192;
constexpr int64_t kWarmupTokens = 256;
constexpr uint64_t kInitSeed = 1234;
constexpr double kLr = 1e-4;

models::ModelConfig bench_config() {
  models::ModelConfig config;
  config.model_type = "qwen3";
  config.vocab_size = 4096;
  config.hidden_size = 384;
  config.intermediate_size = 1536;
  config.num_hidden_layers = 8;
  config.num_attention_heads = 6;
  config.num_key_value_heads = 2;
  config.head_dim = 64;
  config.max_position_embeddings = 32768;
  config.tie_word_embeddings = false;
  config.torch_dtype = "float32";
  config.validate();
  return config;
}

// --- measuring ------------------------------------------------------------------------------

// What a worker reports: named numbers, written by rank 0 as "name value" lines.
using Report = std::map<std::string, double>;

// The largest of every rank's `value` (the slower rank's time, the busier rank's memory).
double max_over_ranks(comm::Communicator* world, double value) {
  if (world == nullptr) return value;
  at::Tensor t = at::full({1}, value, at::kDouble);
  world->all_reduce(t, comm::ReduceOp::MAX);
  return t.item<double>();
}

// --- the workers ----------------------------------------------------------------------------

std::vector<int64_t> random_tokens(int64_t count, int64_t vocab_size, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  const at::Tensor ids = at::randint(vocab_size, {count}, generator, at::kLong);
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + count);
}

// One training step on one sequence of `tokens` tokens on each of the `cp` ranks of `world`
// (null for one rank): time, peak activation memory, exposed communication, loss.
void train_one_sequence(const std::shared_ptr<TimedCommunicator>& world, int64_t cp, int64_t tokens,
                        const std::string& name, Report& report) {
  fsdp::FsdpTransformerOptions options;
  options.context_parallel_size = cp;
  options.cp_impl = models::ContextParallelImpl::kRing;
  models::TransformerModel model(bench_config());
  model->init_weights(kInitSeed);
  fsdp::FsdpTransformer fsdp(model, world, options);
  fsdp::ShardedAdamW optimizer(fsdp.sharded(), fsdp::ShardedAdamWOptions{});
  trainer::TrainStepOptions step;
  step.loss_type = trainer::LossType::kSftLoss;
  step.loss_aggregation = algorithms::LossAggregation::kTokenMean;
  step.packing.context_parallel_size = cp;
  const int64_t vocab = bench_config().vocab_size;

  // A short step first: the optimizer state and every buffer that lives across steps.
  trainer::train_step(fsdp, optimizer, kLr,
                      {trainer::language_modeling_sample(random_tokens(kWarmupTokens, vocab, 1))},
                      step);
  const std::vector<fsdp::PackingSample> samples = {
      trainer::language_modeling_sample(random_tokens(tokens, vocab, 2))};
  if (world) world->barrier();
  if (world) world->reset();
  reset_peak_cpu_bytes();
  const int64_t before = cpu_bytes_in_use();
  const auto start = Clock::now();
  const trainer::TrainStepResult out = trainer::train_step(fsdp, optimizer, kLr, samples, step);
  const double seconds = bench::seconds_since(start);
  const double activation = static_cast<double>(peak_cpu_bytes() - before);
  const double comm_seconds = world ? world->blocked_seconds() : 0.0;
  report[name + ".step_s"] = max_over_ranks(world.get(), seconds);
  report[name + ".activation_bytes"] = max_over_ranks(world.get(), activation);
  report[name + ".comm_s"] = comm_seconds;  // rank 0's
  report[name + ".loss"] = out.metrics.at("loss");
}

// The attention alone on this rank's share of one random sequence: forward and backward, the
// time blocked on communication in each, and the ring's (or the all-gather's) transfers alone.
void attention_one_sequence(const std::shared_ptr<TimedCommunicator>& group,
                            models::ContextParallelImpl impl, int64_t tokens,
                            const std::string& name, Report& report) {
  const models::ModelConfig config = bench_config();
  const int64_t heads = config.num_attention_heads, kv_heads = config.num_key_value_heads,
                head_dim = config.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const models::ContextParallelSplit split =
      models::split_for_context_parallel({0, tokens}, group->size(), group->rank());
  at::manual_seed(7);  // the same full sequence on every rank
  const at::Tensor q_full = at::randn({tokens, heads, head_dim});
  const at::Tensor k_full = at::randn({tokens, kv_heads, head_dim});
  const at::Tensor v_full = at::randn({tokens, kv_heads, head_dim});
  const at::Tensor dout = split.shard(at::randn({tokens, heads, head_dim}) * 0.125);
  const at::Tensor q = split.shard(q_full).requires_grad_(true);
  const at::Tensor k = split.shard(k_full).requires_grad_(true);
  const at::Tensor v = split.shard(v_full).requires_grad_(true);

  group->barrier();
  group->reset();
  auto start = Clock::now();
  const at::Tensor out = models::context_parallel_attention(q, k, v, split, group, scale, impl);
  const double forward_s = bench::seconds_since(start);
  const double forward_comm_s = group->blocked_seconds();
  group->barrier();
  group->reset();
  start = Clock::now();
  out.backward(dout);
  const double backward_s = bench::seconds_since(start);
  const double backward_comm_s = group->blocked_seconds();

  // The same bytes moved with nothing to hide behind: the ring sends a K/V block to the next
  // rank in forward and, in backward, the K/V block and its gradient accumulator; the all-gather
  // variant gathers K/V in forward and backward and reduce-scatters their gradients.
  double transfers_s = 0;
  if (group->size() > 1) {
    const at::Tensor kv = at::stack({k, v}).detach().contiguous();
    const int next = (group->rank() + 1) % group->size();
    const int previous = (group->rank() + group->size() - 1) % group->size();
    group->barrier();
    start = Clock::now();
    if (impl == models::ContextParallelImpl::kRing) {
      for (int transfer = 0; transfer < 3; ++transfer) {
        at::Tensor incoming = at::empty_like(kv);
        comm::WorkPtr send = group->send_async(kv, next, 0);
        comm::WorkPtr receive = group->recv_async(incoming, previous, 0);
        receive->wait();
        send->wait();
      }
    } else {
      at::Tensor gathered = at::empty({group->size() * kv.numel()}, kv.options());
      group->all_gather(gathered, kv.view({-1}));
      group->all_gather(gathered, kv.view({-1}));
      at::Tensor own = at::empty({kv.numel()}, kv.options());
      group->reduce_scatter(own, gathered, comm::ReduceOp::SUM);
    }
    transfers_s = bench::seconds_since(start);
  }
  comm::Communicator* world = group.get();
  report[name + ".forward_s"] = max_over_ranks(world, forward_s);
  report[name + ".backward_s"] = max_over_ranks(world, backward_s);
  report[name + ".forward_comm_s"] = max_over_ranks(world, forward_comm_s);
  report[name + ".backward_comm_s"] = max_over_ranks(world, backward_comm_s);
  report[name + ".transfers_s"] = max_over_ranks(world, transfers_s);
}

// A worker process: rank `rank` of `world_size` (= C) runs `job` ("attention" or "train") on a
// sequence of `tokens` tokens and writes rank 0's report to the file `report_path`.
int run_worker(int rank, int world_size, int port, const std::string& report_path,
               const std::string& job, int64_t tokens) {
  at::set_num_threads(1);
  install_cpu_memory_counter();
  auto store =
      std::make_shared<comm::TcpStore>("127.0.0.1", port, rank, false, std::chrono::seconds(60));
  const auto timeout = std::chrono::seconds(600);
  auto world = std::make_shared<TimedCommunicator>(
      comm::make_gloo_communicator(store, rank, world_size, "bench_cp", timeout));
  Report report;
  if (job == "attention") {
    attention_one_sequence(world, models::ContextParallelImpl::kRing, tokens, "ring", report);
    if (world_size > 1) {
      attention_one_sequence(world, models::ContextParallelImpl::kAllGather, tokens, "allgather",
                             report);
    }
  } else {
    // One rank: no communicator at all, as the trainer runs without CP.
    train_one_sequence(world_size > 1 ? world : nullptr, world_size, tokens, "train", report);
  }
  if (rank == 0) {
    std::ofstream out(report_path);
    out.precision(9);
    for (const auto& [key, value] : report) out << key << " " << value << "\n";
    if (!out.flush()) {
      std::fprintf(stderr, "bench_context_parallel_bench: rank 0 could not write its report %s\n",
                   report_path.c_str());
      return 1;
    }
  }
  world->barrier();
  return 0;
}

// Starts `world_size` worker processes (this executable, re-executed), waits for them and
// returns rank 0's report; throws ooze::Error when a worker fails.
Report run_workers(int world_size, const std::string& job, int64_t tokens) {
  const std::string world = std::to_string(world_size);
  const bench::ScopedTempDir dir("bench-context-parallel");
  const std::string report_path = dir.path("report");
  bench::run_bench_ranks(
      world_size,
      [&](int rank, int port) {
        return std::vector<std::string>{"/proc/self/exe",
                                        "--worker",
                                        job,
                                        std::to_string(rank),
                                        world,
                                        std::to_string(port),
                                        report_path,
                                        std::to_string(tokens)};
      },
      "the C = " + world + " run");
  Report report;
  std::istringstream lines(bench::text_of(report_path));
  std::string key;
  double value = 0;
  while (lines >> key >> value) report[key] = value;
  return report;
}

// --- the report -----------------------------------------------------------------------------

// One JSON line (bench_support.h's fields) with extra "key": number fields.
void print(const std::string& bench, const std::string& metric, double value,
           const std::string& unit, std::optional<double> baseline,
           const std::vector<std::pair<std::string, double>>& extra = {},
           const std::string& note = "") {
  std::optional<double> ratio;
  if (baseline && *baseline != 0) ratio = value / *baseline;
  std::string line = "{\"bench\": \"" + bench + "\", \"metric\": \"" + metric +
                     "\", \"value\": " + bench::json_number(value) + ", \"unit\": \"" + unit +
                     "\", \"baseline\": " + bench::json_number(baseline) +
                     ", \"ratio\": " + bench::json_number(ratio);
  for (const auto& [key, number] : extra)
    line += ", \"" + key + "\": " + bench::json_number(number);
  if (!note.empty()) line += ", \"note\": \"" + note + "\"";
  std::printf("%s}\n", line.c_str());
  std::fflush(stdout);
}

double at_key(const Report& report, const std::string& key) {
  const auto it = report.find(key);
  if (it == report.end()) throw Error("a worker reported no figure '" + key + "'");
  return it->second;
}

// MemAvailable of /proc/meminfo in bytes (0 when unreadable).
double available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::string length_tag(int64_t tokens) { return "_t" + std::to_string(tokens); }

int run_bench(int64_t tokens, int64_t c1_tokens, bool long_training) {
  const models::ModelConfig config = bench_config();
  print("cp.model", "parameters", static_cast<double>(config.num_parameters()), "parameters",
        std::nullopt,
        {{"hidden_size", static_cast<double>(config.hidden_size)},
         {"intermediate_size", static_cast<double>(config.intermediate_size)},
         {"layers", static_cast<double>(config.num_hidden_layers)},
         {"heads", static_cast<double>(config.num_attention_heads)},
         {"kv_heads", static_cast<double>(config.num_key_value_heads)},
         {"vocab_size", static_cast<double>(config.vocab_size)}},
        "Qwen3 shape, untied, fp32; one intra-op thread per rank process");

  // Training. C = 1 at the length it can hold; C = 2 at that length (like for like) and at the
  // target length.
  const Report c1 = run_workers(1, "train", c1_tokens);
  const double c1_rate = static_cast<double>(c1_tokens) / at_key(c1, "train.step_s");
  const double c1_memory = at_key(c1, "train.activation_bytes") / 1e6;
  auto print_training = [&](int cp, int64_t length, const Report& r, const std::string& note) {
    const double step_s = at_key(r, "train.step_s");
    const std::string bench = "cp.train.c" + std::to_string(cp) + length_tag(length);
    print(bench, "throughput", static_cast<double>(length) / step_s, "tokens/s", c1_rate,
          {{"tokens", static_cast<double>(length)},
           {"step_s", step_s},
           {"exposed_comm_s", at_key(r, "train.comm_s")},
           {"loss", at_key(r, "train.loss")}},
          note);
    print(bench, "peak_activation_memory_per_rank", at_key(r, "train.activation_bytes") / 1e6, "MB",
          c1_memory, {{"tokens", static_cast<double>(length)}}, note);
  };
  const std::string c1_name = "cp.train.c1" + length_tag(c1_tokens);
  print_training(1, c1_tokens, c1, "one rank, the packed attention of models/ (the baseline)");
  print_training(2, c1_tokens, run_workers(2, "train", c1_tokens),
                 "CP group of 2, ring attention; baseline " + c1_name);
  if (tokens > c1_tokens) {
    // C = 1 keeps every query's attention probabilities for backward (fp32, and the causal mask
    // as bytes): O(T^2) per layer. The rest of its activations grows linearly with the length.
    auto quadratic_mb = [&](int64_t length) {
      const double half_square = 0.5 * static_cast<double>(length) * static_cast<double>(length);
      return static_cast<double>(config.num_hidden_layers) * half_square *
             (4.0 * static_cast<double>(config.num_attention_heads) + 1.0) / 1e6;
    };
    const double linear_mb = std::max(0.0, c1_memory - quadratic_mb(c1_tokens));
    const double estimate_mb =
        linear_mb * static_cast<double>(tokens) / static_cast<double>(c1_tokens) +
        quadratic_mb(tokens);
    const double available = available_memory_bytes() / 1e6;
    print("cp.train.c1" + length_tag(tokens), "estimated_activation_memory", estimate_mb, "MB",
          available > 0 ? std::optional<double>(available) : std::nullopt,
          {{"tokens", static_cast<double>(tokens)},
           {"attention_probabilities_mb", quadratic_mb(tokens)}},
          "not run: the attention probabilities at this length plus the rest of " + c1_name +
              "'s measurement scaled linearly; baseline: the memory available on this machine "
              "now");
  }
  if (long_training && tokens > c1_tokens) {
    print_training(2, tokens, run_workers(2, "train", tokens),
                   "CP group of 2, ring attention; baseline " + c1_name +
                       " (a shorter sequence: less attention work per token)");
  }

  // Ring attention: the time per rank against the whole sequence's attention on one rank, and
  // the exposed communication against the compute it sat beside.
  const Report local = run_workers(1, "attention", tokens);
  const Report two = run_workers(2, "attention", tokens);
  const double local_s = at_key(local, "ring.forward_s") + at_key(local, "ring.backward_s");
  print("cp.attention.local_c1" + length_tag(tokens), "forward_backward_time", local_s, "s",
        std::nullopt,
        {{"tokens", static_cast<double>(tokens)},
         {"forward_s", at_key(local, "ring.forward_s")},
         {"backward_s", at_key(local, "ring.backward_s")}},
        "ring attention at C = 1: no peer, the attention compute alone");
  for (const std::string impl : {"ring", "allgather"}) {
    const std::string bench = "cp.attention." + impl + "_c2" + length_tag(tokens);
    const double forward_s = at_key(two, impl + ".forward_s");
    const double backward_s = at_key(two, impl + ".backward_s");
    const double forward_comm_s = at_key(two, impl + ".forward_comm_s");
    const double backward_comm_s = at_key(two, impl + ".backward_comm_s");
    const double total_s = forward_s + backward_s;
    const double comm_s = forward_comm_s + backward_comm_s;
    print(bench, "forward_backward_time", total_s, "s", local_s,
          {{"forward_s", forward_s}, {"backward_s", backward_s}},
          "per rank, the slower; baseline: the whole sequence on one rank");
    print(bench, "exposed_comm_time", comm_s, "s", total_s - comm_s,
          {{"forward_comm_s", forward_comm_s},
           {"backward_comm_s", backward_comm_s},
           {"transfers_alone_s", at_key(two, impl + ".transfers_s")}},
          "time blocked on communication; baseline: the rest of the time (compute); "
          "transfers_alone_s: the same transfers with nothing to hide behind");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  try {
    if (argc == 8 && std::string(argv[1]) == "--worker") {
      return run_worker(std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), argv[6],
                        argv[2], std::atoll(argv[7]));
    }
    int64_t tokens = kTokens, c1_tokens = kOneRankTokens;
    bool long_training = true;
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--no-long-training") {
        long_training = false;
      } else if ((flag == "--tokens" || flag == "--c1-tokens") && i + 1 < argc) {
        (flag == "--tokens" ? tokens : c1_tokens) = std::atoll(argv[++i]);
      } else {
        throw Error("unexpected argument '" + flag +
                    "'; use --tokens T, --c1-tokens N and --no-long-training");
      }
    }
    if (tokens < 1 || c1_tokens < 1) {
      throw Error("--tokens and --c1-tokens must be positive");
    }
    return run_bench(tokens, c1_tokens, long_training);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_context_parallel_bench: %s\n", error.what());
    return 1;
  }
}
