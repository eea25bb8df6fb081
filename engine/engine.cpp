#include "engine/engine.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "core/checksum.h"
#include "core/logging.h"
// CUDA builds of LibTorch: a sleeping engine hands its cached GPU memory back to the driver.
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define OOZE_ROLLOUT_HAVE_CUDA_ALLOCATOR 1
#endif
#include "engine/block_manager.h"
#include "engine/kv_cache_size.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "models/hf_checkpoint.h"
#include "models/kv_cache.h"
#include "models/lora.h"
#include "models/peft_adapter.h"
#include "models/tokenizer.h"
#include "models/transformer.h"

namespace ooze::engine {
namespace {

c10::ScalarType parse_dtype(const std::string& name, const models::ModelConfig& config) {
  if (name == "auto") return config.parameter_dtype();
  if (name == "float32") return torch::kFloat;
  if (name == "bfloat16") return torch::kBFloat16;
  throw ConfigError("dtype '" + name + "' is not supported; use auto, float32 or bfloat16");
}

c10::Device parse_device(const std::string& name) {
  try {
    c10::Device device(name);
    if (device.is_cuda() && !torch::cuda::is_available()) {
      throw ConfigError("device '" + name + "' asked for, but no CUDA device is available");
    }
    if (!device.is_cpu() && !device.is_cuda()) throw ConfigError("");
    return device;
  } catch (const c10::Error&) {
  } catch (const ConfigError& e) {
    if (std::string(e.what()).size() > 0) throw;
  }
  throw ConfigError("device '" + name + "' is not understood; use cpu, cuda or cuda:N");
}

// EOS ids from config.json, tokenizer_config.json and generation_config.json, as SGLang
// gathers them.
std::vector<int64_t> eos_token_ids(const std::string& dir, const models::ModelConfig& config,
                                   const models::Tokenizer& tokenizer) {
  std::set<int64_t> ids(config.eos_token_ids.begin(), config.eos_token_ids.end());
  if (tokenizer.eos_token_id()) ids.insert(*tokenizer.eos_token_id());
  const std::filesystem::path generation_config =
      std::filesystem::path(dir) / "generation_config.json";
  if (std::filesystem::exists(generation_config)) {
    std::ifstream in(generation_config);
    nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (json.is_object() && json.contains("eos_token_id")) {
      const nlohmann::json& eos = json["eos_token_id"];
      if (eos.is_number_integer()) ids.insert(eos.get<int64_t>());
      if (eos.is_array()) {
        for (const auto& id : eos) {
          if (id.is_number_integer()) ids.insert(id.get<int64_t>());
        }
      }
    }
  }
  return {ids.begin(), ids.end()};
}

// Each sample of a request draws from its own stream, derived from the request's seed.
uint64_t sample_seed(uint64_t request_seed, int64_t index) {
  return request_seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index);
}

}  // namespace

class Engine::Loop {
 public:
  explicit Loop(EngineOptions options);
  ~Loop();

  std::string submit(GenerateRequest request, OutputCallback on_update);
  // Runs `command` on the loop thread between two steps and waits for it.
  void run_command(const std::function<void()>& command);

  void abort(const std::string& id);
  void abort_all(const std::string& why);
  void pause(bool abort_in_flight);
  void resume();
  void flush_cache();
  void release_memory();
  void resume_memory();
  void load_weights(const std::vector<std::pair<std::string, at::Tensor>>& named,
                    std::optional<int64_t> new_version);
  void begin_weight_sync(int64_t version, bool abort_in_flight, std::chrono::milliseconds timeout,
                         bool partial);
  void load_weight_bucket(const std::vector<std::pair<std::string, at::Tensor>>& named);
  void finish_weight_sync(int64_t version);
  void abort_weight_sync(const std::string& reason);
  std::vector<std::pair<std::string, uint32_t>> weight_checksums();
  std::vector<std::pair<std::string, at::Tensor>> parameters();
  void move_parameters(const std::vector<std::pair<std::string, at::Tensor>>& storage);
  void parameters_written(const std::vector<std::string>& names);
  int64_t syncing_version();

  EngineStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
  }
  const EngineInfo& info() const { return info_; }
  const models::Tokenizer& tokenizer() const { return tokenizer_; }
  const models::ModelConfig& config() const { return config_; }

 private:
  void main();
  bool has_work() const;
  void step();
  // The input log-probs the step's chunks owe (engine/request.h), from their hidden states.
  void record_input_logprobs(const ScheduledStep& plan, const models::CacheStep& cache_step,
                             const torch::Tensor& hidden);
  void admit(std::shared_ptr<RequestState> state);
  void append_token(Sequence& sequence, int64_t token, float logprob, std::vector<TopLogProb> top);
  void finish(Sequence* sequence, FinishReason reason, const std::string& abort_message = "",
              std::optional<StopMatch> match = std::nullopt);
  // Outputs are queued while the engine's state changes and handed to callbacks after the
  // statistics are published, so a caller woken by its result sees the engine as it is.
  void deliver(const std::shared_ptr<RequestState>& state, const GenerateOutput& output);
  void flush_outbox();
  void fill_output(Sequence& sequence, bool finished);
  void publish_stats();
  // Checks every tensor against the model, then copies them all (nothing when one does not
  // fit: FormatError listing the problems). Returns the parameters written.
  std::vector<std::string> copy_into_parameters(
      const std::vector<std::pair<std::string, at::Tensor>>& named, const std::string& what);
  // A sync broke: abort everything in the engine and refuse requests until a complete sync.
  void mark_weights_incomplete(const std::string& reason);
  std::string sync_text() const {
    return "the weight sync to version " + std::to_string(sync_version_);
  }

  EngineOptions options_;
  models::ModelConfig config_;
  models::Tokenizer tokenizer_;
  c10::ScalarType dtype_;
  c10::Device device_;
  models::TransformerModel model_{nullptr};
  std::unique_ptr<models::KVCache> cache_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  EngineInfo info_;

  // Shared with callers (guarded by mutex_).
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<RequestState>> incoming_;
  std::deque<std::packaged_task<void()>> commands_;
  std::set<std::string> live_ids_;
  uint64_t next_id_ = 0;
  std::mt19937_64 seed_source_;
  bool stopping_ = false;
  std::string weights_incomplete_reason_;  // non-empty: submit() refuses, saying why

  // Loop-thread state.
  std::unordered_map<std::string, std::shared_ptr<RequestState>> requests_;
  bool paused_ = false;
  bool sleeping_ = false;
  bool stalled_ = false;  // nothing could be scheduled: wait for a change
  int64_t weight_version_ = 0;
  // Weight sync: serving, or between begin and finish, or broken until a complete sync.
  enum class WeightState { kServing, kSyncing, kIncomplete };
  WeightState weight_state_ = WeightState::kServing;
  int64_t sync_version_ = 0;
  bool sync_is_partial_ = false;  // the sync in progress sends only the parameters that changed
  std::set<std::string> synced_parameters_;
  std::chrono::milliseconds sync_timeout_{0};
  std::chrono::steady_clock::time_point sync_deadline_;  // the next call of the sync, at latest
  EngineStats totals_;
  std::vector<std::pair<std::shared_ptr<RequestState>, GenerateOutput>> outbox_;

  mutable std::mutex stats_mutex_;
  EngineStats stats_;
  std::thread thread_;
};

Engine::Loop::Loop(EngineOptions options)
    : options_(std::move(options)),
      config_(models::load_model_config(options_.model_dir)),
      tokenizer_(models::load_tokenizer(options_.model_dir)),
      dtype_(parse_dtype(options_.dtype, config_)),
      device_(parse_device(options_.device)) {
  if (options_.block_size < 1) {
    throw ConfigError("block_size must be >= 1, got " + std::to_string(options_.block_size));
  }
  if (options_.max_running_requests < 1) {
    throw ConfigError("max_running_requests must be >= 1, got " +
                      std::to_string(options_.max_running_requests));
  }
  // Read before the weights take their share: the cache's cap counts them in.
  const std::optional<int64_t> available_memory_at_start =
      device_.is_cpu() ? available_host_memory() : std::nullopt;
  model_ = models::TransformerModel(config_, dtype_);
  models::load_hf_weights(*model_, options_.model_dir);
  if (!options_.lora.empty()) {
    models::merge_adapter_weights(*model_, models::load_peft_adapter(options_.lora));
  }
  if (options_.adapter.enabled()) models::add_lora_adapters(*model_, options_.adapter, /*seed=*/0);
  model_->to(device_);
  model_->eval();

  KvCacheDemand demand;
  demand.bytes_per_token = 2 * config_.num_hidden_layers * config_.num_key_value_heads *
                           config_.head_dim * static_cast<int64_t>(c10::elementSize(dtype_));
  demand.context_length = config_.max_position_embeddings;
  for (const torch::Tensor& parameter : model_->parameters()) {
    demand.weight_bytes += parameter.numel() * static_cast<int64_t>(parameter.element_size());
  }
  const KvCacheSize kv_cache_size =
      choose_kv_cache_size(options_, demand, available_memory_at_start);
  const int64_t num_blocks = kv_cache_size.blocks;
  cache_ =
      std::make_unique<models::KVCache>(config_, num_blocks, options_.block_size, dtype_, device_);
  blocks_ = std::make_unique<BlockManager>(num_blocks, options_.block_size,
                                           options_.enable_prefix_caching);
  scheduler_ = std::make_unique<Scheduler>(*blocks_, options_.max_running_requests,
                                           options_.chunked_prefill_size);

  info_.model_path = options_.model_dir;
  info_.served_model_name =
      options_.served_model_name.empty() ? options_.model_dir : options_.served_model_name;
  info_.dtype = dtype_ == torch::kBFloat16 ? "bfloat16"
                : dtype_ == torch::kFloat  ? "float32"
                                           : "float16";
  info_.device = device_.str();
  info_.vocab_size = config_.vocab_size;
  info_.context_length = config_.max_position_embeddings;
  info_.block_size = options_.block_size;
  info_.num_blocks = num_blocks;
  info_.max_running_requests = options_.max_running_requests;
  info_.eos_token_ids = eos_token_ids(options_.model_dir, config_, tokenizer_);
  info_.kv_cache_bytes = kv_cache_size.bytes;
  info_.kv_cache_sizing = kv_cache_size.why;

  seed_source_.seed(options_.seed != 0 ? static_cast<uint64_t>(options_.seed)
                                       : std::random_device{}());
  totals_.total_blocks = num_blocks;
  publish_stats();
  thread_ = std::thread([this] { main(); });
}

