#include "serving/generate_protocol.h"

#include "core/error.h"
#include "engine/prompt_checks.h"
#include "models/tokenizer.h"
#include "models/unicode_utils.h"
#include "serving/json_fields.h"

namespace ooze::serving {
namespace {

// sampling_params fields SGLang users send that only have a neutral value here: accepted at that
// value, refused otherwise (silently ignoring them would change what the caller gets).
void require_neutral(JsonFields& fields, const std::string& key, double neutral) {
  if (std::optional<double> value = fields.number(key); value && *value != neutral) {
    throw engine::InvalidRequest(fields.field_path(key), "is not supported by this server; only " +
                                                             std::to_string(neutral) +
                                                             " (no effect) is accepted");
  }
}

engine::SamplingParams parse_sampling_params(const nlohmann::json& object, const std::string& path,
                                             bool* no_stop_trim) {
  JsonFields fields(object, path);
  engine::SamplingParams params;
  if (auto v = fields.number("temperature")) params.temperature = *v;
  if (auto v = fields.number("top_p")) params.top_p = *v;
  if (auto v = fields.integer("top_k")) params.top_k = *v;
  if (auto v = fields.number("min_p")) params.min_p = *v;
  if (auto v = fields.integer("max_new_tokens")) params.max_new_tokens = *v;
  if (const nlohmann::json* stop = fields.raw("stop")) {
    params.stop = json_string_or_strings(*stop, fields.field_path("stop"));
  }
  if (const nlohmann::json* ids = fields.raw("stop_token_ids")) {
    params.stop_token_ids = json_integer_list(*ids, fields.field_path("stop_token_ids"));
  }
  if (auto v = fields.boolean("ignore_eos")) params.ignore_eos = *v;
  if (auto v = fields.integer("n")) params.n = *v;
  if (auto v = fields.integer("seed")) {
    if (*v < 0) throw engine::InvalidRequest(fields.field_path("seed"), "must be >= 0");
    params.seed = static_cast<uint64_t>(*v);
  }
  if (auto v = fields.boolean("skip_special_tokens")) params.skip_special_tokens = *v;
  *no_stop_trim = fields.boolean("no_stop_trim").value_or(false);
  fields.boolean("spaces_between_special_tokens");
  require_neutral(fields, "frequency_penalty", 0.0);
  require_neutral(fields, "presence_penalty", 0.0);
  require_neutral(fields, "repetition_penalty", 1.0);
  require_neutral(fields, "min_new_tokens", 0.0);
  fields.reject_unknown();
  // validate() names fields "sampling_params.x"; for a per-prompt list that is close enough.
  params.validate();
  return params;
}

nlohmann::json token_text(int64_t id, bool with_text, const models::Tokenizer& tokenizer) {
  return with_text ? nlohmann::json(models::utf8_lossy(tokenizer.decode({id})))
                   : nlohmann::json(nullptr);
}

nlohmann::json logprob_triples(const std::vector<float>& logprobs, const std::vector<int64_t>& ids,
                               bool with_text, const models::Tokenizer& tokenizer) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < logprobs.size() && i < ids.size(); ++i) {
    out.push_back({logprobs[i], ids[i], token_text(ids[i], with_text, tokenizer)});
  }
  return out;
}

nlohmann::json top_logprob_triples(const std::vector<engine::TopLogProb>& position, bool with_text,
                                   const models::Tokenizer& tokenizer) {
  std::vector<float> logprobs;
  std::vector<int64_t> ids;
  for (const engine::TopLogProb& entry : position) {
    logprobs.push_back(entry.logprob);
    ids.push_back(entry.token_id);
  }
  return logprob_triples(logprobs, ids, with_text, tokenizer);
}

// SGLang's input_token_logprobs (and input_top_logprobs): one entry per prompt token from
// logprob_start_len on, the first prompt token's null (nothing predicts it). The engine's lists
// start at max(logprob_start_len, 1) (engine/request.h); SGLang leaves the entry at a start > 0
// null too, where this server gives its value.
void add_input_logprobs(nlohmann::json& meta, const engine::GenerateRequest& request,
                        const engine::GenerateOutput& output, bool with_text,
                        const models::Tokenizer& tokenizer) {
  const int64_t start = request.logprob_start_len;
  const int64_t first = std::max<int64_t>(start, 1);
  nlohmann::json tokens = nlohmann::json::array();
  nlohmann::json tops = nlohmann::json::array();
  for (int64_t p = start; p < static_cast<int64_t>(request.input_ids.size()); ++p) {
    const int64_t id = request.input_ids[static_cast<size_t>(p)];
    // Null for position 0, and for positions not computed yet (a streamed prefill).
    if (p < first || p - first >= static_cast<int64_t>(output.input_logprobs.size())) {
      tokens.push_back({nullptr, id, token_text(id, with_text, tokenizer)});
      tops.push_back(nullptr);
      continue;
    }
    const size_t j = static_cast<size_t>(p - first);
    tokens.push_back({output.input_logprobs[j], id, token_text(id, with_text, tokenizer)});
    tops.push_back(j < output.input_top_logprobs.size()
                       ? top_logprob_triples(output.input_top_logprobs[j], with_text, tokenizer)
                       : nlohmann::json(nullptr));
  }
  meta["input_token_logprobs"] = std::move(tokens);
  if (request.top_logprobs_num > 0) meta["input_top_logprobs"] = std::move(tops);
}

}  // namespace

