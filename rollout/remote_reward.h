// A reward model served over HTTP (Slime's `--rm-type remote_rm --rm-url URL`): each sample is
// POSTed to the URL as {"prompt": ..., "response": ..., "label": ...} and the JSON answer is its
// reward, a number or an object (whose --reward-key field is the scalar).
//
//   RemoteRewardOptions options;
//   options.url = "http://127.0.0.1:8000/reward";
//   RemoteReward reward_model(options);
//   sample.reward = reward_model.score(sample);  // from many threads at once
//
// A reward model under load drops connections, times out or answers 5xx now and then, so those
// are retried with exponential backoff (as are 408 and 429, which ask for it); another 4xx, or
// an answer that is not a JSON number or object, is a mistake a retry cannot fix and fails at
// once. Connections are kept alive between calls.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/option_fields.h"
#include "rollout/sample.h"

namespace ooze::serving {
class HttpClient;
}

namespace ooze::rollout {

struct RemoteRewardOptions {
  std::string url;  // "http://host[:port]/path" (port 80 when absent; path "/" when absent)
  // One attempt: connecting (at most 10 s of it), sending, and the whole answer.
  double timeout_s = 120.0;
  int max_retries = 9;  // attempts after the first: 10 in all, as Slime's remote_rm
  // The wait before the first retry; it doubles for each later one, up to max_backoff_s, and
  // gets up to 10% more at random so that many failed samples do not retry in lockstep.
  double initial_backoff_s = 1.0;
  double max_backoff_s = 30.0;

  // --rm-url, --rm-timeout, --rm-max-retries (the backoff is not a flag).
  static const OptionFields<RemoteRewardOptions>& fields();
};

// A sample the reward model did not score: names the URL, the sample, the attempts made and the
// last error.
class RemoteRewardError : public Error {
 public:
  RemoteRewardError(const std::string& message, std::string url, int attempts)
      : Error(message), url_(std::move(url)), attempts_(attempts) {}
  const std::string& url() const { return url_; }
  int attempts() const { return attempts_; }

 private:
  std::string url_;
  int attempts_;
};

class RemoteReward {
 public:
  // Throws ConfigError for a URL that is not plain http://, or options out of range. Connects
  // lazily, on the first call.
  explicit RemoteReward(RemoteRewardOptions options);
  ~RemoteReward();
  RemoteReward(const RemoteReward&) = delete;
  RemoteReward& operator=(const RemoteReward&) = delete;

  // The sample's reward (a JSON number or object). Blocks through the retries; thread-safe.
  // Throws RemoteRewardError.
  nlohmann::json score(const Sample& sample) const;

  // What score() POSTs: {"prompt": ..., "response": ..., "label": ...}.
  static nlohmann::json request_body(const Sample& sample);

  const RemoteRewardOptions& options() const { return options_; }

 private:
  RemoteRewardOptions options_;
  std::string target_;                           // the URL's path and query
  std::unique_ptr<serving::HttpClient> client_;  // thread-safe: each call takes its own connection
};

}  // namespace ooze::rollout