Engine::Loop::~Loop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string Engine::Loop::submit(GenerateRequest request, OutputCallback on_update) {
  SamplingParams& params = request.sampling;
  params.validate();
  if (request.input_ids.empty()) throw InvalidRequest("input_ids", "the prompt is empty");
  for (size_t i = 0; i < request.input_ids.size(); ++i) {
    const int64_t id = request.input_ids[i];
    if (id < 0 || id >= config_.vocab_size) {
      throw InvalidRequest("input_ids", "token " + std::to_string(id) + " at position " +
                                            std::to_string(i) + " is outside the vocabulary [0, " +
                                            std::to_string(config_.vocab_size) + ")");
    }
  }
  const int64_t prompt_length = static_cast<int64_t>(request.input_ids.size());
  if (prompt_length >= info_.context_length) {
    throw InvalidRequest("input_ids", "the prompt has " + std::to_string(prompt_length) +
                                          " tokens; the model's context is " +
                                          std::to_string(info_.context_length) +
                                          " (prompt + output)");
  }
  // As SGLang: the output may use what the context leaves, and no more.
  params.max_new_tokens = std::min(params.max_new_tokens, info_.context_length - prompt_length);
  const int64_t blocks_needed =
      (prompt_length + params.max_new_tokens + info_.block_size - 1) / info_.block_size;
  if (blocks_needed > info_.num_blocks) {
    throw InvalidRequest("sampling_params.max_new_tokens",
                         "prompt + max_new_tokens need " + std::to_string(blocks_needed) +
                             " KV-cache blocks, but the cache has " +
                             std::to_string(info_.num_blocks) +
                             "; lower max_new_tokens or give the engine more blocks");
  }
  if (params.n > info_.max_running_requests) {
    throw InvalidRequest("sampling_params.n", "n = " + std::to_string(params.n) +
                                                  " exceeds max_running_requests = " +
                                                  std::to_string(info_.max_running_requests));
  }
  if (request.top_logprobs_num < 0 || request.top_logprobs_num > config_.vocab_size) {
    throw InvalidRequest("top_logprobs_num", "must be in [0, vocab size " +
                                                 std::to_string(config_.vocab_size) + "], got " +
                                                 std::to_string(request.top_logprobs_num));
  }
  if (request.logprob_start_len < -1 || request.logprob_start_len >= prompt_length) {
    throw InvalidRequest("logprob_start_len",
                         "must be -1 (no prompt log-probs) or a prompt position in [0, " +
                             std::to_string(prompt_length - 1) + "], got " +
                             std::to_string(request.logprob_start_len));
  }
  auto state = std::make_shared<RequestState>();
  state->on_update = std::move(on_update);
  state->unfinished = params.n;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw Error("the engine is shutting down; the request was not accepted");
    if (!weights_incomplete_reason_.empty()) {
      throw WeightsIncomplete("the engine refuses to generate: its weights are incomplete (" +
                              weights_incomplete_reason_ +
                              "); a complete weight sync must arrive first");
    }
    if (request.id.empty()) {
      do {
        request.id = "req-" + std::to_string(next_id_++);
      } while (live_ids_.count(request.id));
    } else if (live_ids_.count(request.id)) {
      throw InvalidRequest("rid", "request id '" + request.id + "' is already in flight");
    }
    live_ids_.insert(request.id);
    state->seed = params.seed ? *params.seed : seed_source_();
    state->request = std::move(request);
    incoming_.push_back(state);
  }
  wake_.notify_all();
  return state->request.id;
}

void Engine::Loop::run_command(const std::function<void()>& command) {
  if (std::this_thread::get_id() == thread_.get_id()) {  // from an output callback
    command();  // its outputs join those the callback is part of
    return;
  }
  // Statistics are published with the command, so a caller sees its effect at once, even when
  // it throws (a broken weight sync changes the engine's state, then throws).
  std::packaged_task<void()> task([this, &command] {
    try {
      command();
    } catch (...) {
      publish_stats();
      flush_outbox();
      throw;
    }
    publish_stats();
    flush_outbox();
  });
  std::future<void> done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw Error("the engine is shutting down");
    commands_.push_back(std::move(task));
  }
  wake_.notify_all();
  done.get();  // rethrows what the command threw
}

bool Engine::Loop::has_work() const {
  return !paused_ && !sleeping_ && !stalled_ && weight_state_ == WeightState::kServing &&
         (!scheduler_->running().empty() || !scheduler_->waiting().empty());
}

void Engine::Loop::main() {
  if (options_.intra_op_threads > 0) at::set_num_threads(options_.intra_op_threads);
  while (true) {
    std::deque<std::shared_ptr<RequestState>> arrived;
    std::deque<std::packaged_task<void()>> commands;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [&] {
        return stopping_ || !incoming_.empty() || !commands_.empty() || has_work();
      };
      if (weight_state_ == WeightState::kSyncing) {
        wake_.wait_until(lock, sync_deadline_, ready);
      } else {
        wake_.wait(lock, ready);
      }
      arrived.swap(incoming_);
      commands.swap(commands_);
      stopping = stopping_;
    }
    if (!arrived.empty() || !commands.empty()) stalled_ = false;
    for (auto& state : arrived) admit(std::move(state));
    for (auto& command : commands) command();
    if (weight_state_ == WeightState::kSyncing &&
        std::chrono::steady_clock::now() >= sync_deadline_) {
      mark_weights_incomplete(sync_text() + " had no call for " +
                              std::to_string(sync_timeout_.count()) +
                              " ms (--weight-sync-timeout): the trainer may have died");
    }
    if (stopping) {
      abort_all("the engine shut down");
      publish_stats();
      flush_outbox();
      return;
    }
    if (has_work()) {
      try {
        step();
      } catch (const std::exception& e) {
        // A failed forward must not lose requests: every one in flight ends, aborted, saying why.
        OOZE_LOG(ERROR) << "rollout engine step failed: " << e.what();
        abort_all(std::string("the engine step failed: ") + e.what());
      }
    }
    publish_stats();
    flush_outbox();
  }
}