size_t GenerateCall::num_outputs() const {
  size_t total = 0;
  for (const engine::GenerateRequest& request : requests)
    total += static_cast<size_t>(request.sampling.n);
  return total;
}

GenerateCall parse_generate_call(const nlohmann::json& body, const models::Tokenizer& tokenizer,
                                 const engine::EngineInfo& info) {
  JsonFields fields(body, "");
  GenerateCall call;
  const nlohmann::json* text = fields.raw("text");
  const nlohmann::json* input_ids = fields.raw("input_ids");
  if (text && input_ids) {
    throw engine::InvalidRequest("input_ids", "give either text or input_ids, not both");
  }
  if (!text && !input_ids)
    throw engine::InvalidRequest("text", "the prompt is missing: give text or input_ids");

  std::vector<std::vector<int64_t>> prompts;
  if (text) {
    if (text->is_string()) {
      prompts.push_back(engine::tokenize_prompt(tokenizer, text->get<std::string>(), "text", info));
    } else if (text->is_array()) {
      call.batch = true;
      for (size_t i = 0; i < text->size(); ++i) {
        const std::string field = "text[" + std::to_string(i) + "]";
        prompts.push_back(
            engine::tokenize_prompt(tokenizer, json_string((*text)[i], field), field, info));
      }
    } else {
      throw engine::InvalidRequest("text", "must be a string or a list of strings");
    }
  } else {
    const bool nested = input_ids->is_array() && !input_ids->empty() && (*input_ids)[0].is_array();
    if (nested) {
      call.batch = true;
      for (size_t i = 0; i < input_ids->size(); ++i) {
        const std::string field = "input_ids[" + std::to_string(i) + "]";
        prompts.push_back(json_integer_list((*input_ids)[i], field));
        engine::check_prompt_ids(prompts.back(), field, info);
      }
    } else {
      prompts.push_back(json_integer_list(*input_ids, "input_ids"));
      engine::check_prompt_ids(prompts.back(), "input_ids", info);
    }
  }
  if (prompts.empty()) {
    throw engine::InvalidRequest(text ? "text" : "input_ids", "the batch is empty");
  }

  // One sampling_params object for all prompts, or (batch) one per prompt.
  std::vector<engine::SamplingParams> params;
  std::vector<bool> no_stop_trim;
  const nlohmann::json* sampling = fields.raw("sampling_params");
  const nlohmann::json empty = nlohmann::json::object();
  if (sampling && sampling->is_array() && call.batch) {
    if (sampling->size() != prompts.size()) {
      throw engine::InvalidRequest("sampling_params",
                                   "has " + std::to_string(sampling->size()) + " entries for " +
                                       std::to_string(prompts.size()) + " prompts");
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      bool trim = false;
      params.push_back(parse_sampling_params((*sampling)[i],
                                             "sampling_params[" + std::to_string(i) + "]", &trim));
      no_stop_trim.push_back(trim);
    }
  } else {
    bool trim = false;
    const engine::SamplingParams shared =
        parse_sampling_params(sampling ? *sampling : empty, "sampling_params", &trim);
    params.assign(prompts.size(), shared);
    no_stop_trim.assign(prompts.size(), trim);
  }

  std::vector<std::string> rids;
  if (const nlohmann::json* rid = fields.raw("rid")) {
    if (call.batch) {
      if (!rid->is_array() || rid->size() != prompts.size()) {
        throw engine::InvalidRequest("rid", "a batch of " + std::to_string(prompts.size()) +
                                                " prompts needs a list of as many request ids");
      }
      for (size_t i = 0; i < rid->size(); ++i) {
        rids.push_back(json_string((*rid)[i], "rid[" + std::to_string(i) + "]"));
      }
    } else {
      rids.push_back(json_string(*rid, "rid"));
    }
  }

  const bool return_logprob = fields.boolean("return_logprob").value_or(false);
  const int64_t top_logprobs_num = fields.integer("top_logprobs_num").value_or(0);
  if (top_logprobs_num < 0 || top_logprobs_num > info.vocab_size) {
    throw engine::InvalidRequest("top_logprobs_num",
                                 "must be in [0, " + std::to_string(info.vocab_size) + "], got " +
                                     std::to_string(top_logprobs_num));
  }
  // The first prompt position to score (-1: none): one for all prompts, or (batch) a list.
  std::vector<int64_t> logprob_start_lens(prompts.size(), -1);
  if (const nlohmann::json* starts = fields.raw("logprob_start_len")) {
    if (starts->is_array() && call.batch) {
      logprob_start_lens = json_integer_list(*starts, "logprob_start_len");
      if (logprob_start_lens.size() != prompts.size()) {
        throw engine::InvalidRequest(
            "logprob_start_len", "has " + std::to_string(logprob_start_lens.size()) +
                                     " entries for " + std::to_string(prompts.size()) + " prompts");
      }
    } else {
      logprob_start_lens.assign(prompts.size(), fields.integer("logprob_start_len").value_or(-1));
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t start = logprob_start_lens[i];
    const int64_t length = static_cast<int64_t>(prompts[i].size());
    if (start < -1 || start >= length) {
      throw engine::InvalidRequest(
          "logprob_start_len", "must be -1 (no prompt log-probs) or a prompt position in [0, " +
                                   std::to_string(length - 1) + "] (prompt " + std::to_string(i) +
                                   " has " + std::to_string(length) + " tokens), got " +
                                   std::to_string(start));
    }
  }
  call.return_text_in_logprobs = fields.boolean("return_text_in_logprobs").value_or(false);
  call.stream = fields.boolean("stream").value_or(false);
  fields.reject_unknown();

  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::GenerateRequest request;
    request.id = rids.empty() ? "" : rids[i];
    request.input_ids = std::move(prompts[i]);
    request.sampling = params[i];
    request.return_logprob = return_logprob || top_logprobs_num > 0;
    request.top_logprobs_num = top_logprobs_num;
    // As SGLang: prompt log-probs come with return_logprob only.
    request.logprob_start_len = request.return_logprob ? logprob_start_lens[i] : -1;
    request.stream = call.stream;
    call.requests.push_back(std::move(request));
  }
  call.no_stop_trim = std::move(no_stop_trim);
  return call;
}

