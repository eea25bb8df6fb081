// ooze's engine against llama.cpp on this machine's CPU, side by side in one run: the same
// Qwen3-0.6B-shaped model (random weights, fp32, the real Qwen3 vocabulary of 151,936 tokens,
// tied embeddings) in ooze's Hugging Face layout and, through models::export_gguf, as an F32
// GGUF that the prebuilt llama.cpp of npm's node-llama-cpp runs (tests/engine/llama_cpp_engine.mjs,
// with llama.cpp's defaults, as its users run it). Each engine gets the same intra-op threads.
//
//   prefill     one 512-token prompt: prompt tokens/s
//   decode_bN   N sequences decoding at once, each after an 8-token prompt: generated tokens/s,
//               the prompts' time left out (ooze: a run of 1 + K new tokens less a run of 1;
//               llama.cpp: its decode alone)
//
// Lines llama_cpp.<what>.t<threads>: value ooze's rate, baseline llama.cpp's, ratio ooze/llama.cpp
// (above 1: ooze is faster).
//
// Batches of up to 16 sequences run `rounds` times, llama.cpp and ooze in turn, and each engine's
// median counts: their runs last seconds, shorter than this machine's swings in load, which move
// a single run's rate by a third. Batch 64's runs last about a minute each and count once.
//
//   bench_llama_cpp_bench [--threads 1,2] [--batches 1,16,64] [--new-tokens 16] [--rounds 5]
//                         [--shape 0.6b|tiny]
//                         [--ooze-only] (to profile ooze: its rates on stderr, no lines)
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "core/load_time_settings.h"
#include "engine/engine.h"
#include "models/gguf_export.h"
#include "models/model_init.h"
#include "tests/support/llama_cpp_engine.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ooze::bench::print_line;
using Clock = std::chrono::steady_clock;

constexpr int64_t kPromptTokens = 512;
constexpr int64_t kDecodePromptTokens = 8;  // as llama_cpp_engine.mjs's decode prompts

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) values.push_back(std::stoll(item));
  return values;
}

std::vector<int64_t> random_ids(int64_t count, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> id(0, vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t& token : ids) token = id(rng);
  return ids;
}