void Engine::Loop::admit(std::shared_ptr<RequestState> state) {
  auto sequence = std::make_unique<Sequence>();
  const GenerateRequest& request = state->request;
  sequence->request = state;
  sequence->fan_out = request.sampling.n;
  sequence->tokens = request.input_ids;
  sequence->prompt_length = static_cast<int64_t>(request.input_ids.size());
  sequence->text.emplace(tokenizer_, request.sampling, info_.eos_token_ids);
  sequence->output.request_id = request.id;
  sequence->output.prompt_tokens = sequence->prompt_length;
  requests_[request.id] = std::move(state);
  scheduler_->add_waiting(std::move(sequence));
}

void Engine::Loop::step() {
  ScheduledStep plan = scheduler_->schedule();
  totals_.preemptions = scheduler_->num_preemptions();
  if (plan.empty()) {
    stalled_ = true;
    return;
  }
  for (const BlockCopy& copy : plan.copies) cache_->copy_block(copy.source, copy.destination);

  std::vector<int64_t> input_ids;
  std::vector<std::vector<int64_t>> tables;
  std::vector<int64_t> past_lengths, new_tokens;
  for (const ScheduledChunk& chunk : plan.chunks) {
    const Sequence& sequence = *chunk.sequence;
    const int64_t start = sequence.table.num_tokens - chunk.num_tokens;
    input_ids.insert(input_ids.end(), sequence.tokens.begin() + start,
                     sequence.tokens.begin() + start + chunk.num_tokens);
    tables.push_back(sequence.table.blocks);
    past_lengths.push_back(start);
    new_tokens.push_back(chunk.num_tokens);
  }
  const models::CacheStep cache_step = cache_->plan_step(tables, past_lengths, new_tokens);
  // Not just no grad: InferenceMode also skips the autograd and view-tracking layers of every
  // operation's dispatch, which at one sequence is most of what a step's small operations cost
  // (decode at batch 1, 2 threads, bench_llama_cpp_bench: 7.9 -> 8.9-9.1 tokens/s). What it
  // makes here stays in the step; the cache and the parameters it writes are ordinary tensors.
  c10::InferenceMode inference;
  torch::Tensor hidden = model_->forward_cached(torch::tensor(input_ids, torch::kLong).to(device_),
                                                cache_step, *cache_);
  totals_.computed_prefill_tokens += plan.prefill_tokens;
  ++totals_.steps;
  record_input_logprobs(plan, cache_step, hidden);  // before a completed prompt forks

  // The sequences to sample: those whose chunk reached the end of their tokens; a prompt
  // computed for n samples forks now, and its n samples share its last position's logits.
  std::vector<Sequence*> to_sample;
  std::vector<int64_t> logit_rows;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    Sequence& sequence = *plan.chunks[i].sequence;
    blocks_->register_full_blocks(sequence.table, sequence.tokens);
    if (!plan.chunks[i].completes) continue;
    std::vector<Sequence*> samples = {&sequence};
    if (!sequence.counted_prompt) {
      sequence.counted_prompt = true;
      const int64_t fan_out = sequence.fan_out;
      sequence.output.cached_tokens = sequence.cached_tokens;
      totals_.prompt_tokens += sequence.prompt_length * fan_out;
      totals_.cached_prompt_tokens +=
          sequence.cached_tokens + sequence.prompt_length * (fan_out - 1);
      if (fan_out > 1) {
        for (Sequence* child : scheduler_->fork(sequence)) {
          child->output.cached_tokens = child->prompt_length;
          child->cached_tokens = child->prompt_length;
          samples.push_back(child);
        }
      }
    }
    for (Sequence* sample : samples) {
      if (sample->params().max_new_tokens == 0) {  // the prompt was all it asked for
        sample->output.weight_version = weight_version_;
        sample->output.weight_versions = {weight_version_};
        finish(sample, FinishReason::kLength);
        continue;
      }
      to_sample.push_back(sample);
      logit_rows.push_back(cache_step.offsets[i + 1] - 1);
    }
  }
  if (to_sample.empty()) return;

  torch::Tensor logits = model_->logits(
      hidden.index_select(0, torch::tensor(logit_rows, torch::kLong).to(hidden.device())));
  std::vector<SamplingRow> rows;
  for (Sequence* sequence : to_sample) {
    const SamplingParams& params = sequence->params();
    SamplingRow row;
    row.temperature = params.temperature;
    row.top_p = params.top_p;
    row.top_k = params.top_k;
    row.min_p = params.min_p;
    row.seed = sample_seed(sequence->request->seed, sequence->index);
    row.draw_index = static_cast<uint64_t>(sequence->output.output_ids.size());
    row.top_logprobs_num = sequence->request->request.top_logprobs_num;
    rows.push_back(row);
  }
  SampledTokens sampled = sample_tokens(logits.to(torch::kCPU), rows);
  totals_.generated_tokens += static_cast<int64_t>(to_sample.size());

  for (size_t i = 0; i < to_sample.size(); ++i) {
    Sequence& sequence = *to_sample[i];
    std::vector<TopLogProb> top;
    if (i < sampled.top_logprobs.size()) top = std::move(sampled.top_logprobs[i]);
    append_token(sequence, sampled.token_ids[i], sampled.logprobs[i], std::move(top));
  }
}

