#include "rollout/teacher_server.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/http_client.h"

namespace ooze::rollout {

TeacherServer::TeacherServer(std::string url, std::chrono::milliseconds timeout)
    : url_(std::move(url)), timeout_(timeout) {
  try {
    client_ = std::make_unique<serving::HttpClient>(url_);
  } catch (const std::exception& e) {
    throw ConfigError("--opd-teacher-url '" + url_ + "': " + e.what() +
                      " (expected http://HOST:PORT of a server answering /generate)");
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
  if (tokens.empty()) return {};
  nlohmann::json starts = nlohmann::json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t length = static_cast<int64_t>(tokens[i].size());
    if (response_lengths[i] < 1 || response_lengths[i] >= length) {
      throw Error("TeacherServer: sequence " + std::to_string(i) + " has " +
                  std::to_string(length) + " tokens and a response of " +
                  std::to_string(response_lengths[i]) + ": at least one of each is needed");
    }
    // One position early: SGLang leaves the first scored position null when it is not the
    // first token, so the response's own positions always come back as numbers.
    starts.push_back(length - response_lengths[i] - 1);
  }
  serving::HttpRequest request;
  request.method = "POST";
  request.target = "/generate";
  request.timeout = timeout_;
  request.body = nlohmann::json{
      {"input_ids", tokens},
      {"sampling_params", {{"max_new_tokens", 0}}},
      {"return_logprob", true},
      {"logprob_start_len",
       starts}}.dump();
  const std::string where = "the distillation teacher at " + url_ + " (--opd-teacher-url)";
  const serving::HttpResponse response = client_->send(request);
  if (!response.ok()) {
    throw Error(where + " answered HTTP " + std::to_string(response.status) + ": " +
                response.body.substr(0, 300));
  }
  const nlohmann::json answers = nlohmann::json::parse(response.body, nullptr, false);
  if (!answers.is_array() || answers.size() != tokens.size()) {
    throw Error(where + " did not answer one result per sequence (" +
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
      throw Error(where + ": sequence " + std::to_string(i) + " came back without " +
                  std::to_string(response_lengths[i] + 1) +
                  " input_token_logprobs (does the server support logprob_start_len?)");
    }
    std::vector<float> values;
    for (int64_t j = 0; j < response_lengths[i]; ++j) {
      const nlohmann::json& entry = (*scored)[j + 1];
      if (!entry.is_array() || entry.size() < 2 || !entry[0].is_number() ||
          entry[1] != tokens[i][start + j]) {
        throw Error(where + ": sequence " + std::to_string(i) + ", response token " +
                    std::to_string(j) + ": expected [logprob, " +
                    std::to_string(tokens[i][start + j]) + ", ...], got " + entry.dump());
      }
      values.push_back(entry[0].get<float>());
    }
    log_probs.push_back(std::move(values));
  }
  return log_probs;
}

}  // namespace ooze::rollout
