#include "rollout/python_generate_function.h"

#include <mutex>

#include "rollout/agent_trajectory.h"
#include "rollout/hook_bindings.h"
#include "rollout/sample_json.h"

namespace ooze::rollout {

PythonGenerateFunction::PythonGenerateFunction(const std::string& path)
    : hook_(python::PythonHook::load(path, "--custom-generate-function-path",
                                     {"args", "sample", "sampling_params"})) {}

std::vector<Sample> PythonGenerateFunction::generate(SampleGenerator& generator,
                                                     const models::Tokenizer& tokenizer,
                                                     const Sample& sample,
                                                     const SessionAccess* sessions) const {
  HookServices services{&generator, &tokenizer};
  serving::SessionServer* server = nullptr;
  std::string session_id;
  std::mutex session_mutex;
  if (sessions) {
    services.agent_session = [&] {
      std::lock_guard<std::mutex> lock(session_mutex);
      if (!server) {
        server = &sessions->server();
        session_id = server->open(sessions->settings);
      }
      return nlohmann::json{{"base_url", server->base_url(session_id)},
                            {"api_key", server->api_key()}};
    };
  }
  const HookBindings bindings("generation", std::move(services));
  const nlohmann::json request = {
      {"generation", bindings.name()},
      {"sample", sample_to_json(sample)},
      {"sampling_params",
       generator.sampling().sampling_params(generator.remaining_budget(sample), 1, sample)}};
  nlohmann::json returned;
  try {
    returned = hook_.call("generate_sample", request);
  } catch (...) {
    if (server) server->close(session_id);
    throw;
  }
  std::vector<Sample> samples;
  try {
    for (const nlohmann::json& record : returned) samples.push_back(sample_from_json(record));
  } catch (const FormatError& error) {
    throw python::HookError(hook_.flag() + " " + hook_.path() + " returned sample " +
                            std::to_string(sample.index) +
                            " in a form ooze cannot train on: " + error.what());
  }
  if (!server) return samples;
  const serving::SessionRecord record = server->close(session_id);
  if (record.calls.empty()) return samples;
  if (samples.size() != 1 || samples[0].tokens != sample.tokens) {
    throw python::HookError(hook_.flag() + " " + hook_.path() +
                            " used the agent session of sample " + std::to_string(sample.index) +
                            " and also returned tokens of its own: return the sample as it came "
                            "(its reward and metadata set as you like), and the session's calls "
                            "become its tokens");
  }
  return trajectory_samples(samples[0], record, tokenizer);
}

}  // namespace ooze::rollout
