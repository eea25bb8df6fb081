#include "rollout/python_generate_function.h"

#include <atomic>

#include "python/native_functions.h"
#include "rollout/sample_json.h"

namespace ooze::rollout {

PythonGenerateFunction::PythonGenerateFunction(const std::string& path)
    : hook_(python::PythonHook::load(path, "--custom-generate-function-path",
                                     {"args", "sample", "sampling_params"})) {}

void PythonGenerateFunction::generate(SampleGenerator& generator, Sample& sample) const {
  // The generator's functions, under names of this call's own: ooze.generate inside the hook
  // finds them through the call's context (python/ooze/generation.py).
  static std::atomic<int64_t> calls{0};
  const std::string generation = "generation-" + std::to_string(calls++);
  using Json = nlohmann::json;
  const python::NativeFunctionRegistration turn(generation + "/generate", [&](const Json& in) {
    Sample current = sample_from_json(in.at("sample"));
    const std::string text = generator.generate(current, in.at("max_new_tokens").get<int64_t>());
    return Json{{"sample", sample_to_json(current)}, {"text", text}};
  });
  const python::NativeFunctionRegistration observation(
      generation + "/append_observation", [&](const Json& in) {
        Sample current = sample_from_json(in.at("sample"));
        const int64_t appended =
            generator.append_observation(current, in.at("text").get<std::string>());
        return Json{{"sample", sample_to_json(current)}, {"appended", appended}};
      });
  const python::NativeFunctionRegistration budget(
      generation + "/remaining_budget", [&](const Json& in) {
        return Json(generator.remaining_budget(sample_from_json(in.at("sample"))));
      });
  const python::NativeFunctionRegistration encode(generation + "/encode", [&](const Json& in) {
    return Json(generator.tokenize(in.get<std::string>()));
  });
  const python::NativeFunctionRegistration decode(generation + "/decode", [&](const Json& in) {
    return Json(generator.detokenize(in.get<std::vector<int64_t>>()));
  });

  const Json request = {{"generation", generation},
                        {"sample", sample_to_json(sample)},
                        {"sampling_params", generator.sampling().sampling_params(
                                                generator.remaining_budget(sample), 1, sample)}};
  const Json returned = hook_.call("generate_sample", request);
  try {
    sample = sample_from_json(returned);
  } catch (const FormatError& error) {
    throw python::HookError(hook_.flag() + " " + hook_.path() + " returned sample " +
                            std::to_string(sample.index) +
                            " in a form ooze cannot train on: " + error.what());
  }
}

}  // namespace ooze::rollout
