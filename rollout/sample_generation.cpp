#include "rollout/sample_generation.h"

#include <algorithm>

#include "core/checksum.h"
#include "core/error.h"
#include "models/tokenizer.h"

namespace ooze::rollout {

nlohmann::json RolloutSampling::sampling_params(int64_t max_new_tokens, int64_t n,
                                                const Sample& sample) const {
  nlohmann::json params = {{"temperature", temperature},
                           {"top_p", top_p},
                           {"top_k", top_k},
                           {"max_new_tokens", max_new_tokens},
                           {"skip_special_tokens", skip_special_tokens},
                           {"n", n}};
  if (!stop.empty()) params["stop"] = stop;
  if (!stop_token_ids.empty()) params["stop_token_ids"] = stop_token_ids;
  if (seed >= 0) {
    const uint64_t key =
        mix64(mix64(static_cast<uint64_t>(seed)) ^ mix64(static_cast<uint64_t>(sample.index)) ^
              static_cast<uint64_t>(sample.response_length));
    params["seed"] = static_cast<int64_t>(key >> 1);  // JSON readers want a signed 64-bit value
  }
  return params;
}

const OptionFields<RolloutSampling>& RolloutSampling::fields() {
  using O = RolloutSampling;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("rollout");
    f.add("rollout_temperature", &O::temperature, "Sampling temperature of rollouts (0: greedy).")
        .min(0);
    f.add("rollout_top_p", &O::top_p, "Top-p of rollouts.").greater_than(0).max(1);
    f.add("rollout_top_k", &O::top_k, "Top-k of rollouts (-1: every token).").min(-1);
    f.add("rollout_max_response_len", &O::max_response_len,
          "Response tokens per sample, every turn together.")
        .min(1);
    f.add("rollout_stop", &O::stop, "Stop strings (the response ends before them).");
    f.add("rollout_stop_token_ids", &O::stop_token_ids, "Token ids that end a response.").min(0);
    f.add("rollout_skip_special_tokens", &O::skip_special_tokens,
          "Leave special tokens out of response texts.");
    f.add("sampling_seed", &O::seed,
          "Seed every request from this, the sample's index and its response so far, so a rerun "
          "samples the same tokens; -1: the engines draw seeds.")
        .min(-1);
    return f;
  }();
  return fields;
}

void add_eval_sampling_fields(ConfigSchema& schema) {
  const RolloutSampling defaults;
  schema.section("eval");
  schema.add_double("eval_temperature", defaults.temperature, "Temperature of evaluations.")
      .min(0)
      .default_shown_as("--rollout-temperature");
  schema.add_double("eval_top_p", defaults.top_p, "Top-p of evaluations.")
      .greater_than(0)
      .max(1)
      .default_shown_as("--rollout-top-p");
  schema.add_int("eval_top_k", defaults.top_k, "Top-k of evaluations.")
      .min(-1)
      .default_shown_as("--rollout-top-k");
  schema
      .add_int("eval_max_response_len", defaults.max_response_len,
               "Response tokens per evaluation sample.")
      .min(1)
      .default_shown_as("--rollout-max-response-len");
}

RolloutSampling RolloutSampling::eval_from_config(const Config& config) {
  RolloutSampling sampling = fields().read(config);
  auto given = [&](const char* key) { return config.source(key) != ConfigSource::kDefault; };
  if (given("eval_temperature")) sampling.temperature = config.get<double>("eval_temperature");
  if (given("eval_top_p")) sampling.top_p = config.get<double>("eval_top_p");
  if (given("eval_top_k")) sampling.top_k = config.get<int64_t>("eval_top_k");
  if (given("eval_max_response_len")) {
    sampling.max_response_len = config.get<int64_t>("eval_max_response_len");
  }
  return sampling;
}

