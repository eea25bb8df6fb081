// A generate function written in Python (--custom-generate-function-path pkg.mod.fn or
// file.py:fn), with Slime's signature `async def generate(args, sample, sampling_params) ->
// Sample` (a plain def works too): multi-turn rollouts and tool use. It reaches the engines
// through ooze.generate / ooze.append_observation / ooze.tokenizer (python/ooze/generation.py),
// which call back into the rollout's SampleGenerator, so a Python turn is the very request the
// built-in rollout sends and its tokens are the engine's, never re-tokenized text.
//
//   PythonGenerateFunction function(path);        // at start-up: loads and checks it
//   std::vector<Sample> done = function.generate(generator, tokenizer, sample);  // on a worker
//
// A function may instead run any agent written against the OpenAI API: ooze.agent_session()
// opens the sample's session (serving/session_server.h) and gives its base URL and key. When
// the function returns the sample without tokens of its own, the session's calls become the
// sample (or samples, rollout/agent_trajectory.h), with the reward, metadata and metrics the
// function set.
//
// Calls of many samples overlap on the hooks' event loop; each blocks only its worker thread.
#pragma once

#include <string>
#include <vector>

#include "python/python_hook.h"
#include "rollout/sample.h"
#include "rollout/sample_generation.h"
#include "serving/session_server.h"

namespace ooze::rollout {

// Where a generate call's agent session is opened, on the first ooze.agent_session() only (a
// function that never asks starts no server).
struct SessionAccess {
  std::function<serving::SessionServer&()> server;
  serving::SessionSettings settings;
};

class PythonGenerateFunction {
 public:
  // Throws python::HookError when the function cannot load or take (args, sample,
  // sampling_params).
  explicit PythonGenerateFunction(const std::string& path);

  // Runs the function on `sample` and takes back the sample (or samples) it returns. Throws
  // python::HookError naming the sample when it raises or returns something else.
  std::vector<Sample> generate(SampleGenerator& generator, const models::Tokenizer& tokenizer,
                               const Sample& sample, const SessionAccess* sessions = nullptr) const;

 private:
  python::PythonHook hook_;
};

}  // namespace ooze::rollout
