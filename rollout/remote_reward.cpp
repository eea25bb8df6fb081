#include "rollout/remote_reward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "core/logging.h"
#include "serving/http_client.h"

namespace ooze::rollout {
namespace {

constexpr double kMaxConnectTimeoutS = 10.0;
constexpr size_t kBodyExcerptChars = 300;

std::chrono::milliseconds to_millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

// The server part ("http://host:port", what HttpClient takes) and the target ("/path?query").
std::pair<std::string, std::string> split_url(const std::string& url) {
  const std::string usage =
      " (--rm-url: expected http://HOST[:PORT]/PATH, e.g. "
      "http://127.0.0.1:8000/reward)";
  std::string rest = url;
  const size_t scheme_end = rest.find("://");
  if (scheme_end != std::string::npos) {
    const std::string scheme = rest.substr(0, scheme_end);
    if (scheme != "http") {
      throw ConfigError("reward model URL '" + url + "': scheme '" + scheme +
                        "' is not supported; ooze speaks plain HTTP to reward models" + usage);
    }
    rest.erase(0, scheme_end + 3);
  }
  const size_t slash = rest.find_first_of("/?");
  std::string authority = rest.substr(0, slash);
  std::string target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (target[0] == '?') target = "/" + target;
  if (authority.empty()) throw ConfigError("reward model URL '" + url + "' has no host" + usage);
  // A port is what follows the last ':' outside an IPv6 address's brackets.
  const size_t colon = authority.rfind(':');
  const size_t bracket = authority.rfind(']');
  if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket)) {
    authority += ":80";
  }
  return {"http://" + authority, target};
}

std::string excerpt(const std::string& body) {
  if (body.size() <= kBodyExcerptChars) return body;
  return body.substr(0, kBodyExcerptChars) + "... (" + std::to_string(body.size()) + " bytes)";
}

// 5xx, and the two 4xx that ask the client to come back later.
bool is_retryable_status(int status) { return status >= 500 || status == 408 || status == 429; }

std::string sample_label(const Sample& sample) {
  return "sample " + std::to_string(sample.index) + " (group " +
         std::to_string(sample.group_index) + ")";
}

std::string seconds_text(double seconds) {
  std::ostringstream text;
  text << std::setprecision(3) << seconds << " s";
  return text.str();
}

double jitter_factor() {
  thread_local std::mt19937 generator(std::random_device{}());
  return std::uniform_real_distribution<double>(1.0, 1.1)(generator);
}

}  // namespace

const OptionFields<RemoteRewardOptions>& RemoteRewardOptions::fields() {
  using O = RemoteRewardOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.add("rm_url", &O::url, "The remote reward model's URL (--rm-type remote_rm).");
    f.add("rm_timeout", &O::timeout_s, "Seconds one remote reward request may take.")
        .greater_than(0);
    f.add("rm_max_retries", &O::max_retries, "Retries of a remote reward request that failed.")
        .min(0);
    return f;
  }();
  return fields;
}

RemoteReward::RemoteReward(RemoteRewardOptions options) : options_(std::move(options)) {
  if (options_.url.empty()) {
    throw ConfigError(
        "--rm-url is empty: give the reward model's URL, e.g. "
        "http://127.0.0.1:8000/reward");
  }
  if (!(options_.timeout_s > 0)) {
    throw ConfigError("remote reward timeout must be positive, got " +
                      seconds_text(options_.timeout_s));
  }
  if (options_.max_retries < 0) {
    throw ConfigError("remote reward max_retries must be 0 or more, got " +
                      std::to_string(options_.max_retries));
  }
  if (!(options_.initial_backoff_s >= 0) || !(options_.max_backoff_s >= 0)) {
    throw ConfigError("remote reward backoff times must be 0 or more seconds");
  }
  auto [server, target] = split_url(options_.url);
  target_ = std::move(target);
  serving::HttpClientOptions client_options;
  client_options.connect_timeout = to_millis(std::min(options_.timeout_s, kMaxConnectTimeoutS));
  client_options.keep_alive = true;
  client_ = std::make_unique<serving::HttpClient>(server, client_options);
}

RemoteReward::~RemoteReward() = default;

nlohmann::json RemoteReward::request_body(const Sample& sample) {
  return {{"prompt", sample.prompt}, {"response", sample.response}, {"label", sample.label}};
}

nlohmann::json RemoteReward::score(const Sample& sample) const {
  serving::HttpRequest request;
  request.method = "POST";
  request.target = target_;
  request.body = request_body(sample).dump();
  request.timeout = to_millis(options_.timeout_s);

  const std::string where = "remote reward model " + options_.url + ", " + sample_label(sample);
  const int max_attempts = options_.max_retries + 1;
  std::string last_error;
  double backoff_s = options_.initial_backoff_s;
  for (int attempt = 1;; ++attempt) {
    try {
      const serving::HttpResponse response = client_->send(request);
      if (response.ok()) {
        nlohmann::json reward = nlohmann::json::parse(response.body, nullptr, false);
        if (reward.is_discarded()) {
          throw RemoteRewardError(where + ": the answer is not JSON: '" + excerpt(response.body) +
                                      "'. The reward model must answer a JSON number or object",
                                  options_.url, attempt);
        }
        if (!reward.is_number() && !reward.is_object()) {
          throw RemoteRewardError(where + ": the answer " + excerpt(reward.dump()) +
                                      " is not a reward; the reward model must answer a JSON "
                                      "number, or an object holding the --reward-key field",
                                  options_.url, attempt);
        }
        return reward;
      }
      last_error = "HTTP " + std::to_string(response.status) + ": " + excerpt(response.body);
      if (!is_retryable_status(response.status)) {
        throw RemoteRewardError(where + ": the reward model refused the request with " +
                                    last_error + " (not retried). It is sent " +
                                    "{\"prompt\", \"response\", \"label\"} by POST to " + target_ +
                                    ": check --rm-url and what the server expects",
                                options_.url, attempt);
      }
    } catch (const serving::HttpError& error) {  // unreachable, dropped, timed out, malformed
      last_error = error.what();
    }
    if (attempt >= max_attempts) {
      throw RemoteRewardError(
          where + ": no reward after " + std::to_string(attempt) +
              (attempt == 1 ? " attempt" : " attempts") + "; the last error: " + last_error +
              ". Check that the reward model at --rm-url is up and answers " +
              "within the timeout, " + seconds_text(options_.timeout_s) + " per attempt",
          options_.url, attempt);
    }
    const double wait_s = std::min(backoff_s, options_.max_backoff_s) * jitter_factor();
    OOZE_LOG(INFO) << where << ": attempt " << attempt << " of " << max_attempts << " failed ("
                   << last_error << "); retrying in " << seconds_text(wait_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
    backoff_s = std::min(backoff_s * 2, options_.max_backoff_s);
  }
}

}  // namespace ooze::rollout