void Engine::Loop::record_input_logprobs(const ScheduledStep& plan,
                                         const models::CacheStep& cache_step,
                                         const torch::Tensor& hidden) {
  // Hidden rows whose logits score the next prompt token, their targets, and whose they are.
  std::vector<int64_t> rows, targets;
  std::vector<Sequence*> owners;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    Sequence& sequence = *plan.chunks[i].sequence;
    const int64_t next = sequence.next_scored_position();
    if (next < 0) continue;
    const int64_t start = sequence.table.num_tokens - plan.chunks[i].num_tokens;
    if (start > next) {  // the scheduler caps the prefix cache, so this cannot happen
      throw Error("request " + sequence.request->request.id + ": prompt position " +
                  std::to_string(next) + " was not computed, so its log-prob is missing");
    }
    // Position p's logits score token p + 1; the last prompt position scores no prompt token.
    const int64_t end = std::min(sequence.table.num_tokens, sequence.prompt_length - 1);
    for (int64_t p = next; p < end; ++p) {
      rows.push_back(cache_step.offsets[i] + (p - start));
      targets.push_back(sequence.tokens[static_cast<size_t>(p + 1)]);
      owners.push_back(&sequence);
    }
  }
  // In slices: a [rows, vocab] fp32 block per chunk of a long prompt would be large.
  const int64_t slice = 256;
  const int64_t total = static_cast<int64_t>(rows.size());
  for (int64_t begin = 0; begin < total; begin += slice) {
    const int64_t count = std::min(slice, total - begin);
    const std::vector<int64_t> slice_rows(rows.begin() + begin, rows.begin() + begin + count);
    const std::vector<int64_t> slice_targets(targets.begin() + begin,
                                             targets.begin() + begin + count);
    const torch::Tensor logits = model_->logits(
        hidden.index_select(0, torch::tensor(slice_rows, torch::kLong).to(hidden.device())));
    // One top width for the slice (the widest asked), trimmed per sequence below.
    int64_t width = 0;
    for (int64_t k = begin; k < begin + count; ++k) {
      width = std::max(width, owners[k]->request->request.top_logprobs_num);
    }
    SampledTokens scored = score_tokens(logits, slice_targets, width);
    for (int64_t k = 0; k < count; ++k) {
      Sequence& owner = *owners[begin + k];
      owner.output.input_logprobs.push_back(scored.logprobs[k]);
      const int64_t asked = owner.request->request.top_logprobs_num;
      if (asked > 0) {
        std::vector<TopLogProb>& list = scored.top_logprobs[k];
        list.resize(std::min<size_t>(list.size(), static_cast<size_t>(asked)));
        owner.output.input_top_logprobs.push_back(std::move(list));
      }
    }
  }
}

void Engine::Loop::append_token(Sequence& sequence, int64_t token, float logprob,
                                std::vector<TopLogProb> top) {
  const GenerateRequest& request = sequence.request->request;
  GenerateOutput& output = sequence.output;
  sequence.tokens.push_back(token);
  output.output_ids.push_back(token);
  if (request.return_logprob) output.output_logprobs.push_back(logprob);
  if (request.top_logprobs_num > 0) output.top_logprobs.push_back(std::move(top));
  if (output.weight_versions.empty() || output.weight_versions.back() != weight_version_) {
    output.weight_versions.push_back(weight_version_);
  }
  output.weight_version = weight_version_;
  output.output_weight_versions.push_back(weight_version_);

  std::optional<StopMatch> stop = sequence.text->append(token);
  if (!stop && static_cast<int64_t>(sequence.tokens.size()) >= info_.context_length) {
    stop = StopMatch{FinishReason::kLength, std::nullopt, std::nullopt};
  }
  if (stop) {
    finish(&sequence, stop->reason, "", stop);
  } else if (request.stream) {
    fill_output(sequence, /*finished=*/false);
    deliver(sequence.request, output);
  }
}

void Engine::Loop::fill_output(Sequence& sequence, bool finished) {
  sequence.output.text = sequence.text->text(finished);
}

void Engine::Loop::deliver(const std::shared_ptr<RequestState>& state,
                           const GenerateOutput& output) {
  if (state->on_update) outbox_.emplace_back(state, output);
}

void Engine::Loop::flush_outbox() {
  while (!outbox_.empty()) {
    std::vector<std::pair<std::shared_ptr<RequestState>, GenerateOutput>> batch;
    batch.swap(outbox_);
    for (auto& [state, output] : batch) {
      try {
        state->on_update(output);
      } catch (const std::exception& e) {
        OOZE_LOG(ERROR) << "rollout engine: an output callback threw: " << e.what();
      }
    }
  }
}

