#include "rollout/teacher_server.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/router.h"

namespace ooze::rollout {
namespace {

std::string sample_name(const Sample& sample) {
  return "sample " + std::to_string(sample.index) + " (group " +
         std::to_string(sample.group_index) + ")";
}

}  // namespace

TeacherServer::TeacherServer(std::vector<std::string> urls, std::chrono::milliseconds timeout) {
  for (const std::string& url : urls) urls_ += (urls_.empty() ? "" : ", ") + url;
  serving::RouterOptions options;
  options.engine_urls = std::move(urls);
  options.request_timeout_s = std::chrono::duration<double>(timeout).count();
  try {
    router_ = std::make_shared<serving::Router>(options);
  } catch (const ConfigError& e) {
    throw ConfigError("the distillation teacher at " + urls_ + ": " + e.what() +
                      " (--opd-teacher-url takes http://HOST:PORT of a server answering "
                      "/generate)");
  }
}

TeacherServer::~TeacherServer() = default;

std::vector<std::vector<float>> TeacherServer::response_log_probs(
    const std::vector<std::vector<int64_t>>& tokens,
    const std::vector<int64_t>& response_lengths) const {
  if (tokens.size() != response_lengths.size()) {
    throw Error("TeacherServer: " + std::to_string(tokens.size()) + " sequences but " +
                std::to_string(response_lengths.size()) + " response lengths");
  }
  return request(tokens, response_lengths, "",
                 [](size_t i) { return "sequence " + std::to_string(i); });
}

void TeacherServer::score(std::vector<Sample>& group) const {
  std::vector<Sample*> unscored;
  std::vector<std::vector<int64_t>> tokens;
  std::vector<int64_t> response_lengths;
  for (Sample& sample : group) {
    if (sample.response_length < 1 || !sample.teacher_log_probs.empty()) continue;
    unscored.push_back(&sample);
    tokens.push_back(sample.tokens);
    response_lengths.push_back(sample.response_length);
  }
  if (unscored.empty()) return;
  // The group's samples share their prompt: one engine prefills it once.
  const std::string key = "teacher-group-" + std::to_string(unscored.front()->group_index);
  std::vector<std::vector<float>> log_probs =
      request(tokens, response_lengths, key, [&](size_t i) { return sample_name(*unscored[i]); });
  for (size_t i = 0; i < unscored.size(); ++i) {
    unscored[i]->teacher_log_probs = std::move(log_probs[i]);
  }
}

double TeacherServer::busy_seconds() const {
  std::lock_guard<std::mutex> lock(busy_mutex_);
  double seconds = busy_seconds_;
  if (in_flight_ > 0) {
    seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  }
  return seconds;
}

void TeacherServer::begin_wait() const {
  std::lock_guard<std::mutex> lock(busy_mutex_);
  if (in_flight_++ == 0) busy_since_ = std::chrono::steady_clock::now();
}

void TeacherServer::end_wait() const {
  std::lock_guard<std::mutex> lock(busy_mutex_);
  if (--in_flight_ == 0) {
    busy_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  }
}

std::vector<std::vector<float>> TeacherServer::request(
    const std::vector<std::vector<int64_t>>& tokens, const std::vector<int64_t>& response_lengths,
    const std::string& routing_key, const std::function<std::string(size_t)>& name) const {
  if (tokens.empty()) return {};
  nlohmann::json starts = nlohmann::json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t length = static_cast<int64_t>(tokens[i].size());
    if (response_lengths[i] < 1 || response_lengths[i] >= length) {
      throw Error("TeacherServer: " + name(i) + " has " + std::to_string(length) +
                  " tokens and a response of " + std::to_string(response_lengths[i]) +
                  ": at least one of each is needed");
    }
    // One position early: SGLang leaves the first scored position null when it is not the
    // first token, so the response's own positions always come back as numbers.
    starts.push_back(length - response_lengths[i] - 1);
  }
  const nlohmann::json body = {{"input_ids", tokens},
                               {"sampling_params", {{"max_new_tokens", 0}}},
                               {"return_logprob", true},
                               {"logprob_start_len", starts}};
  auto names = [&] {
    std::string all;
    for (size_t i = 0; i < tokens.size(); ++i) all += (i == 0 ? "" : ", ") + name(i);
    return all;
  };
  serving::RouteOptions route;
  route.retry = true;  // scoring has no side effects: another engine may answer instead
  route.routing_key = routing_key;
  serving::RoutedResponse routed;
  begin_wait();
  try {
    routed = router_->forward("/generate", body, route);
  } catch (const std::exception& e) {
    end_wait();
    throw Error("the distillation teacher at " + urls_ + " could not score " + names() + ": " +
                e.what());
  }
  end_wait();
  const std::string where = "the distillation teacher at " + routed.engine_url;
  if (!routed.response.ok()) {
    throw Error(where + " answered HTTP " + std::to_string(routed.response.status) +
                " when scoring " + names() + ": " + routed.response.body.substr(0, 300));
  }
  const nlohmann::json answers = nlohmann::json::parse(routed.response.body, nullptr, false);
  if (!answers.is_array() || answers.size() != tokens.size()) {
    throw Error(where + " did not answer one result per sequence when scoring " + names() + " (" +
                std::to_string(tokens.size()) + " sent)");
  }
  std::vector<std::vector<float>> log_probs;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const nlohmann::json* scored = nullptr;
    if (answers[i].contains("meta_info") && answers[i]["meta_info"].is_object()) {
      const nlohmann::json& meta = answers[i]["meta_info"];
      if (meta.contains("input_token_logprobs")) scored = &meta["input_token_logprobs"];
    }
    const int64_t start = starts[i].get<int64_t>() + 1;  // the first response token
    if (scored == nullptr || !scored->is_array() ||
        static_cast<int64_t>(scored->size()) != response_lengths[i] + 1) {
      throw Error(where + ": " + name(i) + " came back without " +
                  std::to_string(response_lengths[i] + 1) +
                  " input_token_logprobs (does the server support logprob_start_len?)");
    }
    std::vector<float> values;
    for (int64_t j = 0; j < response_lengths[i]; ++j) {
      const nlohmann::json& entry = (*scored)[j + 1];
      if (!entry.is_array() || entry.size() < 2 || !entry[0].is_number() ||
          entry[1] != tokens[i][start + j]) {
        throw Error(where + ": " + name(i) + ", response token " + std::to_string(j) +
                    ": expected [logprob, " + std::to_string(tokens[i][start + j]) +
                    ", ...], got " + entry.dump());
      }
      values.push_back(entry[0].get<float>());
    }
    log_probs.push_back(std::move(values));
  }
  return log_probs;
}

}  // namespace ooze::rollout