namespace {

const nlohmann::json& field(const nlohmann::json& object, const char* name, const char* where) {
  if (!object.is_object() || !object.contains(name)) {
    throw FormatError(std::string("engine answer: ") + where + " has no '" + name + "' field");
  }
  return object.at(name);
}

Sample::Status status_of(const nlohmann::json& finish_reason) {
  if (!finish_reason.is_object()) return Sample::Status::kAborted;
  const std::string type = finish_reason.value("type", "");
  if (type == "stop") return Sample::Status::kCompleted;
  if (type == "length") return Sample::Status::kTruncated;
  return Sample::Status::kAborted;
}

}  // namespace

void append_engine_output(Sample& sample, const nlohmann::json& output) {
  try {
    const nlohmann::json& meta = field(output, "meta_info", "the output");
    const std::vector<int64_t> ids = field(output, "output_ids", "the output");
    const nlohmann::json& logprobs = field(meta, "output_token_logprobs", "meta_info");
    if (logprobs.size() != ids.size()) {
      throw FormatError("engine answer: " + std::to_string(logprobs.size()) + " log-probs for " +
                        std::to_string(ids.size()) + " output tokens");
    }
    std::vector<int64_t> versions;
    if (meta.contains("output_token_weight_versions")) {
      versions = meta.at("output_token_weight_versions").get<std::vector<int64_t>>();
    } else {
      versions.assign(ids.size(), field(meta, "weight_version", "meta_info").get<int64_t>());
    }
    if (versions.size() != ids.size()) {
      throw FormatError("engine answer: weight versions do not cover the output tokens");
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      sample.tokens.push_back(ids[i]);
      sample.loss_mask.push_back(1);
      sample.rollout_log_probs.push_back(logprobs[i].at(0).get<float>());
      sample.weight_versions.push_back(versions[i]);
    }
    sample.response_length += static_cast<int64_t>(ids.size());
    sample.response += field(output, "text", "the output").get<std::string>();
    const nlohmann::json& finish = field(meta, "finish_reason", "meta_info");
    sample.status = status_of(finish);
    sample.abort_reason.clear();
    if (sample.status == Sample::Status::kAborted) {
      sample.abort_reason = finish.is_object() ? finish.value("message", "aborted") : "aborted";
    }
  } catch (const nlohmann::json::exception& error) {
    throw FormatError(std::string("engine answer for sample ") + std::to_string(sample.index) +
                      " is malformed: " + error.what());
  }
}

void append_non_policy_tokens(Sample& sample, const std::vector<int64_t>& ids,
                              const std::string& text) {
  for (int64_t id : ids) {
    sample.tokens.push_back(id);
    sample.loss_mask.push_back(0);
    sample.rollout_log_probs.push_back(0.0f);
    sample.weight_versions.push_back(-1);
  }
  sample.response_length += static_cast<int64_t>(ids.size());
  sample.response += text;
}

SampleGenerator::SampleGenerator(serving::Router& router, const models::Tokenizer& tokenizer,
                                 RolloutSampling sampling, const std::atomic<bool>* stop)
    : router_(router), tokenizer_(tokenizer), sampling_(std::move(sampling)), stop_(stop) {}

int64_t SampleGenerator::remaining_budget(const Sample& sample) const {
  return std::max<int64_t>(0, sampling_.max_response_len - sample.response_length);
}

void SampleGenerator::generate_group(std::vector<Sample>& group) {
  if (group.empty()) return;
  if (stopping()) {
    for (Sample& sample : group) {
      sample.status = Sample::Status::kAborted;
      sample.abort_reason = "the rollout had enough groups before this one started";
    }
    return;
  }
  const Sample& first = group.front();
  const nlohmann::json body = {
      {"input_ids", first.tokens},
      {"sampling_params", sampling_.sampling_params(remaining_budget(first),
                                                    static_cast<int64_t>(group.size()), first)},
      {"return_logprob", true}};
  const nlohmann::json answer = send(body);
  const nlohmann::json outputs = group.size() == 1 ? nlohmann::json::array({answer}) : answer;
  if (!outputs.is_array() || outputs.size() != group.size()) {
    throw FormatError("engine answer: expected " + std::to_string(group.size()) +
                      " outputs for the group of prompt " + std::to_string(first.group_index));
  }
  for (size_t i = 0; i < group.size(); ++i) {
    count(outputs[i]);
    append_engine_output(group[i], outputs[i]);
  }
}

