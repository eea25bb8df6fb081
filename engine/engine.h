// The rollout engine: a serving engine over models/ (the trainer's own model code), in the
// mould of SGLang's scheduler. One loop on its own thread does, step after step:
//
//   controls   abort / pause / flush / sleep / weight loads queued since the last step
//   schedule   every running sequence decodes one token; prompts are prefilled in chunks
//              under a per-step token budget (a long prompt cannot stall the decodes); waiting
//              requests are admitted first-come first-served while cache blocks and running
//              slots last; when blocks run out the newest running sequence is preempted
//              (blocks freed, recomputed later) instead of failing
//   forward    one batched forward over all of it (models::TransformerModel::forward_cached)
//   sample     per-sequence sampling and log-probs (engine/sampler.h)
//   retire     stop tokens, stop strings and length; finished sequences free their blocks and
//              their outputs are delivered at once
//
// The KV cache is paged (engine/block_manager.h). The n samples of one prompt are prefilled
// once and share its blocks; requests with a common prefix reuse its cached blocks.
//
//   Engine engine(options);
//   GenerateRequest request;
//   request.input_ids = engine.tokenizer().encode("1 + 1 =");
//   request.sampling.max_new_tokens = 16;
//   std::vector<GenerateOutput> out = engine.generate(request);  // blocks; or submit() + callback
//
// Every accepted request ends with exactly one finished output per sample: a result or an
// abort (with its partial output). All methods are safe to call from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/option_fields.h"
#include "engine/request.h"
#include "models/lora.h"
#include "models/model_config.h"
#include "weight_sync/weight_sink.h"

namespace ooze::models {
class Tokenizer;
}

namespace ooze::engine {

struct EngineOptions {
  std::string model_dir;          // a Hugging Face directory (config, weights, tokenizer)
  std::string served_model_name;  // what /v1/models reports; model_dir when empty
  std::string lora;               // a PEFT LoRA adapter directory merged into the weights at start
  // Adapters of this shape beside the projections (rank 0: none), starting at B = 0: a LoRA
  // run's engines with --lora-sync adapter, which then receive A and B. Set by `ooze train`.
  models::LoraOptions adapter;
  std::string dtype = "auto";         // "auto" (config.json's torch_dtype), "float32", "bfloat16"
  std::string device = "cpu";         // "cpu" or "cuda[:N]"
  int64_t max_running_requests = 64;  // sequences decoding at once
  // The KV cache (engine/kv_cache_size.h): kv_cache_blocks, else kv_cache_memory_mb, else (both
  // 0) what max_running_requests can use, within mem_fraction_static of the available memory.
  int64_t kv_cache_blocks = 0;
  int64_t kv_cache_memory_mb = 0;
  double mem_fraction_static = 0.5;
  int64_t block_size = 16;              // tokens per KV block
  int64_t chunked_prefill_size = 2048;  // prompt tokens computed per step, at most
  bool enable_prefix_caching = true;
  int intra_op_threads = 0;  // CPU threads for the forward; 0 keeps LibTorch's setting
  int64_t seed = 0;          // seeds requests that give none (0: random)

  // `ooze serve`'s engine flags (--model, --dtype, --max-running-requests, ...).
  static const OptionFields<EngineOptions>& fields();
  // The flags of the engines `ooze train` and `ooze rollout` start themselves
  // (--engine-max-running-requests, --engine-kv-cache-memory-mb, --engine-threads); the model
  // is the command's. Declare them with launched_engine_defaults().
  static const OptionFields<EngineOptions>& launched_engine_fields();
};

// What launched engines default to: one intra-op thread each, as they share the machine.
inline EngineOptions launched_engine_defaults() {
  EngineOptions options;
  options.intra_op_threads = 1;
  // Engines share the machine with the trainer, which allocates after them: a fixed cache
  // rather than a share of what happens to be free when they start.
  options.kv_cache_memory_mb = 1024;
  return options;
};

// Called on the engine's thread, so it must return quickly (hand the output to another thread).
using OutputCallback = std::function<void(const GenerateOutput&)>;

struct EngineStats {
  int64_t running_sequences = 0;
  int64_t waiting_sequences = 0;
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;           // unused, including cached blocks no sequence holds
  int64_t cached_blocks = 0;         // blocks registered in the prefix cache
  int64_t prompt_tokens = 0;         // over all admitted sequences since start
  int64_t cached_prompt_tokens = 0;  // of which the prefix cache (or a shared prompt) supplied
  int64_t computed_prefill_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t weight_version = 0;
  bool paused = false;
  bool sleeping = false;
  bool syncing_weights = false;     // between begin_weight_sync and finish_weight_sync
  bool weights_incomplete = false;  // a sync was interrupted: generation is refused