nlohmann::json generate_output_json(const GenerateCall& call, size_t request_index,
                                    const engine::GenerateOutput& output,
                                    const models::Tokenizer& tokenizer) {
  const engine::GenerateRequest& request = call.requests[request_index];
  nlohmann::json finish_reason = nullptr;
  if (output.finished) {
    switch (output.finish_reason) {
      case engine::FinishReason::kStop:
        finish_reason = {{"type", "stop"}};
        if (output.matched_stop) {
          finish_reason["matched"] = *output.matched_stop;
        } else if (output.matched_token) {
          finish_reason["matched"] = *output.matched_token;
        }
        break;
      case engine::FinishReason::kLength:
        finish_reason = {{"type", "length"}, {"length", output.completion_tokens()}};
        break;
      case engine::FinishReason::kAbort:
        finish_reason = {{"type", "abort"}, {"message", output.abort_message}};
        break;
      case engine::FinishReason::kNone:
        break;
    }
  }
  std::string text = output.text;
  if (call.no_stop_trim[request_index] && output.finished && output.matched_stop) {
    text += *output.matched_stop;
  }
  nlohmann::json meta = {{"id", output.request_id},
                         {"finish_reason", finish_reason},
                         {"prompt_tokens", output.prompt_tokens},
                         {"completion_tokens", output.completion_tokens()},
                         {"cached_tokens", output.cached_tokens},
                         {"weight_version", output.weight_version},
                         {"weight_versions", output.weight_versions}};
  // Tokens sampled under more than one version (the request was kept through a weight
  // update): the version of every output token, in order.
  if (output.weight_versions.size() > 1) {
    meta["output_token_weight_versions"] = output.output_weight_versions;
  }
  if (request.return_logprob) {
    meta["output_token_logprobs"] = logprob_triples(output.output_logprobs, output.output_ids,
                                                    call.return_text_in_logprobs, tokenizer);
  }
  if (request.top_logprobs_num > 0) {
    nlohmann::json top = nlohmann::json::array();
    for (const std::vector<engine::TopLogProb>& position : output.top_logprobs) {
      top.push_back(top_logprob_triples(position, call.return_text_in_logprobs, tokenizer));
    }
    meta["output_top_logprobs"] = std::move(top);
  }
  if (request.logprob_start_len >= 0) {
    add_input_logprobs(meta, request, output, call.return_text_in_logprobs, tokenizer);
  }
  return {{"text", text}, {"output_ids", output.output_ids}, {"meta_info", std::move(meta)}};
}