void Engine::Loop::finish(Sequence* sequence, FinishReason reason, const std::string& abort_message,
                          std::optional<StopMatch> match) {
  std::shared_ptr<RequestState> state = sequence->request;
  std::unique_ptr<Sequence> owned = scheduler_->remove(sequence);  // frees its blocks
  fill_output(*owned, /*finished=*/true);
  GenerateOutput& output = owned->output;
  output.finished = true;
  output.finish_reason = reason;
  output.abort_message = abort_message;
  if (match) {
    output.matched_stop = match->matched_stop;
    output.matched_token = match->matched_token;
  }
  // A prompt aborted before it forked still owes one output per sample.
  for (int64_t k = 0; k < owned->fan_out; ++k) {
    GenerateOutput copy = output;
    copy.index = owned->index + k;
    deliver(state, copy);
    --state->unfinished;
  }
  if (state->unfinished == 0) {
    const std::string id = state->request.id;
    requests_.erase(id);
    std::lock_guard<std::mutex> lock(mutex_);
    live_ids_.erase(id);
  }
}

void Engine::Loop::abort(const std::string& id) {
  run_command([&] {
    std::vector<Sequence*> victims;
    for (const auto& s : scheduler_->running()) {
      if (s->request->request.id == id) victims.push_back(s.get());
    }
    for (const auto& s : scheduler_->waiting()) {
      if (s->request->request.id == id) victims.push_back(s.get());
    }
    for (Sequence* victim : victims) finish(victim, FinishReason::kAbort, "aborted by request");
  });
}

void Engine::Loop::abort_all(const std::string& why) {
  auto body = [this, why] {
    std::vector<Sequence*> victims;
    for (const auto& s : scheduler_->running()) victims.push_back(s.get());
    for (const auto& s : scheduler_->waiting()) victims.push_back(s.get());
    for (Sequence* victim : victims) finish(victim, FinishReason::kAbort, why);
  };
  if (std::this_thread::get_id() == thread_.get_id()) {
    body();
  } else {
    run_command(body);
  }
}

void Engine::Loop::pause(bool abort_in_flight) {
  run_command([&] {
    paused_ = true;
    if (abort_in_flight) abort_all("aborted: generation paused");
  });
}

void Engine::Loop::resume() {
  run_command([&] { paused_ = false; });
}

void Engine::Loop::flush_cache() {
  run_command([&] { blocks_->flush(); });
}

void Engine::Loop::release_memory() {
  run_command([&] {
    if (sleeping_) return;
    scheduler_->preempt_all();  // their keys/values are about to go: recompute after wake
    blocks_->flush();
    cache_->release_memory();
    if (device_.is_cuda()) {
      model_->to(torch::kCPU);
#ifdef OOZE_ROLLOUT_HAVE_CUDA_ALLOCATOR
      c10::cuda::CUDACachingAllocator::emptyCache();
#endif
    }
    sleeping_ = true;
  });
}

void Engine::Loop::resume_memory() {
  run_command([&] {
    if (!sleeping_) return;
    if (device_.is_cuda()) model_->to(device_);
    cache_->reacquire_memory();
    sleeping_ = false;
  });
}

std::vector<std::string> Engine::Loop::copy_into_parameters(
    const std::vector<std::pair<std::string, at::Tensor>>& named, const std::string& what) {
  std::map<std::string, torch::Tensor> parameters;
  for (auto& item : model_->named_parameters()) parameters[item.key()] = item.value();
  std::string problems;
  std::vector<std::pair<torch::Tensor, at::Tensor>> copies;
  std::vector<std::string> written;
  for (const auto& [name, tensor] : named) {
    auto found = parameters.find(name);
    if (found == parameters.end()) {
      // A tied head arrives as the embedding it equals (HF checkpoints may list both).
      if (name == "lm_head.weight" && config_.tie_word_embeddings) continue;
      problems += "\n  " + name + ": the model has no such parameter";
      continue;
    }
    if (!tensor.defined() || tensor.sizes() != found->second.sizes()) {
      problems += "\n  " + name + ": shape " +
                  (tensor.defined() ? c10::str(tensor.sizes()) : std::string("undefined")) +
                  ", the parameter's is " + c10::str(found->second.sizes());
      continue;
    }
    if (!at::isFloatingType(tensor.scalar_type())) {
      problems += "\n  " + name + ": dtype " + std::string(c10::toString(tensor.scalar_type())) +
                  " is not floating";
      continue;
    }
    copies.emplace_back(found->second, tensor);
    written.push_back(name);
  }
  if (!problems.empty()) {
    throw FormatError(what +
                      ": nothing was loaded; these tensors do not fit the model:" + problems);
  }
  torch::NoGradGuard no_grad;
  for (auto& [parameter, tensor] : copies) parameter.copy_(tensor);
  return written;
}

void Engine::Loop::load_weights(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                std::optional<int64_t> new_version) {
  run_command([&] {
    if (weight_state_ == WeightState::kSyncing) {
      throw Error("load_weights: " + sync_text() + " is in progress; finish or abort it first");
    }
    if (new_version && *new_version <= weight_version_) {
      throw Error("weight version " + std::to_string(*new_version) +
                  " is not newer than the engine's " + std::to_string(weight_version_) +
                  "; versions must increase");
    }
    copy_into_parameters(named, "load_weights");
    blocks_->flush();  // cached keys/values were computed by the old weights
    if (new_version) weight_version_ = *new_version;
  });
}