  double cache_hit_rate() const {
    return prompt_tokens == 0 ? 0.0 : static_cast<double>(cached_prompt_tokens) / prompt_tokens;
  }
};

struct EngineInfo {
  std::string model_path;
  std::string served_model_name;
  std::string dtype;
  std::string device;
  int64_t vocab_size = 0;
  int64_t context_length = 0;  // max_position_embeddings: prompt + output may not exceed it
  int64_t block_size = 0;
  int64_t num_blocks = 0;
  int64_t max_running_requests = 0;
  std::vector<int64_t> eos_token_ids;
  int64_t kv_cache_bytes = 0;
  std::string kv_cache_sizing;  // why the cache has that size (engine/kv_cache_size.h)
};

// Thrown by submit() while the engine's weights are incomplete (a weight sync was interrupted):
// serving them would answer with a half-updated model. A complete sync ends it. HTTP: 503.
class WeightsIncomplete : public Error {
 public:
  using Error::Error;
};

class Engine : public weight_sync::WeightSink {
 public:
  // Loads the model and tokenizer, allocates the KV cache and starts the loop. Throws
  // ConfigError / IoError / FormatError naming what could not be loaded.
  explicit Engine(EngineOptions options);
  // Aborts what is still pending (callbacks see kAbort) and stops the loop.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request (InvalidRequest naming the field: empty prompt, ids out of the
  // vocabulary, prompt + max_new_tokens beyond the context, a duplicate live id, ...) and
  // queues it; returns its id. on_update gets every sample's outputs (see OutputCallback):
  // after every step if request.stream, and always once with finished = true.
  std::string submit(GenerateRequest request, OutputCallback on_update);
  // submit() and wait: the n finished outputs in index order.
  std::vector<GenerateOutput> generate(GenerateRequest request);

  // Finishes the request's samples now with what they have (kAbort). Unknown ids are ignored
  // (the request may have just finished). Returns once done.
  void abort(const std::string& request_id);
  void abort_all();

  // Stops scheduling. abort_in_flight: running and waiting requests are aborted; otherwise they
  // are kept, blocks and all, and go on after continue_generation(). New requests queue.
  void pause_generation(bool abort_in_flight);
  void continue_generation();

  // Forgets the prefix cache: later requests compute their prompts again. Blocks that running
  // sequences hold stay theirs. Safe at any time.
  void flush_cache();

  // Sleep: frees the KV cache storage (and on a GPU moves the weights to host memory) so a
  // colocated trainer can use the memory. Running sequences are preempted and recomputed after
  // wake; requests submitted meanwhile wait. Wake allocates it all again.
  void release_memory();
  void resume_memory();

  // Copies Hugging Face-named tensors into the model (any subset: weight sync sends buckets),
  // converting dtype and device, between two steps. Checks every name and shape before copying
  // anything (FormatError listing the problems). With new_version, the engine's weight version
  // becomes it afterwards; it must be greater than the current one (Error otherwise). The
  // prefix cache is flushed: cached keys/values belong to the old weights.
  void load_weights(const std::vector<std::pair<std::string, at::Tensor>>& named_tensors,
                    std::optional<int64_t> new_version = std::nullopt);

  // Weight sync, the trainer's way of replacing every weight (weight_sync/ drives it):
  //
  //   begin_weight_sync(v)   generation stops between two steps (in-flight requests kept, or
  //                          aborted with abort_in_flight); new requests queue
  //   load_weight_bucket()   any number of times: named tensors, checked like load_weights
  //   finish_weight_sync(v)  every parameter must have arrived since begin; the version
  //                          becomes v, the prefix cache is flushed and generation resumes
  //
  // So no token is ever computed by a half-updated model: each comes wholly from the old
  // weights or the new ones, and its output's weight versions say which. v must be newer than
  // the engine's version (Error otherwise). When the sync is interrupted (abort_weight_sync, a
  // bucket that does not fit, finish with parameters missing, or `timeout` passing without a
  // call of the sync), the engine's weights are incomplete: every request in it is aborted
  // saying why, and submit() throws WeightsIncomplete until a new sync completes. A new
  // begin_weight_sync during a sync starts over.
  //
  // A partial sync (LoRA's merged sync after the first: only the adapted weights change) needs
  // only the parameters it sends; the rest stay as they are. It needs complete weights to start
  // from: an engine whose last sync failed refuses it (Error), and the trainer sends everything.
  void begin_weight_sync(int64_t version, bool abort_in_flight, std::chrono::milliseconds timeout,
                         bool partial = false);
  void load_weight_bucket(
      const std::vector<std::pair<std::string, at::Tensor>>& named_tensors) override;
  void finish_weight_sync(int64_t version);
  void abort_weight_sync(const std::string& reason) override;
  std::string weight_device() const override { return info().device; }
  // A colocated trainer's in-place sync (weight_sync/weight_receiver.h): the parameters by
  // Hugging Face name; moving them into shared memory; the version of the sync in progress
  // (-1: none); marking them written by the trainer in it (as a bucket marks its tensors).
  std::vector<std::pair<std::string, at::Tensor>> parameters() override;
  void move_parameters(const std::vector<std::pair<std::string, at::Tensor>>& storage) override;
  void parameters_written(const std::vector<std::string>& names) override;
  int64_t syncing_version() override;
  // The CRC-32 (core/checksum.h) of each parameter's bytes in the engine's dtype, by Hugging
  // Face name, for checking a sync against the trainer's.
  std::vector<std::pair<std::string, uint32_t>> weight_checksums();

  EngineStats stats() const;
  const EngineInfo& info() const;
  const models::Tokenizer& tokenizer() const;
  const models::ModelConfig& model_config() const;

 private:
  class Loop;
  std::unique_ptr<Loop> loop_;
};

}  // namespace ooze::engine
