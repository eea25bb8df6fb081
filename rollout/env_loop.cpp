#include "rollout/env_loop.h"

#include <chrono>

#include "core/error.h"
#include "serving/http_client.h"

namespace ooze::rollout {

namespace {

// Something the environment did wrong, said in a sample's abort_reason.
struct EnvironmentFailure : Error {
  using Error::Error;
};

std::string observation_text(const nlohmann::json& answer, const std::string& endpoint) {
  const nlohmann::json observation = answer.value("observation", nlohmann::json());
  if (observation.is_string()) return observation.get<std::string>();
  if (observation.is_object() && observation.value("text", nlohmann::json()).is_string()) {
    return observation["text"].get<std::string>();
  }
  throw EnvironmentFailure(endpoint +
                           " answered an observation that is neither a string nor an "
                           "object with a string \"text\": " +
                           observation.dump().substr(0, 200));
}

}  // namespace

EnvLoop::EnvLoop(const std::string& url, int64_t max_turns, double timeout_s)
    : url_(url), max_turns_(max_turns), timeout_s_(timeout_s) {
  const std::string scheme = "http://";
  const size_t path_at = url.rfind(scheme, 0) == 0 ? url.find('/', scheme.size()) : url.find('/');
  server_ = serving::HttpUrl::parse(url.substr(0, path_at)).to_string();  // ConfigError if bad
  if (path_at != std::string::npos) path_ = url.substr(path_at);
  while (!path_.empty() && path_.back() == '/') path_.pop_back();
}

nlohmann::json EnvLoop::post(const std::string& endpoint, const nlohmann::json& body) const {
  serving::HttpClientOptions options;
  serving::HttpClient client(server_, options);
  serving::HttpRequest request;
  request.method = "POST";
  request.target = path_ + endpoint;
  request.body = body.dump();
  request.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  serving::HttpResponse response;
  try {
    response = client.send(request);
  } catch (const std::exception& e) {
    throw EnvironmentFailure("POST " + endpoint + " failed: " + e.what());
  }
  if (!response.ok()) {
    throw EnvironmentFailure("POST " + endpoint + " answered " + std::to_string(response.status) +
                             ": " + response.body.substr(0, 300));
  }
  nlohmann::json answer = nlohmann::json::parse(response.body, nullptr, false);
  if (!answer.is_object()) {
    throw EnvironmentFailure(
        "POST " + endpoint +
        " answered something that is not a JSON object: " + response.body.substr(0, 200));
  }
  const nlohmann::json reward = answer.value("reward", nlohmann::json());
  if (!reward.is_null() && !reward.is_number()) {
    throw EnvironmentFailure("POST " + endpoint +
                             " answered a reward that is not a number: " + reward.dump());
  }
  if (!answer.value("done", nlohmann::json(false)).is_boolean()) {
    throw EnvironmentFailure("POST " + endpoint + " answered a \"done\" that is not true or false");
  }
  return answer;
}

std::vector<Sample> EnvLoop::run(const Sample& input, SampleGenerator& generator) const {
  Sample sample = input;
  // A new episode: whatever an earlier, interrupted one appended is dropped.
  sample.tokens.resize(static_cast<size_t>(input.prompt_length()));
  sample.response.clear();
  sample.response_length = 0;
  sample.loss_mask.clear();
  sample.rollout_log_probs.clear();
  sample.weight_versions.clear();
  sample.status = Sample::Status::kPending;
  const std::string episode = "sample-" + std::to_string(sample.index);
  double episode_return = 0;
  int64_t turns = 0;
  try {
    const nlohmann::json reset = post("/reset", {{"seed", sample.index},
                                                 {"episode_id", episode},
                                                 {"sample",
                                                  {{"index", sample.index},
                                                   {"group_index", sample.group_index},
                                                   {"prompt", sample.prompt},
                                                   {"label", sample.label},
                                                   {"metadata", sample.metadata}}}});
    const std::string first = observation_text(reset, "/reset");
    const std::vector<int64_t> ids = generator.tokenize(first);
    sample.tokens.insert(sample.tokens.end(), ids.begin(), ids.end());
    sample.prompt += first;
    bool done = reset.value("done", false);
    while (!done && turns < max_turns_ && generator.remaining_budget(sample) > 0) {
      const std::string turn = generator.generate(sample);
      ++turns;
      if (sample.status == Sample::Status::kAborted) break;
      const nlohmann::json step =
          post("/step", {{"episode_id", episode}, {"action", {{"text", turn}}}});
      if (step.value("reward", nlohmann::json()).is_number()) {
        episode_return += step["reward"].get<double>();
      }
      done = step.value("done", false);
      if (!done) generator.append_observation(sample, observation_text(step, "/step"));
    }
    sample.reward = episode_return;
  } catch (const EnvironmentFailure& e) {
    sample.status = Sample::Status::kAborted;
    sample.abort_reason = "environment " + url_ + ": " + e.what();
    sample.metrics["agent/aborted_env"] = 1;
    sample.reward = 0;
  }
  sample.metrics["agent/turns"] = turns;
  return {sample};
}

}  // namespace ooze::rollout
