// Throughput of the rollout engine (engine/engine.h) on a ~20M-parameter Qwen3 (fp32, byte
// tokenizer, vocabulary 4096) on this machine's CPU, every figure against a baseline measured in
// the same run:
//
//   continuous_batching  256 requests with log-normal prompt and output lengths, submitted at
//                        once: generated tokens/s of the engine vs a static-batch generate loop
//                        (batches of max_running_requests, each decoded until its longest
//                        output is done, finished rows kept as padding) over the same model code
//   steady_decode        64 sequences decoding: FLOP rate of the engine (2 * matmul parameters
//                        + attention per token) vs plain matmuls of the model's shapes
//   n8_prefix_sharing    one request with n = 8 on a 512-token prompt vs 8 separate requests
//                        with prefix caching off: prefill tokens computed, peak KV bytes held
//   http_overhead        64 requests from 8 client threads over keep-alive HTTP /generate vs
//                        the same through Engine::generate in-process (time ratio)
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_support.h"
#include "core/error.h"
#include "core/load_time_settings.h"
#include "engine/engine.h"
#include "models/hf_checkpoint.h"
#include "models/kv_cache.h"
#include "models/model_config.h"
#include "models/model_init.h"
#include "models/transformer.h"
#include "serving/engine_server.h"
#include "serving/http_client.h"
#include "serving/http_server.h"

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
namespace models = ooze::models;
namespace engine = ooze::engine;
namespace serving = ooze::serving;

using ooze::bench::print_line;
using ooze::bench::ScopedTempDir;
using ooze::bench::seconds_since;

namespace {

constexpr int64_t kMaxRunning = 64;
constexpr int64_t kBlockSize = 16;

// The model directory, written by models::init_hf_model and removed at exit.
class BenchModel {
 public:
  BenchModel() : dir_("ooze-rollout-bench") {
    models::ModelInitOptions options;
    options.arch = "qwen3";
    options.hidden_size = 512;
    options.num_layers = 6;
    options.num_heads = 8;
    options.num_kv_heads = 4;
    options.head_dim = 64;
    options.intermediate_size = 1536;
    options.vocab_size = 4096;
    options.tie_embeddings = true;
    options.dtype = "float32";
    options.tokenizer = "byte";
    options.out_dir = model_dir();
    options.seed = 1;
    config_ = models::init_hf_model(options);
  }

  std::string model_dir() const { return dir_.path("model"); }
  const models::ModelConfig& config() const { return config_; }

 private:
  ScopedTempDir dir_;
  models::ModelConfig config_;
};

// Multiply-accumulate parameters touched per token: every linear layer plus the head.
double matmul_parameters(const models::ModelConfig& c) {
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
               kv = c.num_key_value_heads * c.head_dim, f = c.intermediate_size;
  return c.num_hidden_layers * (h * q + 2 * h * kv + q * h + 3 * h * f) + h * c.vocab_size;
}

// FLOPs of one decoded token attending to `context` tokens: matmuls plus scores and sums.
double decode_flops_per_token(const models::ModelConfig& c, double context) {
  return 2.0 * matmul_parameters(c) +
         2.0 * 2.0 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * context;
}

// FLOP/s of plain fp32 matmuls [rows, in] x [in, out] with every linear shape of the model
// (q, k, v, o, gate, up, down per layer and the head), timed together: the rate LibTorch
// reaches on this model's work at this batch size.
double model_matmul_flop_rate(const models::ModelConfig& c, int64_t rows) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, f = c.intermediate_size;
  const std::vector<std::pair<int64_t, int64_t>> layer_shapes = {{h, q}, {h, kv}, {h, kv}, {q, h},
                                                                 {h, f}, {h, f},  {f, h}};
  std::vector<std::pair<torch::Tensor, torch::Tensor>> operands;
  double flops = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (auto [in, out] : layer_shapes) {
      operands.emplace_back(torch::randn({rows, in}), torch::randn({in, out}));
      flops += 2.0 * rows * in * out;
    }
  }
  operands.emplace_back(torch::randn({rows, h}), torch::randn({h, c.vocab_size}));
  flops += 2.0 * rows * h * c.vocab_size;
  auto run = [&] {
    for (auto& [a, b] : operands) torch::mm(a, b);
  };
  run();  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = Clock::now();
    run();
    best = std::min(best, seconds_since(start));
  }
  return flops / best;
}

struct Workload {
  std::vector<std::vector<int64_t>> prompts;
  std::vector<int64_t> output_lengths;
  int64_t total_output_tokens() const {
    int64_t total = 0;
    for (int64_t n : output_lengths) total += n;
    return total;
  }
};

