#include "rollout/python_generate_function.h"

#include "rollout/hook_bindings.h"
#include "rollout/sample_json.h"

namespace ooze::rollout {

PythonGenerateFunction::PythonGenerateFunction(const std::string& path)
    : hook_(python::PythonHook::load(path, "--custom-generate-function-path",
                                     {"args", "sample", "sampling_params"})) {}

std::vector<Sample> PythonGenerateFunction::generate(SampleGenerator& generator,
                                                     const models::Tokenizer& tokenizer,
                                                     const Sample& sample) const {
  const HookBindings bindings("generation", {&generator, &tokenizer});
  const nlohmann::json request = {
      {"generation", bindings.name()},
      {"sample", sample_to_json(sample)},
      {"sampling_params",
       generator.sampling().sampling_params(generator.remaining_budget(sample), 1, sample)}};
  const nlohmann::json returned = hook_.call("generate_sample", request);
  std::vector<Sample> samples;
  try {
    for (const nlohmann::json& record : returned) samples.push_back(sample_from_json(record));
  } catch (const FormatError& error) {
    throw python::HookError(hook_.flag() + " " + hook_.path() + " returned sample " +
                            std::to_string(sample.index) +
                            " in a form ooze cannot train on: " + error.what());
  }
  return samples;
}

}  // namespace ooze::rollout