void Engine::Loop::begin_weight_sync(int64_t version, bool abort_in_flight,
                                     std::chrono::milliseconds timeout, bool partial) {
  run_command([&] {
    if (version <= weight_version_) {
      throw Error("weight sync to version " + std::to_string(version) +
                  " refused: it is not newer than the engine's version " +
                  std::to_string(weight_version_) + "; versions must increase");
    }
    if (partial && weight_state_ != WeightState::kServing) {
      std::string why = sync_text() + " was not finished";
      if (weight_state_ == WeightState::kIncomplete) {
        std::lock_guard<std::mutex> lock(mutex_);
        why = weights_incomplete_reason_;
      }
      throw Error("partial weight sync to version " + std::to_string(version) +
                  " refused: the engine's weights are incomplete (" + why +
                  "); send every parameter");
    }
    if (weight_state_ == WeightState::kSyncing) {
      OOZE_LOG(WARN) << sync_text() << " was not finished; starting over with version " << version;
    }
    if (abort_in_flight) abort_all("aborted: weight sync to version " + std::to_string(version));
    weight_state_ = WeightState::kSyncing;
    sync_version_ = version;
    sync_is_partial_ = partial;
    synced_parameters_.clear();
    sync_timeout_ = timeout;
    sync_deadline_ = std::chrono::steady_clock::now() + timeout;
    std::lock_guard<std::mutex> lock(mutex_);
    weights_incomplete_reason_.clear();  // requests queue again, for the new weights
  });
}

void Engine::Loop::load_weight_bucket(
    const std::vector<std::pair<std::string, at::Tensor>>& named) {
  run_command([&] {
    if (weight_state_ != WeightState::kSyncing) {
      throw Error(
          "load_weight_bucket: no weight sync is in progress; call begin_weight_sync "
          "first");
    }
    try {
      for (std::string& name : copy_into_parameters(named, "load_weight_bucket")) {
        synced_parameters_.insert(std::move(name));
      }
    } catch (const std::exception& e) {
      mark_weights_incomplete(sync_text() + " sent a bucket that does not fit the model");
      throw;
    }
    sync_deadline_ = std::chrono::steady_clock::now() + sync_timeout_;
  });
}

void Engine::Loop::finish_weight_sync(int64_t version) {
  run_command([&] {
    if (weight_state_ != WeightState::kSyncing || sync_version_ != version) {
      throw Error("finish_weight_sync(" + std::to_string(version) +
                  "): no weight sync to that version is in progress" +
                  (weight_state_ == WeightState::kSyncing ? " (" + sync_text() + " is)" : ""));
    }
    std::vector<std::string> missing;
    for (auto& item : model_->named_parameters()) {
      if (!sync_is_partial_ && !synced_parameters_.count(item.key())) {
        missing.push_back(item.key());
      }
    }
    if (!missing.empty()) {
      const std::string reason = sync_text() + " ended without " + std::to_string(missing.size()) +
                                 " of the model's parameters (the first: " + missing.front() + ")";
      mark_weights_incomplete(reason);
      throw FormatError(reason);
    }
    weight_version_ = version;
    weight_state_ = WeightState::kServing;
    synced_parameters_.clear();
    blocks_->flush();  // cached keys/values were computed by the old weights
  });
}

void Engine::Loop::abort_weight_sync(const std::string& reason) {
  run_command([&] {
    if (weight_state_ == WeightState::kSyncing) mark_weights_incomplete(reason);
  });
}

std::vector<std::pair<std::string, uint32_t>> Engine::Loop::weight_checksums() {
  std::vector<std::pair<std::string, uint32_t>> sums;
  run_command([&] {
    for (auto& item : model_->named_parameters()) {
      const torch::Tensor bytes = item.value().detach().to(torch::kCPU).contiguous();
      sums.emplace_back(item.key(), crc32(bytes.data_ptr(), bytes.nbytes()));
    }
  });
  return sums;
}

std::vector<std::pair<std::string, at::Tensor>> Engine::Loop::parameters() {
  std::vector<std::pair<std::string, at::Tensor>> named;
  run_command([&] {
    for (auto& item : model_->named_parameters()) named.emplace_back(item.key(), item.value());
  });
  return named;
}

void Engine::Loop::move_parameters(const std::vector<std::pair<std::string, at::Tensor>>& storage) {
  run_command([&] {
    std::map<std::string, torch::Tensor> parameters;
    for (auto& item : model_->named_parameters()) parameters[item.key()] = item.value();
    for (const auto& [name, place] : storage) {
      auto found = parameters.find(name);
      if (found == parameters.end() || place.sizes() != found->second.sizes() ||
          place.scalar_type() != found->second.scalar_type() ||
          place.device() != found->second.device()) {
        throw Error("move_parameters: '" + name + "' " +
                    (found == parameters.end()
                         ? std::string("is not a parameter of the model")
                         : "is " + c10::str(found->second.sizes()) + " " +
                               c10::toString(found->second.scalar_type()) + ", its new place " +
                               c10::str(place.sizes()) + " " + c10::toString(place.scalar_type())));
      }
    }
    torch::NoGradGuard no_grad;
    for (const auto& [name, place] : storage) {
      torch::Tensor& parameter = parameters.at(name);
      place.copy_(parameter);
      parameter.set_data(place);  // every module holding the parameter now reads `place`
    }
  });
}