int64_t draw_length(std::mt19937_64& rng, double median, double sigma, int64_t low, int64_t high) {
  std::lognormal_distribution<double> length(std::log(median), sigma);
  return std::clamp<int64_t>(std::llround(length(rng)), low, high);
}

// Prompts of random byte tokens (no shared prefixes beyond chance).
std::vector<int64_t> random_prompt(std::mt19937_64& rng, int64_t length) {
  std::uniform_int_distribution<int64_t> byte(0, 255);
  std::vector<int64_t> prompt(length);
  for (int64_t& token : prompt) token = byte(rng);
  return prompt;
}

// The continuous-batching workload: prompt median 64 (sigma 0.5, 16..192), output median 48
// (sigma 0.5, 8..160). The bounds keep the static baseline's longest batches, and so the whole
// benchmark, within a few minutes on two cores.
Workload lognormal_workload(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Workload workload;
  for (int64_t i = 0; i < count; ++i) {
    workload.prompts.push_back(random_prompt(rng, draw_length(rng, 64, 0.5, 16, 192)));
    workload.output_lengths.push_back(draw_length(rng, 48, 0.5, 8, 160));
  }
  return workload;
}

// Decode rows the static loop computes per useful output token: each batch runs all its rows
// for its longest output.
double static_padding_factor(const Workload& workload, int64_t batch) {
  const int64_t count = static_cast<int64_t>(workload.prompts.size());
  double rows = 0;
  for (int64_t first = 0; first < count; first += batch) {
    const int64_t last = std::min(count, first + batch);
    rows += static_cast<double>(last - first) *
            *std::max_element(workload.output_lengths.begin() + first,
                              workload.output_lengths.begin() + last);
  }
  return rows / workload.total_output_tokens();
}

engine::EngineOptions engine_options(const std::string& model_dir, int threads) {
  engine::EngineOptions options;
  options.model_dir = model_dir;
  options.dtype = "float32";
  options.max_running_requests = kMaxRunning;
  options.block_size = kBlockSize;
  options.kv_cache_memory_mb = 512;
  options.intra_op_threads = threads;
  options.seed = 1;
  return options;
}

engine::GenerateRequest greedy_request(const std::vector<int64_t>& prompt, int64_t max_new) {
  engine::GenerateRequest request;
  request.input_ids = prompt;
  request.sampling.temperature = 0.0;
  request.sampling.ignore_eos = true;
  request.sampling.max_new_tokens = max_new;
  return request;
}

// Submits every request at once and waits for all; returns the seconds from the first submit
// to the last output. Checks each output has its full length.
double run_engine(engine::Engine& engine, const Workload& workload) {
  std::mutex mutex;
  std::condition_variable done;
  int64_t finished = 0, generated = 0;
  const int64_t count = static_cast<int64_t>(workload.prompts.size());
  auto start = Clock::now();
  for (int64_t i = 0; i < count; ++i) {
    engine.submit(greedy_request(workload.prompts[i], workload.output_lengths[i]),
                  [&](const engine::GenerateOutput& output) {
                    if (!output.finished) return;
                    std::lock_guard<std::mutex> lock(mutex);
                    generated += output.completion_tokens();
                    ++finished;
                    done.notify_all();
                  });
  }
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return finished == count; });
  const double seconds = seconds_since(start);
  if (generated != workload.total_output_tokens()) {
    throw ooze::Error("rollout_bench: the engine generated " + std::to_string(generated) +
                      " tokens, the workload asks for " +
                      std::to_string(workload.total_output_tokens()));
  }
  return seconds;
}