// Seconds for `prompts` submitted at once, each generating `new_tokens` greedily.
double run_batch(ooze::engine::Engine& engine, const std::vector<std::vector<int64_t>>& prompts,
                 int64_t new_tokens) {
  std::mutex mutex;
  std::condition_variable done;
  size_t finished = 0;
  const Clock::time_point start = Clock::now();
  for (const std::vector<int64_t>& prompt : prompts) {
    ooze::engine::GenerateRequest request;
    request.input_ids = prompt;
    request.sampling.temperature = 0.0;
    request.sampling.max_new_tokens = new_tokens;
    request.sampling.ignore_eos = true;
    engine.submit(request, [&](const ooze::engine::GenerateOutput& output) {
      if (!output.finished) return;
      std::lock_guard<std::mutex> lock(mutex);
      ++finished;
      done.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return finished == prompts.size(); });
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr int64_t kLargestRoundedBatch = 16;

// Rates of one engine at one thread count; one per round at the batches that take rounds.
struct Rates {
  double prefill = 0;                             // prompt tokens/s
  std::map<int64_t, std::vector<double>> decode;  // batch -> generated tokens/s
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::string joined(const std::vector<double>& values) {
  std::string text;
  char number[32];
  for (double value : values) {
    std::snprintf(number, sizeof(number), text.empty() ? "%.2f" : " %.2f", value);
    text += number;
  }
  return text;
}

// ooze's engine at one thread count, kept for every measurement at that count.
class OozeEngine {
 public:
  OozeEngine(const std::string& model, int64_t threads, int64_t vocab) : vocab_(vocab) {
    at::set_num_threads(static_cast<int>(threads));
    ooze::engine::EngineOptions options;
    options.model_dir = model;
    options.intra_op_threads = threads;
    options.max_running_requests = 64;
    options.kv_cache_blocks = 256;  // 4,096 tokens: the longest case, 64 x 24, needs 1,536
    options.enable_prefix_caching = false;
    engine_ = std::make_unique<ooze::engine::Engine>(options);
    run_batch(*engine_, {random_ids(kPromptTokens, vocab_, 1)}, 1);  // warm-up
  }

  double prefill() {
    return static_cast<double>(kPromptTokens) /
           run_batch(*engine_, {random_ids(kPromptTokens, vocab_, 2)}, 1);
  }

  double decode(int64_t batch, int64_t new_tokens) {
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t b = 0; b < batch; ++b) {
      prompts.push_back(random_ids(kDecodePromptTokens, vocab_, static_cast<uint32_t>(100 + b)));
    }
    const double prompts_only = run_batch(*engine_, prompts, 1);
    const double with_decode = run_batch(*engine_, prompts, 1 + new_tokens);
    return static_cast<double>(batch * new_tokens) / std::max(with_decode - prompts_only, 1e-9);
  }

 private:
  int64_t vocab_;
  std::unique_ptr<ooze::engine::Engine> engine_;
};

// One run of llama.cpp (a process of its own): decode at `batch`, and the prefill when asked.
json llama_cpp_speed(const std::string& gguf, int64_t threads, int64_t batch, int64_t new_tokens,
                     int64_t vocab, bool prefill, const std::string& dir) {
  return ooze::testing::run_llama_cpp_engine("speed",
                                             {{"model", gguf},
                                              {"threads", threads},
                                              {"prompt_tokens", kPromptTokens},
                                              {"batch", batch},
                                              {"new_tokens", new_tokens},
                                              {"vocab", vocab},
                                              {"prefill", prefill}},
                                             dir);
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  std::vector<int64_t> threads = {1, 2}, batches = {1, 16, 64};
  int64_t new_tokens = 16;
  std::string shape = "0.6b";
  int64_t rounds = 5;
  bool ooze_only = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i], value = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--ooze-only") {
      ooze_only = true;
      --i;
    } else if (flag == "--threads") {
      threads = parse_list(value);
    } else if (flag == "--batches") {
      batches = parse_list(value);
    } else if (flag == "--rounds" && std::stoll(value) >= 1) {
      rounds = std::stoll(value);
    } else if (flag == "--new-tokens") {
      new_tokens = std::stoll(value);
    } else if (flag == "--shape" && (value == "0.6b" || value == "tiny")) {
      shape = value;
    } else {
      std::fprintf(stderr, "bench_llama_cpp_bench: unknown flag or value %s %s\n", flag.c_str(),
                   value.c_str());
      return 2;
    }
  }
  try {
    const ooze::bench::ScopedTempDir scratch("llama-cpp-bench");
    const std::string dir = scratch.path("");
    ooze::models::ModelInitOptions options;
    options.arch = "qwen3";
    options.tokenizer = "qwen3";
    options.tie_embeddings = true;
    options.out_dir = scratch.path("model");
    if (shape == "0.6b") {  // Qwen3-0.6B's config.json
      options.hidden_size = 1024;
      options.num_layers = 28;
      options.num_heads = 16;
      options.num_kv_heads = 8;
      options.head_dim = 128;
      options.intermediate_size = 3072;
    } else {
      options.hidden_size = 128;
      options.num_layers = 2;
      options.head_dim = 32;
      options.intermediate_size = 256;
    }
    const ooze::models::ModelConfig config = ooze::models::init_hf_model(options);
    const std::string gguf = scratch.path("model-f32.gguf");
    if (!ooze_only) ooze::models::export_gguf(options.out_dir, gguf, ooze::models::GgufType::kF32);
    std::fprintf(stderr, "llama_cpp_bench: %s, %lld parameters, fp32\n", shape.c_str(),
                 static_cast<long long>(config.num_parameters()));
    for (int64_t t : threads) {
      Rates llama, ooze;
      // Prefill and every batch once, llama.cpp first; its first run also measures the prefill.
      if (!ooze_only) {
        for (int64_t batch : batches) {
          const json run = llama_cpp_speed(gguf, t, batch, new_tokens, config.vocab_size,
                                           batch == batches.front(), dir);
          if (batch == batches.front()) llama.prefill = run["prefill_tokens_per_s"].get<double>();
          llama.decode[batch].push_back(run["decode_tokens_per_s"].get<double>());
        }
      }
      OozeEngine engine(options.out_dir, t, config.vocab_size);
      ooze.prefill = engine.prefill();
      for (int64_t batch : batches) ooze.decode[batch].push_back(engine.decode(batch, new_tokens));
      // The further rounds, the engines in turn (why: at the top).
      for (int64_t round = 1; round < rounds; ++round) {
        for (int64_t batch : batches) {
          if (batch > kLargestRoundedBatch) continue;
          if (!ooze_only) {
            llama.decode[batch].push_back(llama_cpp_speed(gguf, t, batch, new_tokens,
                                                          config.vocab_size, false,
                                                          dir)["decode_tokens_per_s"]
                                              .get<double>());
          }
          ooze.decode[batch].push_back(engine.decode(batch, new_tokens));
        }
      }
      if (ooze_only) {
        std::fprintf(stderr, "ooze, %lld threads: prefill %.2f tokens/s\n",
                     static_cast<long long>(t), ooze.prefill);
        for (const auto& [batch, rates] : ooze.decode) {
          std::fprintf(stderr, "  decode at batch %lld: %.2f tokens/s (median of %zu)\n",
                       static_cast<long long>(batch), median(rates), rates.size());
        }
        continue;
      }
      for (int64_t batch : batches) {
        if (batch > kLargestRoundedBatch) continue;
        std::fprintf(stderr,
                     "batch %lld at %lld threads, tokens/s by round: ooze %s, llama.cpp %s\n",
                     static_cast<long long>(batch), static_cast<long long>(t),
                     joined(ooze.decode[batch]).c_str(), joined(llama.decode[batch]).c_str());
      }
      const std::string suffix = ".t" + std::to_string(t);
      print_line("llama_cpp.prefill" + suffix, "prompt_tokens_per_second", ooze.prefill, "tokens/s",
                 llama.prefill, ooze.prefill / llama.prefill);
      for (int64_t batch : batches) {
        const double ours = median(ooze.decode.at(batch)), theirs = median(llama.decode.at(batch));
        print_line("llama_cpp.decode_b" + std::to_string(batch) + suffix,
                   "generated_tokens_per_second", ours, "tokens/s", theirs, ours / theirs);
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_llama_cpp_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