int64_t Engine::Loop::syncing_version() {
  int64_t version = -1;
  run_command([&] {
    if (weight_state_ == WeightState::kSyncing) version = sync_version_;
  });
  return version;
}

void Engine::Loop::parameters_written(const std::vector<std::string>& names) {
  run_command([&] {
    if (weight_state_ != WeightState::kSyncing) {
      throw Error(
          "parameters_written: no weight sync is in progress; call begin_weight_sync "
          "first");
    }
    for (const std::string& name : names) synced_parameters_.insert(name);
    sync_deadline_ = std::chrono::steady_clock::now() + sync_timeout_;
  });
}

void Engine::Loop::mark_weights_incomplete(const std::string& reason) {
  weight_state_ = WeightState::kIncomplete;
  synced_parameters_.clear();
  std::deque<std::shared_ptr<RequestState>> late;  // submitted since the loop last looked
  {
    std::lock_guard<std::mutex> lock(mutex_);
    weights_incomplete_reason_ = reason;
    late.swap(incoming_);
  }
  for (auto& state : late) admit(std::move(state));
  OOZE_LOG(ERROR) << "rollout engine: " << reason
                  << "; refusing to generate until a complete weight sync arrives";
  abort_all("weights incomplete: " + reason);
}

void Engine::Loop::publish_stats() {
  EngineStats stats = totals_;
  stats.running_sequences = scheduler_->num_running_samples();
  int64_t waiting = 0;
  for (const auto& s : scheduler_->waiting()) waiting += s->fan_out;
  stats.waiting_sequences = waiting;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& state : incoming_) stats.waiting_sequences += state->request.sampling.n;
  }
  stats.total_blocks = blocks_->num_blocks();
  stats.free_blocks = blocks_->num_free_blocks();
  stats.cached_blocks = blocks_->num_cached_blocks();
  stats.weight_version = weight_version_;
  stats.paused = paused_;
  stats.sleeping = sleeping_;
  stats.syncing_weights = weight_state_ == WeightState::kSyncing;
  stats.weights_incomplete = weight_state_ == WeightState::kIncomplete;
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_ = stats;
}

// ---------------------------------------------------------------------------------------------

Engine::Engine(EngineOptions options) : loop_(std::make_unique<Loop>(std::move(options))) {}
Engine::~Engine() = default;

std::string Engine::submit(GenerateRequest request, OutputCallback on_update) {
  return loop_->submit(std::move(request), std::move(on_update));
}

std::vector<GenerateOutput> Engine::generate(GenerateRequest request) {
  const int64_t n = request.sampling.n;
  auto outputs = std::make_shared<std::vector<GenerateOutput>>(std::max<int64_t>(n, 1));
  auto remaining = std::make_shared<std::atomic<int64_t>>(n);
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  loop_->submit(std::move(request), [outputs, remaining, done](const GenerateOutput& output) {
    if (!output.finished) return;
    (*outputs)[output.index] = output;
    if (--*remaining == 0) done->set_value();
  });
  finished.get();
  return std::move(*outputs);
}

void Engine::abort(const std::string& request_id) { loop_->abort(request_id); }
void Engine::abort_all() { loop_->abort_all("aborted by request"); }
void Engine::pause_generation(bool abort_in_flight) { loop_->pause(abort_in_flight); }
void Engine::continue_generation() { loop_->resume(); }
void Engine::flush_cache() { loop_->flush_cache(); }
void Engine::release_memory() { loop_->release_memory(); }
void Engine::resume_memory() { loop_->resume_memory(); }
void Engine::load_weights(const std::vector<std::pair<std::string, at::Tensor>>& named_tensors,
                          std::optional<int64_t> new_version) {
  loop_->load_weights(named_tensors, new_version);
}
void Engine::begin_weight_sync(int64_t version, bool abort_in_flight,
                               std::chrono::milliseconds timeout, bool partial) {
  loop_->begin_weight_sync(version, abort_in_flight, timeout, partial);
}
void Engine::load_weight_bucket(
    const std::vector<std::pair<std::string, at::Tensor>>& named_tensors) {
  loop_->load_weight_bucket(named_tensors);
}
void Engine::finish_weight_sync(int64_t version) { loop_->finish_weight_sync(version); }
void Engine::abort_weight_sync(const std::string& reason) { loop_->abort_weight_sync(reason); }
std::vector<std::pair<std::string, uint32_t>> Engine::weight_checksums() {
  return loop_->weight_checksums();
}
std::vector<std::pair<std::string, at::Tensor>> Engine::parameters() { return loop_->parameters(); }
void Engine::move_parameters(const std::vector<std::pair<std::string, at::Tensor>>& storage) {
  loop_->move_parameters(storage);
}
void Engine::parameters_written(const std::vector<std::string>& names) {
  loop_->parameters_written(names);
}
int64_t Engine::syncing_version() { return loop_->syncing_version(); }
EngineStats Engine::stats() const { return loop_->stats(); }
const EngineInfo& Engine::info() const { return loop_->info(); }
const models::Tokenizer& Engine::tokenizer() const { return loop_->tokenizer(); }
const models::ModelConfig& Engine::model_config() const { return loop_->config(); }

}  // namespace ooze::engine