// A Hugging Face-style generate() loop over the same model code, without continuous batching:
// requests in fixed batches of `batch`, each prefilled at once, then decoded one step for every
// row until the batch's longest output is done (finished rows keep decoding as padding).
// Greedy, like the engine's requests. Returns the seconds it took.
double run_static_batches(const std::string& model_dir, const Workload& workload, int64_t batch) {
  const models::ModelConfig config = models::load_model_config(model_dir);
  models::TransformerModel model(config, torch::kFloat);
  models::load_hf_weights(*model, model_dir);
  model->eval();
  torch::NoGradGuard no_grad;
  const int64_t count = static_cast<int64_t>(workload.prompts.size());

  // One cache big enough for the largest batch, allocated before the clock starts.
  auto blocks_for = [](int64_t tokens) { return (tokens + kBlockSize - 1) / kBlockSize; };
  int64_t most_blocks = 0;
  for (int64_t first = 0; first < count; first += batch) {
    const int64_t last = std::min(count, first + batch);
    const int64_t longest = *std::max_element(workload.output_lengths.begin() + first,
                                              workload.output_lengths.begin() + last);
    int64_t blocks = 0;
    for (int64_t i = first; i < last; ++i) {
      blocks += blocks_for(static_cast<int64_t>(workload.prompts[i].size()) + longest);
    }
    most_blocks = std::max(most_blocks, blocks);
  }
  models::KVCache cache(config, most_blocks, kBlockSize, torch::kFloat);

  auto start = Clock::now();
  for (int64_t first = 0; first < count; first += batch) {
    const int64_t last = std::min(count, first + batch), rows = last - first;
    const int64_t longest = *std::max_element(workload.output_lengths.begin() + first,
                                              workload.output_lengths.begin() + last);
    std::vector<std::vector<int64_t>> tables(rows);
    std::vector<int64_t> prompt_lengths, packed;
    int64_t next_block = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<int64_t>& prompt = workload.prompts[first + r];
      prompt_lengths.push_back(static_cast<int64_t>(prompt.size()));
      packed.insert(packed.end(), prompt.begin(), prompt.end());
      for (int64_t b = 0; b < blocks_for(prompt_lengths.back() + longest); ++b) {
        tables[r].push_back(next_block++);
      }
    }
    models::CacheStep prefill =
        cache.plan_step(tables, std::vector<int64_t>(rows, 0), prompt_lengths);
    std::vector<int64_t> last_rows(prefill.offsets.begin() + 1, prefill.offsets.end());
    for (int64_t& row : last_rows) --row;
    torch::Tensor hidden =
        model->forward_cached(torch::tensor(packed, torch::kLong), prefill, cache);
    torch::Tensor next =
        model->logits(hidden.index_select(0, torch::tensor(last_rows, torch::kLong))).argmax(-1);
    std::vector<int64_t> past = prompt_lengths;
    for (int64_t step = 1; step < longest; ++step) {
      models::CacheStep decode = cache.plan_step(tables, past, std::vector<int64_t>(rows, 1));
      next = model->logits(model->forward_cached(next, decode, cache)).argmax(-1);
      for (int64_t& length : past) ++length;
    }
  }
  return seconds_since(start);
}

void bench_continuous_batching(const BenchModel& model, int threads) {
  const Workload workload = lognormal_workload(256, /*seed=*/2024);
  const double static_seconds = run_static_batches(model.model_dir(), workload, kMaxRunning);
  engine::Engine engine(engine_options(model.model_dir(), threads));
  const double engine_seconds = run_engine(engine, workload);
  const engine::EngineStats stats = engine.stats();
  const double tokens = static_cast<double>(workload.total_output_tokens());
  print_line("rollout.qwen3_20m.continuous_batching.256_requests", "tokens_per_second",
             tokens / engine_seconds, "tokens/s", tokens / static_seconds,
             static_seconds / engine_seconds);
  // The ratio padding alone would give if every decode row cost the same (it does not: the
  // rows' attention grows with the batch's longest context, and prefill is the same for both).
  print_line("rollout.qwen3_20m.continuous_batching.256_requests", "static_padding_factor",
             static_padding_factor(workload, kMaxRunning), "rows/token", std::nullopt,
             std::nullopt);
  print_line("rollout.qwen3_20m.continuous_batching.256_requests", "prefix_cache_hit_rate",
             stats.cache_hit_rate(), "fraction", std::nullopt, std::nullopt);
  print_line("rollout.qwen3_20m.continuous_batching.256_requests", "engine_steps",
             static_cast<double>(stats.steps), "steps", std::nullopt, std::nullopt);
  print_line("rollout.qwen3_20m.continuous_batching.256_requests", "preemptions",
             static_cast<double>(stats.preemptions), "sequences", std::nullopt, std::nullopt);
}

