// Weight-sync bucket throughput: a Qwen3-0.6B-shaped set of bf16 weights (~600M parameters,
// ~1.2 GB) planned into 512 MiB buckets, packed into one reused bucket buffer and unpacked,
// against one memcpy of the same number of bytes measured in the same run. One intra-op
// thread, as each trainer and engine process runs. Best of several repetitions.
//
//   pack              bytes packed per second (plan_buckets + pack_into over every bucket)
//   pack_unpack       the same plus unpack_bucket (views, so close to pack)
//   pack_unpack_load  plus copying every unpacked tensor into its destination, as an engine's
//                     load_weights does: two copies of every byte, so ~0.5 of memcpy is ideal
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "weight_sync/bucket.h"

namespace {

using ooze::weight_sync::BucketManifest;
using ooze::weight_sync::TensorSpec;

using ooze::bench::seconds_since;

// Qwen3-0.6B's tensors in Hugging Face order (tied embeddings, so no lm_head).
std::vector<TensorSpec> qwen3_0_6b_specs() {
  const int64_t hidden = 1024, heads = 16, kv_heads = 8, head_dim = 128, ffn = 3072;
  const int64_t vocab = 151936, layers = 28;
  const at::ScalarType bf16 = at::kBFloat16;
  std::vector<TensorSpec> specs = {{"model.embed_tokens.weight", bf16, {vocab, hidden}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    specs.push_back({p + "input_layernorm.weight", bf16, {hidden}});
    specs.push_back({p + "mlp.down_proj.weight", bf16, {hidden, ffn}});
    specs.push_back({p + "mlp.gate_proj.weight", bf16, {ffn, hidden}});
    specs.push_back({p + "mlp.up_proj.weight", bf16, {ffn, hidden}});
    specs.push_back({p + "post_attention_layernorm.weight", bf16, {hidden}});
    specs.push_back({p + "self_attn.k_norm.weight", bf16, {head_dim}});
    specs.push_back({p + "self_attn.k_proj.weight", bf16, {kv_heads * head_dim, hidden}});
    specs.push_back({p + "self_attn.o_proj.weight", bf16, {hidden, heads * head_dim}});
    specs.push_back({p + "self_attn.q_norm.weight", bf16, {head_dim}});
    specs.push_back({p + "self_attn.q_proj.weight", bf16, {heads * head_dim, hidden}});
    specs.push_back({p + "self_attn.v_proj.weight", bf16, {kv_heads * head_dim, hidden}});
  }
  specs.push_back({"model.norm.weight", bf16, {hidden}});
  return specs;
}

}  // namespace

int main() {
  using ooze::bench::print_line;
  at::set_num_threads(1);
  constexpr int kRepetitions = 3;
  const int64_t bucket_bytes = ooze::weight_sync::kDefaultUpdateWeightBufferSize;

  const std::vector<TensorSpec> specs = qwen3_0_6b_specs();
  int64_t params = 0, total_bytes = 0;
  for (const TensorSpec& spec : specs) {
    params += spec.numel();
    total_bytes += spec.nbytes();
  }

  // Sources (the trainer's gathered weights), and destinations (the engine's parameters) laid
  // out in one flat buffer that also serves as the memcpy baseline's target.
  std::vector<at::Tensor> sources;
  for (size_t i = 0; i < specs.size(); ++i) {
    sources.push_back(at::empty(specs[i].shape, at::kBFloat16).fill_(0.5 + 0.001 * i));
  }
  at::Tensor flat_source = at::full({total_bytes}, 3, at::kByte);
  at::Tensor flat_target = at::zeros({total_bytes}, at::kByte);
  std::vector<at::Tensor> targets;
  int64_t cursor = 0;
  for (const TensorSpec& spec : specs) {
    targets.push_back(
        flat_target.narrow(0, cursor, spec.nbytes()).view(spec.dtype).view(spec.shape));
    cursor += spec.nbytes();
  }
  int64_t largest_bucket = 0;
  for (const BucketManifest& bucket : ooze::weight_sync::plan_buckets(specs, bucket_bytes)) {
    largest_bucket = std::max(largest_bucket, bucket.nbytes);
  }
  at::Tensor arena = at::zeros({largest_bucket}, at::kByte);  // one buffer, reused per bucket

  double best_memcpy = 1e30, best_plan = 1e30, best_pack = 1e30, best_unpack = 1e30,
         best_load = 1e30;
  size_t buckets = 0;
  for (int rep = 0; rep <= kRepetitions; ++rep) {  // rep 0 warms up (page faults)
    auto start = std::chrono::steady_clock::now();
    std::memcpy(flat_target.data_ptr(), flat_source.data_ptr(), total_bytes);
    const double memcpy_s = seconds_since(start);

    start = std::chrono::steady_clock::now();
    const std::vector<BucketManifest> plan = ooze::weight_sync::plan_buckets(specs, bucket_bytes);
    const double plan_s = seconds_since(start);
    buckets = plan.size();

    double pack_s = 0, unpack_s = 0, load_s = 0;
    size_t next = 0;  // plan_buckets keeps HF order across buckets; all bf16, so within too
    for (const BucketManifest& bucket : plan) {
      std::vector<at::Tensor> inputs(sources.begin() + next,
                                     sources.begin() + next + bucket.entries.size());
      at::Tensor buffer = arena.narrow(0, 0, bucket.nbytes);
      start = std::chrono::steady_clock::now();
      ooze::weight_sync::pack_into(bucket, inputs, buffer);
      pack_s += seconds_since(start);

      start = std::chrono::steady_clock::now();
      auto unpacked = ooze::weight_sync::unpack_bucket(bucket, buffer);
      unpack_s += seconds_since(start);

      start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < unpacked.size(); ++i) targets[next + i].copy_(unpacked[i].second);
      load_s += seconds_since(start);
      next += bucket.entries.size();
    }
    if (next != specs.size() || !at::equal(targets.back(), sources.back()) ||
        !at::equal(targets[0], sources[0])) {
      std::fprintf(stderr, "weight_sync_bench: unpacked weights differ from the sources\n");
      return 1;
    }
    if (rep == 0) continue;
    best_memcpy = std::min(best_memcpy, memcpy_s);
    best_plan = std::min(best_plan, plan_s);
    best_pack = std::min(best_pack, plan_s + pack_s);
    best_unpack = std::min(best_unpack, plan_s + pack_s + unpack_s);
    best_load = std::min(best_load, plan_s + pack_s + unpack_s + load_s);
  }

  const double gb = static_cast<double>(total_bytes) / 1e9;
  const double memcpy_gbps = gb / best_memcpy;
  const std::string name = "weight_sync_bucket";
  std::fprintf(stderr, "%lld parameters, %.3f GB bf16, %zu buckets of at most %lld bytes\n",
               static_cast<long long>(params), gb, buckets, static_cast<long long>(bucket_bytes));
  print_line(name, "memcpy_bf16_600M", memcpy_gbps, "GB/s", std::nullopt, std::nullopt);
  print_line(name, "pack_bf16_600M_512MiB", gb / best_pack, "GB/s", memcpy_gbps,
             gb / best_pack / memcpy_gbps);
  print_line(name, "pack_unpack_bf16_600M_512MiB", gb / best_unpack, "GB/s", memcpy_gbps,
             gb / best_unpack / memcpy_gbps);
  print_line(name, "pack_unpack_load_bf16_600M_512MiB", gb / best_load, "GB/s", memcpy_gbps,
             gb / best_load / memcpy_gbps);
  print_line(name, "plan_600M", best_plan * 1e3, "ms", std::nullopt, std::nullopt);
  return 0;
}
