// The GPU figures of scripts/gpu/check.sh, on a Qwen3-0.6B-shaped model (random weights, the
// Qwen vocabulary size of 151,936) in bf16 on one CUDA device:
//
//   gpu.memcpy                device-to-device copy, GB/s (read + write): the memory ceiling
//   gpu.matmul                [4096, hidden] x [hidden, intermediate] in the dtype: the compute
//                             ceiling
//   gpu.engine.prefill        8 prompts of 512 tokens through the Engine users run, tokens/s;
//                             ratio: the FLOP rate reached / gpu.matmul
//   gpu.engine.decode.batch_B B sequences of 128-token prompts decoding 64 tokens each, tokens/s;
//                             ratio: against reading every weight once per step at gpu.memcpy's
//                             rate (what bounds a decode step of few rows)
//   gpu.train.step            forward + backward + AdamW of 8 packed sequences of 512 tokens,
//                             tokens/s; ratio: the model FLOP utilisation (6 x parameters x
//                             tokens/s, plus attention) against gpu.matmul
//
//   bench_gpu_bench [--device cuda:0|cpu] [--shape qwen3-0.6b|tiny] [--dtype bfloat16|float32]
//
// Without a CUDA device it prints one line saying so and exits 0 (`make bench` runs it too);
// `--device cpu --shape tiny` runs every step on the CPU (check.sh --cpu-dry-run).
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "core/load_time_settings.h"
#include "engine/engine.h"
#include "models/model_init.h"
#include "models/transformer.h"

