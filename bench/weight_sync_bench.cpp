// Weight-sync throughput, from bucket packing alone to whole syncs between real processes. One
// intra-op thread in every process, as each trainer and engine process runs. Every baseline is
// measured in the same run; every time is the best of several repetitions after a warm-up.
//
// weight_sync_bucket: a Qwen3-0.6B-shaped set of bf16 weights (~600M parameters, ~1.2 GB)
// planned into 512 MiB buckets, packed into one reused bucket buffer and unpacked, against one
// memcpy of the same number of bytes.
//
//   pack              bytes packed per second (plan_buckets + pack_into over every bucket)
//   pack_unpack       the same plus unpack_bucket (views, so close to pack)
//   pack_unpack_load  plus copying every unpacked tensor into its destination, as an engine's
//                     load_weights does: two copies of every byte, so ~0.5 of memcpy is ideal
//
// Whole syncs (every sync's times also on stderr): a random Qwen3-shaped model (hidden 1024, 20
// layers, vocab 151936, tied embeddings: ~470M parameters, ~0.94 GB in bf16) written once as a
// Hugging Face directory. This process trains it as an FSDP model of world size 1 (fp32 master
// weights) and syncs it with WeightSyncer to RolloutEngine actors started from that directory in
// bf16, Slime's usual setting. GB/s = the bf16 bytes of one sync (WeightSyncReport::bytes) over its
// seconds. First the trainer's weights change and one sync runs with --check-weight-sync, after
// which each engine must generate a token under the new version, so a broken sync fails the bench
// instead of printing a number; the timed syncs run without the check, as in training. The
// baselines run before the engines start and again after they are gone, the best of both counting,
// so a burst of other work on the machine cannot skew every ratio.
//
// weight_sync_colocated     one engine on this node, in place: the engine keeps its parameters in
//                           shared memory and the trainer writes its shards there, converted to
//                           the engine's dtype (trainer/shared_parameter_writer.h). Baseline: a
//                           memcpy of the same bytes, the bound of any copy here. The sync reads
//                           fp32 and writes bf16 once. Also the best sync's split
//                           (WeightSyncReport): _pack (the writing), _transfer, _control (begin,
//                           the ranks' agreement, finish), in ms. Then the same into an fp32
//                           engine (sync_fp32_*, against a memcpy of the fp32 bytes): one copy.
// weight_sync_disaggregated two engines, buckets by Gloo broadcast from this process. Baseline:
//                           a raw Gloo broadcast of the same bytes from this process to 2 others
//                           (the slowest rank's time), itself also printed against memcpy. What
//                           the sync adds to that transport is packing, the engines' loads and
//                           its control calls; same split as above. Then the same with 64 MiB
//                           buckets, whose first packing and last load are shorter.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <malloc.h>
#include <stdlib.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "bench/bench_support.h"
#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"
#include "core/load_time_settings.h"
#include "fsdp/fsdp_transformer.h"
#include "models/hf_checkpoint.h"
#include "models/model_init.h"
#include "serving/rollout_engine_actor.h"
#include "trainer/weight_syncer.h"
#include "weight_sync/bucket.h"
#include "core/shared_memory_segment.h"