void bench_steady_decode(const BenchModel& model, int threads) {
  const int64_t sequences = kMaxRunning, prompt_length = 16, output_length = 160;
  // The window measured: every sequence past its first few tokens, none finished yet.
  const int64_t window_start = 8, window_end = output_length - 8;
  std::mt19937_64 rng(7);
  engine::Engine engine(engine_options(model.model_dir(), threads));
  std::atomic<int64_t> finished{0};
  for (int64_t i = 0; i < sequences; ++i) {
    engine.submit(greedy_request(random_prompt(rng, prompt_length), output_length),
                  [&](const engine::GenerateOutput& output) {
                    if (output.finished) ++finished;
                  });
  }
  std::optional<std::pair<Clock::time_point, int64_t>> first, last;
  while (finished < sequences) {
    const int64_t generated = engine.stats().generated_tokens;
    const auto now = Clock::now();
    if (!first && generated >= sequences * window_start) first.emplace(now, generated);
    if (first && generated <= sequences * window_end) last.emplace(now, generated);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!first || !last || last->second <= first->second) {
    throw ooze::Error("rollout_bench: the steady decode window saw no progress");
  }
  const double seconds = std::chrono::duration<double>(last->first - first->first).count();
  const double tokens_per_second = (last->second - first->second) / seconds;
  const double mean_context = prompt_length + (window_start + window_end) / 2.0;
  const double flop_rate = tokens_per_second * decode_flops_per_token(model.config(), mean_context);
  const double matmul_rate = model_matmul_flop_rate(model.config(), sequences);
  print_line("rollout.qwen3_20m.steady_decode.batch_64", "tokens_per_second", tokens_per_second,
             "tokens/s", std::nullopt, std::nullopt);
  print_line("rollout.qwen3_20m.steady_decode.batch_64", "flop_rate", flop_rate, "FLOP/s",
             matmul_rate, flop_rate / matmul_rate);
}

struct SharingRun {
  int64_t computed_prefill_tokens = 0;
  int64_t peak_blocks_held = 0;
  double cache_hit_rate = 0;
};

