// cereal serialize functions for the engine's requests, outputs, options, statistics and
// description, so they can be arguments and results of actor calls (rollout_engine_actor.h)
// or be saved with any cereal binary archive. Found by argument-dependent lookup, so including
// this header is all a caller needs.
//
// FinishReason travels as int32 and is range-checked on the way in: the bytes may come from
// the network, and an out-of-range value would otherwise pass unnoticed.
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "engine/sampling_params.h"

namespace ooze::engine {

template <class Archive>
void serialize(Archive& ar, SamplingParams& params) {
  ar(params.temperature, params.top_p, params.top_k, params.min_p, params.max_new_tokens,
     params.stop, params.stop_token_ids, params.ignore_eos, params.n, params.seed,
     params.skip_special_tokens);
}

template <class Archive>
void serialize(Archive& ar, GenerateRequest& request) {
  ar(request.id, request.input_ids, request.sampling, request.return_logprob,
     request.top_logprobs_num, request.stream, request.logprob_start_len);
}

template <class Archive>
void serialize(Archive& ar, TopLogProb& entry) {
  ar(entry.token_id, entry.logprob);
}

namespace detail {

// The finish reason as it travels: cereal's own enum support would accept any value.
inline FinishReason finish_reason_from_code(int32_t code) {
  if (code < static_cast<int32_t>(FinishReason::kNone) ||
      code > static_cast<int32_t>(FinishReason::kAbort)) {
    throw FormatError("a serialized GenerateOutput has finish reason code " + std::to_string(code) +
                      ", which names no FinishReason; the sender and receiver disagree on the "
                      "format or the bytes are corrupt");
  }
  return static_cast<FinishReason>(code);
}

}  // namespace detail

template <class Archive>
void save(Archive& ar, const GenerateOutput& output) {
  ar(output.request_id, output.index, output.output_ids, output.text, output.output_logprobs,
     output.top_logprobs, output.finished, static_cast<int32_t>(output.finish_reason),
     output.matched_stop, output.matched_token, output.abort_message, output.prompt_tokens,
     output.cached_tokens, output.weight_version, output.weight_versions,
     output.output_weight_versions, output.input_logprobs, output.input_top_logprobs);
}

template <class Archive>
void load(Archive& ar, GenerateOutput& output) {
  int32_t finish_reason = 0;
  ar(output.request_id, output.index, output.output_ids, output.text, output.output_logprobs,
     output.top_logprobs, output.finished, finish_reason, output.matched_stop, output.matched_token,
     output.abort_message, output.prompt_tokens, output.cached_tokens, output.weight_version,
     output.weight_versions, output.output_weight_versions, output.input_logprobs,
     output.input_top_logprobs);
  output.finish_reason = detail::finish_reason_from_code(finish_reason);
}

template <class Archive>
void save(Archive& ar, const EngineOptions& options) {
  save_options(ar, options);
}
template <class Archive>
void load(Archive& ar, EngineOptions& options) {
  load_options(ar, options);
}

template <class Archive>
void serialize(Archive& ar, EngineStats& stats) {
  ar(stats.running_sequences, stats.waiting_sequences, stats.total_blocks, stats.free_blocks,
     stats.cached_blocks, stats.prompt_tokens, stats.cached_prompt_tokens,
     stats.computed_prefill_tokens, stats.generated_tokens, stats.preemptions, stats.steps,
     stats.weight_version, stats.paused, stats.sleeping, stats.syncing_weights,
     stats.weights_incomplete);
}

template <class Archive>
void serialize(Archive& ar, EngineInfo& info) {
  ar(info.model_path, info.served_model_name, info.dtype, info.device, info.vocab_size,
     info.context_length, info.block_size, info.num_blocks, info.max_running_requests,
     info.eos_token_ids, info.kv_cache_bytes, info.kv_cache_sizing);
}

}  // namespace ooze::engine
