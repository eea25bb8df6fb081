// --env-url: ooze's own agent loop against an environment server in the OpenEnv style (reset,
// then step until done), for tasks whose world lives behind HTTP.
//
//   EnvLoop env("http://127.0.0.1:8000", /*max_turns=*/16, /*timeout_s=*/60);
//   std::vector<Sample> done = env.run(sample, generator);   // on a rollout worker
//
// Protocol (JSON bodies and answers):
//   POST URL/reset  {"seed": INDEX, "episode_id": "sample-INDEX", "sample": {"index",
//                   "group_index", "prompt", "label", "metadata"}}
//                   -> {"observation": O, "reward": null, "done": false}
//   POST URL/step   {"episode_id": "sample-INDEX", "action": {"text": TURN}}
//                   -> {"observation": O, "reward": R, "done": D}
// where O, what the policy reads next, is a string or an object whose "text" field is one.
//
// The loop: the reset's observation ends the prompt; each policy turn (the run's sampling, loss
// mask 1) is the action of a step; each step's observation, unless it is done, is appended as an
// observation (loss mask 0); until done, --env-max-turns turns, or the response budget is spent.
// The sample's reward is the episode's return, the sum of the step rewards. A sample continued
// from a partial rollout starts a new episode. An environment that fails (no connection, an
// error status, an answer not of this shape) aborts the sample, its abort_reason naming the
// server and what was wrong, reward 0; the rollout goes on.
//
// sample.metrics: agent/turns (steps), agent/aborted_env when the environment failed.
#pragma once

#include <string>
#include <vector>

#include "rollout/sample.h"
#include "rollout/sample_generation.h"

namespace ooze::rollout {

class EnvLoop {
 public:
  // Throws ConfigError for a URL that is not http://HOST:PORT[/PATH].
  EnvLoop(const std::string& url, int64_t max_turns, double timeout_s);

  std::vector<Sample> run(const Sample& sample, SampleGenerator& generator) const;

  const std::string& url() const { return url_; }

 private:
  nlohmann::json post(const std::string& endpoint, const nlohmann::json& body) const;

  std::string url_;
  std::string server_;  // http://HOST:PORT
  std::string path_;    // what follows it, without the trailing slash
  int64_t max_turns_;
  double timeout_s_;
};

}  // namespace ooze::rollout
