#include "launcher/reward_command.h"

#include <iostream>
#include <optional>

#include "core/config.h"
#include "launcher/commands.h"
#include "python/hook_args.h"
#include "rollout/reward_label_check.h"
#include "rollout/reward_model.h"
#include "rollout/rewards/builtin_rewards.h"
#include "rollout/rewards/reward_label.h"

namespace ooze::launcher {
namespace {

// Lines scored at once: enough to keep --reward-threads busy, few enough that answers stream.
constexpr size_t kChunk = 256;

std::string key_list(const nlohmann::json& object) {
  std::string keys;
  for (auto it = object.begin(); it != object.end(); ++it)
    keys += (keys.empty() ? "" : ", ") + it.key();
  return keys.empty() ? "none" : keys;
}

// `rule` (a built-in --rm-type, "" for other rewards) would score 0 whatever the response:
// the line has no label to compare with (rollout/rewards/reward_label.h).
void check_label(const std::string& rule, const rollout::Sample& sample,
                 const nlohmann::json& line) {
  if (rule.empty()) return;
  const std::string type = rollout::effective_reward_type(rule, sample);
  if (rollout::has_reference_answer(type, sample.label, sample.metadata)) return;
  const std::string flag = type == rule ? "--rm-type " + type : "rm_type " + type + " (metadata)";
  throw FormatError(flag + " compares the response to a label, but the line's 'label' is " +
                    (line.contains("label") ? "empty" : "missing") +
                    " (its keys: " + key_list(line) + ")");
}

rollout::Sample sample_from_line(const std::string& line, int64_t number, const std::string& rule) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& error) {
    throw FormatError("not JSON (" + std::string(error.what()) + ")");
  }
  if (!json.is_object()) throw FormatError("expected a JSON object");
  auto response = json.find("response");
  if (response == json.end() || !response->is_string()) {
    throw FormatError("'response' (a string) is missing");
  }
  rollout::Sample sample;
  sample.index = number - 1;
  sample.group_index = number - 1;
  sample.response = response->get<std::string>();
  if (auto label = json.find("label"); label != json.end() && !label->is_null()) {
    sample.label = label->is_string() ? label->get<std::string>() : label->dump();
  }
  if (auto metadata = json.find("metadata"); metadata != json.end() && !metadata->is_null()) {
    sample.metadata = *metadata;
  }
  if (auto prompt = json.find("prompt"); prompt != json.end() && prompt->is_string()) {
    sample.prompt = prompt->get<std::string>();
  }
  sample.status = rollout::Sample::Status::kCompleted;
  check_label(rule, sample, json);
  return sample;
}

}  // namespace

const ConfigSchema& reward_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema schema;
    rollout::RewardOptions::fields().declare(schema);
    return schema;
  }();
  return schema;
}

int run_reward_command(const std::vector<std::string>& args, std::istream& in, std::ostream& out) {
  const std::optional<Config> config = load_config_from_command_line(reward_schema(), args);
  if (!config) {
    out << command_help("reward");
    return 0;
  }
  python::set_hook_args(config->to_json());
  rollout::RewardModel rewards(rollout::RewardOptions::fields().read(*config));
  const std::string rule = rollout::checked_reward_rule(rewards);

  bool failed = false;
  int64_t line_number = 0;
  std::string line;
  bool more = true;
  while (more) {
    // One chunk: parse, score concurrently, answer in input order.
    std::vector<std::string> answers;
    std::vector<std::optional<rollout::Sample>> samples;
    std::vector<int64_t> numbers;
    while (samples.size() < kChunk && (more = static_cast<bool>(std::getline(in, line)))) {
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      numbers.push_back(line_number);
      answers.emplace_back();
      try {
        samples.emplace_back(sample_from_line(line, line_number, rule));
      } catch (const Error& error) {
        samples.emplace_back();
        answers.back() =
            nlohmann::json{{"error", "line " + std::to_string(line_number) + ": " + error.what()}}
                .dump();
      }
    }
    std::vector<rollout::Sample*> parsed;
    std::vector<size_t> positions;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (samples[i]) {
        parsed.push_back(&*samples[i]);
        positions.push_back(i);
      }
    }
    const std::vector<std::exception_ptr> failures = rewards.try_score(parsed);
    for (size_t k = 0; k < parsed.size(); ++k) {
      const size_t i = positions[k];
      try {
        if (failures[k]) std::rethrow_exception(failures[k]);
        answers[i] = nlohmann::json{{"reward", parsed[k]->reward}}.dump();
      } catch (const std::exception& error) {
        answers[i] =
            nlohmann::json{{"error", "line " + std::to_string(numbers[i]) + ": " + error.what()}}
                .dump();
      }
    }
    for (const std::string& answer : answers) {
      failed = failed || answer.rfind("{\"error\"", 0) == 0;
      out << answer << "\n";
    }
    out.flush();
  }
  return failed ? 1 : 0;
}

}  // namespace ooze::launcher
