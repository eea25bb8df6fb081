// The teacher of on-policy distillation with --opd-type engine: a server answering SGLang's
// /generate (`ooze serve --model TEACHER`, or SGLang itself) scores the student's sampled tokens
// as its prompt, with nothing generated:
//
//   POST /generate {"input_ids": [[...], ...], "sampling_params": {"max_new_tokens": 0},
//                   "return_logprob": true, "logprob_start_len": [len - response_len - 1, ...]}
//   -> one answer per sequence, meta_info.input_token_logprobs = [[logprob, id, text], ...]
//
//   TeacherServer teacher("http://127.0.0.1:30001", std::chrono::minutes(10));
//   std::vector<std::vector<float>> lp = teacher.response_log_probs(tokens, response_lengths);
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ooze::serving {
class HttpClient;
}

namespace ooze::rollout {

class TeacherServer {
 public:
  // Throws ConfigError for a URL that is not http://HOST:PORT.
  TeacherServer(std::string url, std::chrono::milliseconds timeout);
  ~TeacherServer();

  // For each sequence (prompt and response tokens), log p_teacher of its last
  // response_lengths[i] tokens given everything before them, in one request. Throws ooze::Error
  // naming the server and the sequence when it fails or answers something else (another
  // number of log-probs, other token ids).
  std::vector<std::vector<float>> response_log_probs(
      const std::vector<std::vector<int64_t>>& tokens,
      const std::vector<int64_t>& response_lengths) const;

 private:
  std::string url_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<serving::HttpClient> client_;
};

}  // namespace ooze::rollout