nlohmann::json generate_request_json(const engine::GenerateRequest& request) {
  const engine::SamplingParams& sampling = request.sampling;
  nlohmann::json params = {{"temperature", sampling.temperature},
                           {"top_p", sampling.top_p},
                           {"top_k", sampling.top_k},
                           {"min_p", sampling.min_p},
                           {"max_new_tokens", sampling.max_new_tokens},
                           {"ignore_eos", sampling.ignore_eos},
                           {"n", sampling.n},
                           {"skip_special_tokens", sampling.skip_special_tokens}};
  if (!sampling.stop.empty()) params["stop"] = sampling.stop;
  if (!sampling.stop_token_ids.empty()) params["stop_token_ids"] = sampling.stop_token_ids;
  // Seeds reach requests as JSON integers >= 0, so they fit a signed 64-bit value.
  if (sampling.seed) params["seed"] = static_cast<int64_t>(*sampling.seed);
  nlohmann::json body = {{"input_ids", request.input_ids},
                         {"sampling_params", std::move(params)},
                         {"return_logprob", request.return_logprob},
                         {"top_logprobs_num", request.top_logprobs_num},
                         {"stream", request.stream}};
  if (request.logprob_start_len >= 0) body["logprob_start_len"] = request.logprob_start_len;
  if (!request.id.empty()) body["rid"] = request.id;
  return body;
}

namespace {

// (logprob, token id) of each [logprob, token_id, text] triple; a null log-prob (the first
// prompt token's) is skipped.
void read_triples(const nlohmann::json& triples, std::vector<float>* logprobs,
                  std::vector<int64_t>* ids) {
  for (const nlohmann::json& triple : triples) {
    if (triple.at(0).is_null()) continue;
    logprobs->push_back(triple.at(0).get<float>());
    ids->push_back(triple.at(1).get<int64_t>());
  }
}

std::vector<engine::TopLogProb> read_top_triples(const nlohmann::json& position) {
  std::vector<float> logprobs;
  std::vector<int64_t> ids;
  read_triples(position, &logprobs, &ids);
  std::vector<engine::TopLogProb> entries;
  for (size_t i = 0; i < ids.size(); ++i) entries.push_back({ids[i], logprobs[i]});
  return entries;
}

}  // namespace

engine::GenerateOutput generate_output_from_json(const nlohmann::json& output) {
  engine::GenerateOutput out;
  try {
    out.text = output.at("text").get<std::string>();
    out.output_ids = output.at("output_ids").get<std::vector<int64_t>>();
    const nlohmann::json& meta = output.at("meta_info");
    out.request_id = meta.value("id", "");
    out.index = output.value("index", int64_t{0});
    out.prompt_tokens = meta.value("prompt_tokens", int64_t{0});
    out.cached_tokens = meta.value("cached_tokens", int64_t{0});
    out.weight_version = meta.value("weight_version", int64_t{0});
    out.weight_versions = meta.value("weight_versions", std::vector<int64_t>{});
    out.output_weight_versions =
        meta.value("output_token_weight_versions",
                   std::vector<int64_t>(out.output_ids.size(), out.weight_version));
    if (auto logprobs = meta.find("output_token_logprobs"); logprobs != meta.end()) {
      std::vector<int64_t> ids;
      read_triples(*logprobs, &out.output_logprobs, &ids);
    }
    if (auto top = meta.find("output_top_logprobs"); top != meta.end()) {
      for (const nlohmann::json& position : *top) {
        out.top_logprobs.push_back(read_top_triples(position));
      }
    }
    if (auto logprobs = meta.find("input_token_logprobs"); logprobs != meta.end()) {
      std::vector<int64_t> ids;
      read_triples(*logprobs, &out.input_logprobs, &ids);
    }
    if (auto top = meta.find("input_top_logprobs"); top != meta.end()) {
      for (const nlohmann::json& position : *top) {
        if (!position.is_null()) out.input_top_logprobs.push_back(read_top_triples(position));
      }
    }
    const nlohmann::json& finish = meta.at("finish_reason");
    out.finished = !finish.is_null();
    if (out.finished) {
      const std::string type = finish.at("type").get<std::string>();
      if (type == "stop") {
        out.finish_reason = engine::FinishReason::kStop;
        if (auto matched = finish.find("matched"); matched != finish.end()) {
          if (matched->is_string()) out.matched_stop = matched->get<std::string>();
          if (matched->is_number_integer()) out.matched_token = matched->get<int64_t>();
        }
      } else if (type == "length") {
        out.finish_reason = engine::FinishReason::kLength;
      } else if (type == "abort") {
        out.finish_reason = engine::FinishReason::kAbort;
        out.abort_message = finish.value("message", "");
      } else {
        throw FormatError("meta_info.finish_reason.type '" + type + "' is not stop/length/abort");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(std::string("a /generate output is malformed: ") + e.what());
  }
  return out;
}

std::string generate_param(const std::string& engine_field, const nlohmann::json& body) {
  if (engine_field == "input_ids" && body.is_object() && body.contains("text")) return "text";
  return engine_field;
}

}  // namespace ooze::serving