std::string SampleGenerator::generate(Sample& sample, int64_t max_new_tokens) {
  const int64_t budget = remaining_budget(sample);
  if (budget == 0) {
    if (sample.status == Sample::Status::kPending) sample.status = Sample::Status::kTruncated;
    return "";
  }
  if (stopping()) {
    sample.status = Sample::Status::kAborted;
    sample.abort_reason = "the rollout had enough groups before this request started";
    return "";
  }
  const int64_t max_new = max_new_tokens > 0 ? std::min(max_new_tokens, budget) : budget;
  const nlohmann::json body = {{"input_ids", sample.tokens},
                               {"sampling_params", sampling_.sampling_params(max_new, 1, sample)},
                               {"return_logprob", true}};
  const nlohmann::json answer = send(body);
  const size_t text_before = sample.response.size();
  count(answer);
  append_engine_output(sample, answer);
  // A turn cut by the caller's max_new_tokens is not the sample's truncation: only the whole
  // response budget is.
  if (sample.status == Sample::Status::kTruncated && remaining_budget(sample) > 0) {
    sample.status = Sample::Status::kCompleted;
  }
  return sample.response.substr(text_before);
}

nlohmann::json SampleGenerator::send(const nlohmann::json& body) {
  serving::RouteOptions route;
  route.retry = true;  // a failed engine's request goes to another live one
  ++requests_;
  return router_.generate(body, route);
}

void SampleGenerator::count(const nlohmann::json& output) {
  if (!output.is_object()) return;
  const nlohmann::json meta = output.value("meta_info", nlohmann::json::object());
  prompt_tokens_ += meta.value("prompt_tokens", int64_t{0});
  cached_prompt_tokens_ += meta.value("cached_tokens", int64_t{0});
  generated_tokens_ += meta.value("completion_tokens", int64_t{0});
  const nlohmann::json finish = meta.value("finish_reason", nlohmann::json());
  if (!finish.is_object() || finish.value("type", "") == "abort") return;
  ++finished_outputs_;
  // SGLang's "matched": the stop string, or the token id (a stop token's or EOS).
  const nlohmann::json matched = finish.value("matched", nlohmann::json());
  if (matched.is_string()) ++stopped_on_stop_string_;
  if (matched.is_number_integer()) {
    const std::vector<int64_t>& ids = sampling_.stop_token_ids;
    if (std::find(ids.begin(), ids.end(), matched.get<int64_t>()) != ids.end()) {
      ++stopped_on_stop_token_;
    }
  }
}

GenerationStats SampleGenerator::stats() const {
  GenerationStats stats;
  stats.requests = requests_.load();
  stats.prompt_tokens = prompt_tokens_.load();
  stats.cached_prompt_tokens = cached_prompt_tokens_.load();
  stats.generated_tokens = generated_tokens_.load();
  stats.finished_outputs = finished_outputs_.load();
  stats.stopped_on_stop_string = stopped_on_stop_string_.load();
  stats.stopped_on_stop_token = stopped_on_stop_token_.load();
  return stats;
}

int64_t SampleGenerator::append_observation(Sample& sample, const std::string& text) {
  std::vector<int64_t> ids = tokenizer_.encode(text);
  const bool cut = static_cast<int64_t>(ids.size()) > remaining_budget(sample);
  if (cut) ids.resize(static_cast<size_t>(remaining_budget(sample)));
  append_non_policy_tokens(sample, ids, cut ? tokenizer_.decode(ids) : text);
  if (remaining_budget(sample) == 0) sample.status = Sample::Status::kTruncated;
  return static_cast<int64_t>(ids.size());
}

std::vector<int64_t> SampleGenerator::tokenize(const std::string& text) const {
  return tokenizer_.encode(text);
}

std::string SampleGenerator::detokenize(const std::vector<int64_t>& ids) const {
  return tokenizer_.decode(ids);
}

}  // namespace ooze::rollout