namespace {

using ooze::bench::print_line;
using ooze::bench::seconds_since;
using ooze::serving::RolloutEngine;
using ooze::trainer::EnginePlacement;
using ooze::trainer::WeightSyncer;
using ooze::trainer::WeightSyncReport;
using ooze::weight_sync::BucketManifest;
using ooze::weight_sync::TensorSpec;
using Clock = std::chrono::steady_clock;
using EngineHandle = ooze::actors::ActorHandle<RolloutEngine>;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int kRepetitions = 3;
// Of the whole syncs and their baselines: cheap enough, and a best of more resists the noise of
// other processes on a small machine.
constexpr int kSyncRepetitions = 8;

// Thrown when a measurement cannot be trusted (a sync that did not deliver, a broadcast that
// lost bytes): the bench fails instead of printing a number.
class BenchFailure : public ooze::Error {
 public:
  using Error::Error;
};

// ---------------------------------------------------------------------------------------------
// Bucket packing alone.

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

void bench_bucket_packing() {
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
    auto start = Clock::now();
    std::memcpy(flat_target.data_ptr(), flat_source.data_ptr(), total_bytes);
    const double memcpy_s = seconds_since(start);

    start = Clock::now();
    const std::vector<BucketManifest> plan = ooze::weight_sync::plan_buckets(specs, bucket_bytes);
    const double plan_s = seconds_since(start);
    buckets = plan.size();

    double pack_s = 0, unpack_s = 0, load_s = 0;
    size_t next = 0;  // plan_buckets keeps HF order across buckets; all bf16, so within too
    for (const BucketManifest& bucket : plan) {
      std::vector<at::Tensor> inputs(sources.begin() + next,
                                     sources.begin() + next + bucket.entries.size());
      at::Tensor buffer = arena.narrow(0, 0, bucket.nbytes);
      start = Clock::now();
      ooze::weight_sync::pack_into(bucket, inputs, buffer);
      pack_s += seconds_since(start);

      start = Clock::now();
      auto unpacked = ooze::weight_sync::unpack_bucket(bucket, buffer);
      unpack_s += seconds_since(start);

      start = Clock::now();
      for (size_t i = 0; i < unpacked.size(); ++i) targets[next + i].copy_(unpacked[i].second);
      load_s += seconds_since(start);
      next += bucket.entries.size();
    }
    if (next != specs.size() || !at::equal(targets.back(), sources.back()) ||
        !at::equal(targets[0], sources[0])) {
      throw BenchFailure("weight_sync_bench: unpacked weights differ from the sources");
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
}

// ---------------------------------------------------------------------------------------------
// Baselines of the syncs.

// Best seconds of one memcpy of `bytes`.
double memcpy_seconds(int64_t bytes) {
  at::Tensor source = at::full({bytes}, 3, at::kByte), target = at::zeros({bytes}, at::kByte);
  double best = 1e30;
  for (int rep = 0; rep <= kSyncRepetitions; ++rep) {  // rep 0 warms up (page faults)
    const auto start = Clock::now();
    std::memcpy(target.data_ptr(), source.data_ptr(), static_cast<size_t>(bytes));
    if (rep > 0) best = std::min(best, seconds_since(start));
  }
  return best;
}

constexpr int kBroadcastWorld = 3;  // the root and two receivers, as the trainer and 2 engines
constexpr uint8_t kBroadcastByte = 7;

// Every rank's part of the raw broadcast baseline: one warm-up broadcast of `bytes` from rank 0,
// then kSyncRepetitions timed ones, each from a barrier; returns the best of the slowest rank's
// times. Receivers check that the bytes arrived.
double time_broadcasts(ooze::comm::Communicator& comm, int64_t bytes) {
  at::Tensor buffer = at::full({bytes}, comm.rank() == 0 ? kBroadcastByte : 0, at::kByte);
  double best = 1e30;
  for (int rep = 0; rep <= kSyncRepetitions; ++rep) {
    if (comm.rank() != 0) buffer.zero_();
    comm.barrier();
    const auto start = Clock::now();
    comm.broadcast(buffer, 0);
    at::Tensor slowest = at::full({1}, seconds_since(start), at::kDouble);
    comm.all_reduce(slowest, ooze::comm::ReduceOp::MAX);
    if (rep > 0) best = std::min(best, slowest.item<double>());
    const uint8_t* data = buffer.data_ptr<uint8_t>();
    if (data[0] != kBroadcastByte || data[bytes / 2] != kBroadcastByte ||
        data[bytes - 1] != kBroadcastByte) {
      throw BenchFailure("raw broadcast: rank " + std::to_string(comm.rank()) +
                         " did not receive the root's bytes");
    }
  }
  return best;
}

// A receiver of the raw broadcast baseline, in a process of its own.
int run_broadcast_rank(int rank, int port, int64_t bytes) {
  at::set_num_threads(1);
  try {
    auto store = std::make_shared<ooze::comm::TcpStore>("127.0.0.1", port, rank, false,
                                                        std::chrono::seconds(60));
    auto comm = ooze::comm::make_gloo_communicator(store, rank, kBroadcastWorld, "bench-broadcast",
                                                   std::chrono::seconds(120));
    time_broadcasts(*comm, bytes);
    comm->barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "broadcast rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}

// Best seconds of a raw Gloo broadcast of `bytes` from this process (rank 0) to two processes
// started from this program.
double raw_broadcast_seconds(int64_t bytes) {
  ooze::testing::RankProcessOptions options = ooze::bench::rank_process_options();
  options.absent_ranks = {0};  // this process
  ooze::testing::RankProcesses receivers(
      kBroadcastWorld,
      [&](int rank, int port) {
        return std::vector<std::string>{"/proc/self/exe", "--broadcast-rank", std::to_string(rank),
                                        std::to_string(port), std::to_string(bytes)};
      },
      options);
  double seconds = 0;
  std::string failure;
  try {
    auto store = std::make_shared<ooze::comm::TcpStore>("127.0.0.1", receivers.port(), 0, false,
                                                        std::chrono::seconds(60));
    auto comm = ooze::comm::make_gloo_communicator(store, 0, kBroadcastWorld, "bench-broadcast",
                                                   std::chrono::seconds(120));
    seconds = time_broadcasts(*comm, bytes);
    comm->barrier();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const ooze::testing::RankGroupResult run = receivers.wait();
  if (!run.all_passed()) failure += " (a receiver failed: " + run.failures() + ")";
  if (!failure.empty()) throw BenchFailure("raw broadcast baseline: " + failure);
  return seconds;
}

// ---------------------------------------------------------------------------------------------
// Whole syncs.

// Qwen3-0.6B's shape with 20 layers instead of 28 (~470M parameters: the trainer, two engines
// and their bucket buffers then fit in ~9 GB), random bf16 weights, and the byte tokenizer (the
// engine needs one; its ids are all below the padded vocabulary).
ooze::models::ModelConfig write_model(const std::string& dir) {
  ooze::models::ModelInitOptions options;
  options.arch = "qwen3";
  options.hidden_size = 1024;
  options.num_layers = 20;
  options.num_heads = 16;
  options.num_kv_heads = 8;
  options.head_dim = 128;
  options.intermediate_size = 3072;
  options.vocab_size = ooze::models::kQwenPaddedVocabSize;
  options.tie_embeddings = true;
  options.dtype = "bfloat16";
  options.tokenizer = "byte";
  options.out_dir = dir;
  options.seed = 1;
  return ooze::models::init_hf_model(options);
}

ooze::engine::EngineOptions engine_options(const std::string& model_dir, const std::string& dtype) {
  ooze::engine::EngineOptions options;
  options.model_dir = model_dir;
  options.dtype = dtype;
  options.kv_cache_blocks = 16;  // generation is only the correctness check here
  options.block_size = 16;
  options.intra_op_threads = 1;
  options.seed = 1;
  return options;
}

std::vector<EngineHandle> spawn_engines(int count, const std::string& model_dir,
                                        const std::string& dtype = "bfloat16") {
  std::vector<EngineHandle> engines;
  for (int i = 0; i < count; ++i) {
    engines.push_back(ooze::actors::spawn<RolloutEngine>(
        ooze::serving::rollout_engine_actor_options(), engine_options(model_dir, dtype)));
  }
  for (const EngineHandle& engine : engines) engine.wait_ready(std::chrono::minutes(5));
  return engines;
}

// A training step's worth of change to every fp32 master weight (enough to change its bf16
// value in most places), so that a sync which delivered nothing fails the checksum check.
void change_trainer_weights(ooze::fsdp::FsdpTransformer& trainer) {
  torch::NoGradGuard no_grad;
  ooze::fsdp::FullyShardedModule& sharded = trainer.sharded();
  for (size_t u = 0; u < sharded.num_units(); ++u) sharded.unit(u).master_shard().add_(1e-3);
}

// One sync with --check-weight-sync (every engine's per-tensor checksums equal the trainer's),
// then each engine generates one greedy token, which must carry the new version.
void checked_sync(ooze::fsdp::FsdpTransformer& trainer, const std::vector<EngineHandle>& engines,
                  EnginePlacement placement, int64_t version) {
  change_trainer_weights(trainer);
  ooze::trainer::WeightSyncOptions options;
  options.check = true;
  WeightSyncer syncer(trainer.sharded(), at::kBFloat16, engines, placement, options,
                      "weight-sync-bench-check");
  const WeightSyncReport report = syncer.sync(version);
  if (report.engines != static_cast<int64_t>(engines.size())) {
    throw BenchFailure("the checked sync reached " + std::to_string(report.engines) + " of " +
                       std::to_string(engines.size()) + " engines");
  }
  ooze::engine::GenerateRequest request;
  request.input_ids = {84, 104, 101};
  request.sampling.temperature = 0.0;
  request.sampling.max_new_tokens = 1;
  request.sampling.ignore_eos = true;
  for (size_t i = 0; i < engines.size(); ++i) {
    const auto outputs = engines[i].call(&RolloutEngine::generate, request).get();
    const ooze::engine::GenerateOutput& out = outputs.at(0);
    if (out.output_ids.size() != 1 || out.weight_version != version) {
      throw BenchFailure("engine " + std::to_string(i) + " generated " +
                         std::to_string(out.output_ids.size()) + " tokens under weight version " +
                         std::to_string(out.weight_version) + " after the sync to version " +
                         std::to_string(version));
    }
  }
}

std::string mib_name(int64_t bytes) {
  return bytes % (1024 * kMiB) == 0 ? std::to_string(bytes / (1024 * kMiB)) + "GiB"
                                    : std::to_string(bytes / kMiB) + "MiB";
}

// The best of kSyncRepetitions syncs after a warm-up one (which maps the shared buffers or forms
// the broadcast group), each to the next version; *version is the engines' current one.
WeightSyncReport best_sync(ooze::fsdp::FsdpTransformer& trainer,
                           const std::vector<EngineHandle>& engines, EnginePlacement placement,
                           int64_t bucket_bytes, int64_t* version,
                           at::ScalarType engine_dtype = at::kBFloat16) {
  ooze::trainer::WeightSyncOptions options;
  options.update_weight_buffer_size = bucket_bytes;
  WeightSyncer syncer(trainer.sharded(), engine_dtype, engines, placement, options,
                      "weight-sync-bench");
  WeightSyncReport best;
  best.seconds = 1e30;
  for (int rep = 0; rep <= kSyncRepetitions; ++rep) {
    const WeightSyncReport report = syncer.sync(++*version);
    std::fprintf(stderr,
                 "%s %s sync %lld, %lld buckets of at most %s: %.0f ms = pack %.0f + transfer "
                 "%.0f + control %.0f\n",
                 rep == 0 ? "warm-up" : "timed  ",
                 placement == EnginePlacement::kColocated ? "colocated" : "disaggregated",
                 static_cast<long long>(report.version), static_cast<long long>(report.buckets),
                 mib_name(bucket_bytes).c_str(), report.seconds * 1e3, report.pack_seconds * 1e3,
                 report.transfer_seconds * 1e3, report.control_seconds * 1e3);
    if (report.engines != static_cast<int64_t>(engines.size())) {
      throw BenchFailure("a sync reached " + std::to_string(report.engines) + " of " +
                         std::to_string(engines.size()) + " engines");
    }
    if (rep > 0 && report.seconds < best.seconds) best = report;
  }
  return best;
}

void print_split(const std::string& bench, const std::string& prefix,
                 const WeightSyncReport& report) {
  print_line(bench, prefix + "_total", report.seconds * 1e3, "ms", std::nullopt, std::nullopt);
  print_line(bench, prefix + "_pack", report.pack_seconds * 1e3, "ms", std::nullopt, std::nullopt);
  print_line(bench, prefix + "_transfer", report.transfer_seconds * 1e3, "ms", std::nullopt,
             std::nullopt);
  print_line(bench, prefix + "_control", report.control_seconds * 1e3, "ms", std::nullopt,
             std::nullopt);
}

// Weight sync segments this process created that are still in /dev/shm.
std::vector<std::string> own_segments_left() {
  const std::string prefix =
      std::string(ooze::kSegmentPrefix) + "-" + std::to_string(::getpid()) + "-";
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) left.push_back(name);
  }
  return left;
}

void bench_syncs() {
  ooze::bench::ScopedTempDir temp("ooze-weight-sync-bench");
  const std::string model_dir = temp.path("model");
  auto start = Clock::now();
  ooze::models::ModelConfig config = write_model(model_dir);

  // The trainer: fp32 master weights loaded from the same directory the engines start from.
  config.torch_dtype = "float32";
  ooze::models::TransformerModel model(config, at::kFloat);
  ooze::models::load_hf_weights(*model, model_dir);
  int64_t params = 0;
  for (const auto& parameter : model->parameters()) params += parameter.numel();
  ooze::fsdp::FsdpTransformer trainer(model, nullptr);
  // Sharding copied the parameters into flat buffers and freed the originals, but glibc keeps
  // those ~2 GB in its heap unless asked to give them back: the engines need the room.
  ::malloc_trim(0);
  const int64_t bytes =
      ooze::trainer::TrainerBuckets(trainer.sharded(), at::kBFloat16,
                                    ooze::weight_sync::kDefaultUpdateWeightBufferSize)
          .total_bytes();
  const double gb = static_cast<double>(bytes) / 1e9;
  const std::string size_name = std::to_string(std::llround(params / 1e6)) + "M";
  std::fprintf(stderr, "sync model: %lld parameters, %.3f GB bf16, written and loaded in %.1f s\n",
               static_cast<long long>(params), gb, seconds_since(start));

  // The baselines run before the engines start and again once they are gone; the best of both
  // counts, so that a burst of other work on the machine does not skew every ratio.
  double memcpy_s = memcpy_seconds(bytes);
  double broadcast_s = raw_broadcast_seconds(bytes);

  ooze::actors::RuntimeOptions runtime;
  runtime.resources = {{"CPU", 4}};
  runtime.log_to_driver = false;
  ooze::actors::init(runtime);
  int64_t version = 0;

  // Colocated: one engine in bf16, then one in fp32 (no conversion: one plain copy). The first
  // sync moves the engine's parameters into shared memory; the best of the later ones counts.
  const int64_t default_bucket = ooze::weight_sync::kDefaultUpdateWeightBufferSize;
  std::vector<EngineHandle> engines = spawn_engines(1, model_dir);
  start = Clock::now();
  checked_sync(trainer, engines, EnginePlacement::kColocated, ++version);
  std::fprintf(stderr, "checked colocated sync in %.1f s\n", seconds_since(start));
  const WeightSyncReport colocated =
      best_sync(trainer, engines, EnginePlacement::kColocated, default_bucket, &version);
  for (const EngineHandle& engine : engines) ooze::actors::kill(engine);
  engines = spawn_engines(1, model_dir, "float32");
  const WeightSyncReport colocated_fp32 = best_sync(trainer, engines, EnginePlacement::kColocated,
                                                    default_bucket, &version, at::kFloat);
  for (const EngineHandle& engine : engines) ooze::actors::kill(engine);

  // Disaggregated: two engines, a Gloo broadcast group with this process as its root.
  engines = spawn_engines(2, model_dir);
  start = Clock::now();
  checked_sync(trainer, engines, EnginePlacement::kDisaggregated, ++version);
  std::fprintf(stderr, "checked disaggregated sync in %.1f s\n", seconds_since(start));
  const WeightSyncReport disaggregated =
      best_sync(trainer, engines, EnginePlacement::kDisaggregated, default_bucket, &version);
  // Smaller buckets shorten what cannot overlap: packing the first, loading the last.
  const int64_t small_bucket = 64 * kMiB;
  const WeightSyncReport disaggregated_small =
      best_sync(trainer, engines, EnginePlacement::kDisaggregated, small_bucket, &version);
  for (const EngineHandle& engine : engines) ooze::actors::kill(engine);
  ooze::actors::shutdown();

  memcpy_s = std::min(memcpy_s, memcpy_seconds(bytes));
  const double memcpy_fp32_s = memcpy_seconds(2 * bytes);
  broadcast_s = std::min(broadcast_s, raw_broadcast_seconds(bytes));
  const double memcpy_gbps = gb / memcpy_s, broadcast_gbps = gb / broadcast_s;

  std::string bench = "weight_sync_colocated";
  const std::string colocated_name = "sync_bf16_" + size_name + "_in_place";
  print_line(bench, "memcpy_" + size_name, memcpy_gbps, "GB/s", std::nullopt, std::nullopt);
  const double colocated_gbps = gb / colocated.seconds;
  print_line(bench, colocated_name, colocated_gbps, "GB/s", memcpy_gbps,
             colocated_gbps / memcpy_gbps);
  print_split(bench, colocated_name, colocated);
  const std::string fp32_name = "sync_fp32_" + size_name + "_in_place";
  const double fp32_memcpy_gbps = 2 * gb / memcpy_fp32_s;
  const double fp32_gbps = 2 * gb / colocated_fp32.seconds;
  print_line(bench, "memcpy_fp32_" + size_name, fp32_memcpy_gbps, "GB/s", std::nullopt,
             std::nullopt);
  print_line(bench, fp32_name, fp32_gbps, "GB/s", fp32_memcpy_gbps, fp32_gbps / fp32_memcpy_gbps);
  print_split(bench, fp32_name, colocated_fp32);

  bench = "weight_sync_disaggregated";
  print_line(bench, "gloo_broadcast_3ranks_" + size_name, broadcast_gbps, "GB/s", memcpy_gbps,
             broadcast_gbps / memcpy_gbps);
  const std::string disaggregated_name =
      "sync_bf16_" + size_name + "_" + mib_name(default_bucket) + "_2engines";
  const double disaggregated_gbps = gb / disaggregated.seconds;
  print_line(bench, disaggregated_name, disaggregated_gbps, "GB/s", broadcast_gbps,
             disaggregated_gbps / broadcast_gbps);
  print_split(bench, disaggregated_name, disaggregated);
  const std::string small_name =
      "sync_bf16_" + size_name + "_" + mib_name(small_bucket) + "_2engines";
  const double small_gbps = gb / disaggregated_small.seconds;
  print_line(bench, small_name, small_gbps, "GB/s", broadcast_gbps, small_gbps / broadcast_gbps);
  print_split(bench, small_name, disaggregated_small);

  const std::vector<std::string> left = own_segments_left();
  if (!left.empty()) {
    throw BenchFailure("weight sync left " + std::to_string(left.size()) +
                       " shared memory segments in /dev/shm, the first: " + left.front());
  }
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  if (argc == 5 && std::string(argv[1]) == "--broadcast-rank") {
    return run_broadcast_rank(std::atoi(argv[2]), std::atoi(argv[3]), std::atoll(argv[4]));
  }
  ooze::actors::run_worker_if_requested();  // engine actors are this program, re-executed
  ::setenv("OMP_NUM_THREADS", "1", 1);      // for every process started from here
  at::set_num_threads(1);
  try {
    bench_bucket_packing();
    bench_syncs();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weight_sync_bench: %s\n", e.what());
    if (ooze::actors::is_initialized()) ooze::actors::shutdown();
    return 1;
  }
  return 0;
}
