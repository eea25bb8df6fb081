// Forward and decode speed of a ~20M-parameter Qwen3-shaped model on this machine's CPU.
//
//   forward: one packed batch of T = 4096 tokens (8 sequences of 512), tokens/s
//   decode:  batch 1, 16 and 64, each sequence prefilled with a 64-token prompt, then 32 steps,
//            through the paged KV cache (KVCache::plan_step + forward_cached)
//
// Each line's `ratio` compares the FLOP rate the model reaches (2 * matmul parameters per token
// plus attention) with the FLOP rate of a plain fp32 matmul of the model's own shapes measured
// in the same run: how close to the hardware the model runs.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/load_time_settings.h"
#include "core/timer.h"
#include "models/kv_cache.h"
#include "models/transformer.h"

using Clock = std::chrono::steady_clock;
namespace models = ooze::models;
using ooze::models::KVCache;
using ooze::models::ModelConfig;
using ooze::models::TransformerModel;

namespace {

using ooze::seconds_since;

ModelConfig bench_config() {
  ModelConfig config;
  config.model_type = "qwen3";
  config.vocab_size = 4096;
  config.hidden_size = 512;
  config.intermediate_size = 1536;
  config.num_hidden_layers = 6;
  config.num_attention_heads = 8;
  config.num_key_value_heads = 4;
  config.head_dim = 64;
  config.max_position_embeddings = 8192;
  config.tie_word_embeddings = true;
  config.torch_dtype = "float32";
  config.validate();
  return config;
}

// Multiply-accumulate parameters touched per token: every linear layer plus the head.
double matmul_parameters(const ModelConfig& c) {
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
               kv = c.num_key_value_heads * c.head_dim, f = c.intermediate_size;
  return c.num_hidden_layers * (h * q + 2 * h * kv + q * h + 3 * h * f) + h * c.vocab_size;
}

// Scores and weighted sums of causal attention for one sequence of `length` tokens.
double attention_flops(const ModelConfig& c, double length) {
  return c.num_hidden_layers * 2.0 * 2.0 * c.num_attention_heads * c.head_dim * length *
         (length + 1) / 2;
}

double best_of(int reps, const std::function<void()>& run) {
  run();  // warm-up
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    run();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// FLOP/s of [tokens, hidden] x [hidden, intermediate] in fp32: the model's largest matmul.
double matmul_flop_rate(const ModelConfig& c, int64_t tokens) {
  torch::Tensor a = torch::randn({tokens, c.hidden_size});
  torch::Tensor b = torch::randn({c.hidden_size, c.intermediate_size});
  double seconds = best_of(5, [&] { torch::mm(a, b); });
  return 2.0 * tokens * c.hidden_size * c.intermediate_size / seconds;
}

void print_line(const char* bench, double tokens_per_second, double flops_per_token_rate,
                double peak) {
  std::printf(
      "{\"bench\": \"%s\", \"metric\": \"tokens_per_second\", \"value\": %.1f, "
      "\"unit\": \"tokens/s\", \"baseline\": %.3e, \"ratio\": %.4f}\n",
      bench, tokens_per_second, peak, flops_per_token_rate / peak);
  std::fflush(stdout);
}

}  // namespace

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  torch::NoGradGuard no_grad;
  const ModelConfig config = bench_config();
  TransformerModel model(config);
  model->init_weights(1);
  const double params = matmul_parameters(config);

  {  // packed forward, T = 4096
    const int64_t sequences = 8, length = 512, tokens = sequences * length;
    torch::Tensor ids = torch::randint(config.vocab_size, {tokens}, torch::kLong);
    torch::Tensor positions = torch::arange(length, torch::kLong).repeat({sequences});
    torch::Tensor cu_seqlens = torch::arange(0, tokens + 1, length, torch::kInt);
    double seconds = best_of(3, [&] { model->logits(model->forward(ids, positions, cu_seqlens)); });
    double flops = 2.0 * params * tokens + sequences * attention_flops(config, length);
    print_line("models.qwen3_20m.forward.packed_4096", tokens / seconds, flops / seconds,
               matmul_flop_rate(config, tokens));
  }

  for (int64_t batch : {1, 16, 64}) {  // decode
    const int64_t prompt = 64, steps = 32, block_size = 16;
    // Each sequence owns the consecutive blocks that hold its prompt and every decoded token.
    const int64_t blocks_per_sequence = (prompt + steps + block_size - 1) / block_size;
    KVCache cache(config, batch * blocks_per_sequence, block_size, torch::kFloat);
    std::vector<std::vector<int64_t>> tables(batch);
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t b = 0; b < blocks_per_sequence; ++b) {
        tables[i].push_back(i * blocks_per_sequence + b);
      }
    }
    torch::Tensor prompts = torch::randint(config.vocab_size, {batch * prompt}, torch::kLong);
    models::CacheStep prefill = cache.plan_step(tables, std::vector<int64_t>(batch, 0),
                                                std::vector<int64_t>(batch, prompt));
    torch::Tensor last_rows = torch::arange(prompt - 1, batch * prompt, prompt, torch::kLong);
    torch::Tensor next =
        model->logits(model->forward_cached(prompts, prefill, cache).index_select(0, last_rows))
            .argmax(-1);
    auto start = Clock::now();
    for (int64_t step = 0; step < steps; ++step) {
      // Planning is part of every decode step's cost, as in the engine.
      models::CacheStep decode = cache.plan_step(tables, std::vector<int64_t>(batch, prompt + step),
                                                 std::vector<int64_t>(batch, 1));
      next = model->logits(model->forward_cached(next, decode, cache)).argmax(-1);
    }
    double seconds = seconds_since(start);
    double context = prompt + steps / 2.0;  // mean attended length
    double flops = batch * steps *
                   (2.0 * params + 2.0 * 2.0 * config.num_hidden_layers *
                                       config.num_attention_heads * config.head_dim * context);
    char name[64];
    std::snprintf(name, sizeof(name), "models.qwen3_20m.decode.batch_%lld",
                  static_cast<long long>(batch));
    print_line(name, batch * steps / seconds, flops / seconds, matmul_flop_rate(config, batch));
  }
  return 0;
}