// Runs `submit_all` on a fresh engine and samples its statistics until `expected` outputs
// have finished: the peak of blocks held by sequences (cached blocks nobody holds are free).
SharingRun run_sharing(
    const engine::EngineOptions& options, int64_t expected,
    const std::function<void(engine::Engine&, const engine::OutputCallback&)>& submit_all) {
  engine::Engine engine(options);
  std::atomic<int64_t> finished{0};
  submit_all(engine, [&](const engine::GenerateOutput& output) {
    if (output.finished) ++finished;
  });
  SharingRun run;
  while (finished < expected) {
    const engine::EngineStats stats = engine.stats();
    run.peak_blocks_held = std::max(run.peak_blocks_held, stats.total_blocks - stats.free_blocks);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  const engine::EngineStats stats = engine.stats();
  run.computed_prefill_tokens = stats.computed_prefill_tokens;
  run.cache_hit_rate = stats.cache_hit_rate();
  return run;
}

void bench_prefix_sharing(const BenchModel& model, int threads) {
  const int64_t samples = 8, prompt_length = 512, output_length = 32;
  std::mt19937_64 rng(11);
  const std::vector<int64_t> prompt = random_prompt(rng, prompt_length);
  auto sampled_request = [&](uint64_t seed) {
    engine::GenerateRequest request = greedy_request(prompt, output_length);
    request.sampling.temperature = 1.0;
    request.sampling.seed = seed;
    return request;
  };

  const SharingRun shared =
      run_sharing(engine_options(model.model_dir(), threads), samples,
                  [&](engine::Engine& engine, const engine::OutputCallback& on_update) {
                    engine::GenerateRequest request = sampled_request(5);
                    request.sampling.n = samples;
                    engine.submit(request, on_update);
                  });
  engine::EngineOptions no_prefix_cache = engine_options(model.model_dir(), threads);
  no_prefix_cache.enable_prefix_caching = false;
  const SharingRun separate =
      run_sharing(no_prefix_cache, samples,
                  [&](engine::Engine& engine, const engine::OutputCallback& on_update) {
                    for (int64_t i = 0; i < samples; ++i) {
                      engine.submit(sampled_request(5 + i), on_update);
                    }
                  });

  const int64_t bytes_per_block =
      models::KVCache(model.config(), 1, kBlockSize, torch::kFloat).bytes_per_block();
  const std::string name = "rollout.qwen3_20m.n8_prefix_sharing.prompt_512";
  print_line(
      name, "computed_prefill_tokens", shared.computed_prefill_tokens, "tokens",
      separate.computed_prefill_tokens,
      static_cast<double>(shared.computed_prefill_tokens) / separate.computed_prefill_tokens);
  const double shared_bytes = static_cast<double>(shared.peak_blocks_held) * bytes_per_block;
  const double separate_bytes = static_cast<double>(separate.peak_blocks_held) * bytes_per_block;
  print_line(name, "peak_kv_bytes", shared_bytes, "bytes", separate_bytes,
             shared_bytes / separate_bytes);
  // All but the first sample's prompt can come from the shared blocks: 7/8 at best.
  const double best_hit_rate = static_cast<double>(samples - 1) / samples;
  print_line(name, "prefix_cache_hit_rate", shared.cache_hit_rate, "fraction", best_hit_rate,
             shared.cache_hit_rate / best_hit_rate);
}

// Runs `requests` split over `clients` threads, each sending its share one after another
// through its own sender from make_sender (a sender returns the output's token count); returns
// the wall seconds.
double run_clients(
    int64_t clients, const std::vector<engine::GenerateRequest>& requests,
    const std::function<std::function<int64_t(const engine::GenerateRequest&)>()>& make_sender) {
  std::vector<std::function<int64_t(const engine::GenerateRequest&)>> senders;
  for (int64_t c = 0; c < clients; ++c) senders.push_back(make_sender());
  std::atomic<int64_t> generated{0};
  std::vector<std::thread> threads;
  std::mutex error_mutex;
  std::string error;
  auto start = Clock::now();
  for (int64_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        for (size_t i = c; i < requests.size(); i += clients) {
          generated += senders[c](requests[i]);
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mutex);
        error = e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const double seconds = seconds_since(start);
  if (!error.empty()) throw ooze::Error(error);
  int64_t expected = 0;
  for (const auto& request : requests) expected += request.sampling.max_new_tokens;
  if (generated != expected) {
    throw ooze::Error("rollout_bench: the clients got " + std::to_string(generated.load()) +
                      " tokens, " + std::to_string(expected) + " were asked for");
  }
  return seconds;
}

void bench_http_overhead(const BenchModel& model, int threads) {
  const int64_t count = 64, clients = 8, prompt_length = 64, output_length = 32;
  std::mt19937_64 rng(13);
  std::vector<engine::GenerateRequest> requests;
  for (int64_t i = 0; i < count; ++i) {
    requests.push_back(greedy_request(random_prompt(rng, prompt_length), output_length));
  }
  engine::Engine engine(engine_options(model.model_dir(), threads));
  serving::ServerOptions server_options;
  server_options.threads = 2;
  serving::EngineServer server(engine, server_options);

  auto in_process = [&] {
    return [&engine](const engine::GenerateRequest& request) {
      return engine.generate(request).front().completion_tokens();
    };
  };
  auto over_http = [&] {
    // One keep-alive connection per client thread, as a client library keeps one.
    auto client = std::make_shared<serving::HttpClient>(server.url());
    return [client](const engine::GenerateRequest& request) {
      const nlohmann::json body = {{"input_ids", request.input_ids},
                                   {"sampling_params",
                                    {{"temperature", request.sampling.temperature},
                                     {"max_new_tokens", request.sampling.max_new_tokens},
                                     {"ignore_eos", request.sampling.ignore_eos}}}};
      serving::HttpRequest post;
      post.method = "POST";
      post.target = "/generate";
      post.body = body.dump();
      const serving::HttpResponse response = client->send(post);
      if (!response.ok()) {
        throw ooze::Error("rollout_bench: POST /generate answered " +
                          std::to_string(response.status) + ": " + response.body);
      }
      const nlohmann::json reply = nlohmann::json::parse(response.body);
      return reply.at("meta_info").at("completion_tokens").get<int64_t>();
    };
  };
  // Alternating runs, best of two each; the prefix cache is flushed before every run so each
  // computes every prompt.
  double in_process_seconds = 1e30, http_seconds = 1e30;
  for (int round = 0; round < 2; ++round) {
    engine.flush_cache();
    in_process_seconds = std::min(in_process_seconds, run_clients(clients, requests, in_process));
    engine.flush_cache();
    http_seconds = std::min(http_seconds, run_clients(clients, requests, over_http));
  }
  server.stop();
  print_line("rollout.qwen3_20m.http_overhead.64_requests_8_clients", "wall_seconds", http_seconds,
             "s", in_process_seconds, http_seconds / in_process_seconds);
}

}  // namespace

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  print_line("rollout.setup", "intra_op_threads", threads, "threads", std::nullopt, std::nullopt);
  BenchModel model;
  print_line("rollout.setup", "matmul_parameters", matmul_parameters(model.config()), "parameters",
             std::nullopt, std::nullopt);
  bench_continuous_batching(model, threads);
  bench_steady_decode(model, threads);
  bench_prefix_sharing(model, threads);
  bench_http_overhead(model, threads);
  return 0;
}