namespace {

using Clock = std::chrono::steady_clock;
using ooze::bench::print_line;
using ooze::bench::seconds_since;

struct Settings {
  std::string device = "cuda:0";
  std::string shape = "qwen3-0.6b";
  std::string dtype = "bfloat16";
  std::vector<int64_t> decode_batches = {1, 64, 256};
};

ooze::models::ModelInitOptions model_shape(const Settings& s, const std::string& dir) {
  ooze::models::ModelInitOptions o;
  o.arch = "qwen3";
  o.tokenizer = "byte";  // ids are all the bench needs; the vocabulary size is set below
  o.dtype = s.dtype;
  o.out_dir = dir;
  o.seed = 1;
  if (s.shape == "qwen3-0.6b") {  // Qwen3-0.6B's config.json
    o.hidden_size = 1024;
    o.num_layers = 28;
    o.num_heads = 16;
    o.num_kv_heads = 8;
    o.head_dim = 128;
    o.intermediate_size = 3072;
    o.vocab_size = ooze::models::kQwenPaddedVocabSize;
    o.tie_embeddings = true;
  } else if (s.shape == "tiny") {
    o.hidden_size = 128;
    o.num_layers = 2;
    o.num_heads = 4;
    o.num_kv_heads = 2;
  } else {
    throw ooze::ConfigError("--shape must be qwen3-0.6b or tiny, not '" + s.shape + "'");
  }
  return o;
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// The fastest of `reps` timed runs after one warm-up, the device drained around each.
double best_seconds(const torch::Device& device, int reps, const std::function<void()>& run) {
  run();
  synchronize(device);
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    run();
    synchronize(device);
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// Multiply-accumulates per token in the linear layers and the head.
double matmul_parameters(const ooze::models::ModelConfig& c) {
  const double h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
               kv = c.num_key_value_heads * c.head_dim, f = c.intermediate_size;
  return c.num_hidden_layers * (h * q + 2 * h * kv + q * h + 3 * h * f) + h * c.vocab_size;
}

// Causal attention FLOPs (scores and weighted sums) of one sequence of `length` tokens.
double attention_flops(const ooze::models::ModelConfig& c, double length) {
  return c.num_hidden_layers * 4.0 * c.num_attention_heads * c.head_dim * length * (length + 1) / 2;
}

// Wall seconds for the engine to finish `batch` requests of `prompt` tokens and `new_tokens`
// greedy tokens each, all submitted at once.
double engine_seconds(ooze::engine::Engine& engine, int64_t batch, int64_t prompt,
                      int64_t new_tokens, int64_t vocab) {
  std::vector<std::future<void>> done;
  std::vector<std::shared_ptr<std::promise<void>>> promises;
  const auto start = Clock::now();
  for (int64_t i = 0; i < batch; ++i) {
    ooze::engine::GenerateRequest r;
    for (int64_t t = 0; t < prompt; ++t) r.input_ids.push_back((i * 7919 + t * 104729) % vocab);
    r.sampling.temperature = 0.0;
    r.sampling.max_new_tokens = new_tokens;
    r.sampling.ignore_eos = true;
    auto promise = std::make_shared<std::promise<void>>();
    done.push_back(promise->get_future());
    engine.submit(std::move(r), [promise](const ooze::engine::GenerateOutput& out) {
      if (out.finished) promise->set_value();
    });
    promises.push_back(promise);
  }
  for (auto& f : done) f.wait();
  return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  Settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--device") {
      s.device = value;
    } else if (flag == "--shape") {
      s.shape = value;
    } else if (flag == "--dtype") {
      s.dtype = value;
    } else {
      std::fprintf(stderr, "bench_gpu_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const torch::Device device(s.device);
  if (device.is_cuda() && !torch::cuda::is_available()) {
    std::printf("{\"bench\": \"gpu\", \"skipped\": \"LibTorch sees no CUDA device\"}\n");
    return 0;
  }
  if (s.shape == "tiny") s.decode_batches = {1, 8};
  const auto dtype = s.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat;

  ooze::bench::ScopedTempDir scratch("ooze-gpu-bench");
  ooze::models::ModelInitOptions init = model_shape(s, scratch.path("model"));
  ooze::models::init_hf_model(init);
  const ooze::models::ModelConfig config = ooze::models::load_model_config(init.out_dir);
  const double params = matmul_parameters(config);
  const std::string tag = "gpu." + s.shape + "." + s.dtype;

  // The ceilings, measured first.
  double copy_bytes_per_second, matmul_flops;
  {
    torch::NoGradGuard no_grad;
    const int64_t bytes = device.is_cuda() ? (1LL << 30) : (64LL << 20);
    torch::Tensor from = torch::empty({bytes}, torch::dtype(torch::kUInt8).device(device));
    torch::Tensor to = torch::empty_like(from);
    const double seconds = best_seconds(device, 5, [&] { to.copy_(from); });
    copy_bytes_per_second = 2.0 * bytes / seconds;
    print_line(tag + ".memcpy", "bandwidth", copy_bytes_per_second / 1e9, "GB/s", std::nullopt,
               std::nullopt);
    const int64_t rows = 4096;
    torch::Tensor a = torch::randn({rows, config.hidden_size}, torch::dtype(dtype).device(device));
    torch::Tensor b = torch::randn({config.hidden_size, config.intermediate_size}, a.options());
    const double mm_seconds = best_seconds(device, 10, [&] { torch::mm(a, b); });
    matmul_flops = 2.0 * rows * config.hidden_size * config.intermediate_size / mm_seconds;
    print_line(tag + ".matmul", "flop_rate", matmul_flops / 1e12, "TFLOP/s", std::nullopt,
               std::nullopt);
  }

  {  // The engine users run: prefill, then decode at each batch.
    ooze::engine::EngineOptions o;
    o.model_dir = init.out_dir;
    o.device = s.device;
    o.dtype = s.dtype;
    o.max_running_requests = s.decode_batches.back();
    o.kv_cache_memory_mb = device.is_cuda() ? 16384 : 256;
    o.chunked_prefill_size = 4096;
    o.block_size = 16;
    o.enable_prefix_caching = false;  // every timed run computes its prompts
    ooze::engine::Engine engine(o);

    const int64_t prompts = 8, prompt_length = 512;
    engine_seconds(engine, prompts, prompt_length, 1, config.vocab_size);  // warm-up
    const double prefill = engine_seconds(engine, prompts, prompt_length, 1, config.vocab_size);
    const double prefill_flops =
        prompts * (2.0 * params * prompt_length + attention_flops(config, prompt_length));
    print_line(tag + ".engine.prefill", "tokens_per_second", prompts * prompt_length / prefill,
               "tokens/s", matmul_flops / 1e12, prefill_flops / prefill / matmul_flops);

    const double weight_bytes = params * (s.dtype == "bfloat16" ? 2.0 : 4.0);
    for (int64_t batch : s.decode_batches) {
      const int64_t prompt = 128, decoded = 64;
      engine_seconds(engine, batch, prompt, 2, config.vocab_size);  // warm-up
      // The decode steps alone: a run of `decoded` more tokens, less the same run stopped
      // right after its prefill.
      const double first = engine_seconds(engine, batch, prompt, 1, config.vocab_size);
      const double whole = engine_seconds(engine, batch, prompt, decoded + 1, config.vocab_size);
      const double tokens_per_second = batch * decoded / (whole - first);
      // Each step reads every weight once: at most (bytes the memory moves a second, as the
      // copy measured them) / (weight bytes) steps a second.
      const double step_ceiling = copy_bytes_per_second / weight_bytes;
      print_line(tag + ".engine.decode.batch_" + std::to_string(batch), "tokens_per_second",
                 tokens_per_second, "tokens/s", batch * step_ceiling,
                 tokens_per_second / (batch * step_ceiling));
    }
  }

  {  // A training step of the same model: forward, cross-entropy, backward, AdamW.
    ooze::models::TransformerModel model(config, dtype);
    model->init_weights(1);
    model->to(device);
    torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-5));
    const int64_t sequences = device.is_cuda() ? 8 : 2, length = 512, tokens = sequences * length;
    torch::Tensor ids =
        torch::randint(config.vocab_size, {tokens}, torch::dtype(torch::kLong).device(device));
    torch::Tensor positions = torch::arange(length, ids.options()).repeat({sequences});
    torch::Tensor cu_seqlens =
        torch::arange(0, tokens + 1, length, torch::dtype(torch::kInt).device(device));
    const double seconds = best_seconds(device, 3, [&] {
      optimizer.zero_grad();
      torch::Tensor logits = model->logits(model->forward(ids, positions, cu_seqlens));
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          logits.slice(0, 0, tokens - 1).to(torch::kFloat), ids.slice(0, 1));
      loss.backward();
      optimizer.step();
    });
    const double flops =
        3.0 * (2.0 * params * tokens + sequences * attention_flops(config, length));
    print_line(tag + ".train.step", "tokens_per_second", tokens / seconds, "tokens/s",
               matmul_flops / 1e12, flops / seconds / matmul_flops);
  }
  return 0;
}
