// The teacher of on-policy distillation with --opd-type engine: engines answering SGLang's
// /generate (the teacher engines `ooze train` launches, `ooze serve --model TEACHER`, or SGLang
// itself) score the student's sampled tokens as their prompt, with nothing generated:
//
//   POST /generate {"input_ids": [[...], ...], "sampling_params": {"max_new_tokens": 0},
//                   "return_logprob": true, "logprob_start_len": [len - response_len - 1, ...]}
//   -> one answer per sequence, meta_info.input_token_logprobs = [[logprob, id, text], ...]
//
//   TeacherServer teacher({"http://127.0.0.1:30001", "http://127.0.0.1:30002"},
//                         std::chrono::minutes(10));
//   teacher.score(group);   // each sample's teacher_log_probs, one request for the group
//   std::vector<std::vector<float>> lp = teacher.response_log_probs(tokens, response_lengths);
//
// Requests go through a serving::Router over the teacher's engines: a group's samples to one
// engine (its prompt is prefilled once there), groups to the least loaded engine, a failed
// engine's request retried on another. Safe to call from any number of threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rollout/sample.h"

namespace ooze::serving {
class Router;
}

namespace ooze::rollout {

class TeacherServer {
 public:
  // `urls`: http://HOST:PORT of each of the teacher's engines. Throws ConfigError for a URL that
  // is not one.
  TeacherServer(std::vector<std::string> urls, std::chrono::milliseconds timeout);
  ~TeacherServer();

  // For each sequence (prompt and response tokens), log p_teacher of its last
  // response_lengths[i] tokens given everything before them, in one request. Throws ooze::Error
  // naming the teacher's engine and the sequence when it fails or answers something else
  // (another number of log-probs, other token ids).
  std::vector<std::vector<float>> response_log_probs(
      const std::vector<std::vector<int64_t>>& tokens,
      const std::vector<int64_t>& response_lengths) const;

  // Sets teacher_log_probs of every sample of `group` that has a response and no teacher
  // log-probs yet, in one request. Throws ooze::Error naming the teacher's engine and the sample.
  void score(std::vector<Sample>& group) const;

  // Wall-clock seconds so far during which at least one request was waiting on the teacher
  // (overlapping requests count once).
  double busy_seconds() const;

 private:
  std::vector<std::vector<float>> request(const std::vector<std::vector<int64_t>>& tokens,
                                          const std::vector<int64_t>& response_lengths,
                                          const std::string& routing_key,
                                          const std::function<std::string(size_t)>& name) const;
  void begin_wait() const;  // a request starts waiting on the teacher
  void end_wait() const;    // ... and has its answer

  std::string urls_;  // for messages
  std::shared_ptr<serving::Router> router_;

  // busy_seconds(): requests in flight, since when, and the seconds of finished busy spans.
  mutable std::mutex busy_mutex_;
  mutable int64_t in_flight_ = 0;
  mutable std::chrono::steady_clock::time_point busy_since_;
  mutable double busy_seconds_ = 0;
};

}  // namespace ooze::rollout
