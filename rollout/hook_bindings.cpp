#include "rollout/hook_bindings.h"

#include <atomic>

#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "rollout/reward_model.h"
#include "rollout/sample_json.h"

namespace ooze::rollout {
namespace {

using Json = nlohmann::json;

std::vector<models::ChatMessage> chat_messages(const Json& messages) {
  std::vector<models::ChatMessage> out;
  for (const Json& message : messages) {
    if (!message.is_object() || !message.contains("role") || !message.contains("content")) {
      throw FormatError("apply_chat_template: each message is a dict with role and content, got " +
                        message.dump().substr(0, 120));
    }
    models::ChatMessage chat{message.at("role").get<std::string>(),
                             message.at("content").get<std::string>(), std::nullopt};
    if (message.contains("reasoning_content") && message.at("reasoning_content").is_string()) {
      chat.reasoning_content = message.at("reasoning_content").get<std::string>();
    }
    out.push_back(std::move(chat));
  }
  return out;
}

}  // namespace

HookBindings::HookBindings(const std::string& kind, HookServices services) {
  static std::atomic<int64_t> calls{0};
  name_ = kind + "-" + std::to_string(calls++);
  if (SampleGenerator* generator = services.generator) {
    bind("generate", [generator](const Json& in) {
      Sample current = sample_from_json(in.at("sample"));
      const std::string text = generator->generate(current, in.at("max_new_tokens").get<int64_t>());
      return Json{{"sample", sample_to_json(current)}, {"text", text}};
    });
    bind("append_observation", [generator](const Json& in) {
      Sample current = sample_from_json(in.at("sample"));
      const int64_t appended =
          generator->append_observation(current, in.at("text").get<std::string>());
      return Json{{"sample", sample_to_json(current)}, {"appended", appended}};
    });
    bind("remaining_budget", [generator](const Json& in) {
      return Json(generator->remaining_budget(sample_from_json(in.at("sample"))));
    });
  }
  if (const models::Tokenizer* tokenizer = services.tokenizer) {
    bind("encode",
         [tokenizer](const Json& in) { return Json(tokenizer->encode(in.get<std::string>())); });
    bind("decode", [tokenizer](const Json& in) {
      return Json(tokenizer->decode(in.get<std::vector<int64_t>>()));
    });
    bind("apply_chat_template", [tokenizer](const Json& in) {
      const models::ChatTemplate chat_template =
          models::select_chat_template(*tokenizer, in.at("chat_template").get<std::string>());
      return Json(chat_template.render(chat_messages(in.at("messages")),
                                       in.at("add_generation_prompt").get<bool>(),
                                       in.at("enable_thinking").get<bool>()));
    });
  }
  if (RewardModel* rewards = services.rewards) {
    bind("score", [rewards](const Json& in) {
      std::vector<Sample> group;
      for (const Json& record : in) group.push_back(sample_from_json(record));
      for (Sample& sample : group) sample.reward = nullptr;
      rewards->score_group(group);
      Json scored = Json::array();
      for (const Sample& sample : group) scored.push_back(sample.reward);
      return scored;
    });
  }
  if (services.agent_session) {
    bind("agent_session", [open = services.agent_session](const Json&) { return open(); });
  }
  if (services.get_samples) {
    bind("get_samples", [get = services.get_samples](const Json& in) {
      return groups_to_json(get(in.get<int64_t>()));
    });
  }
  if (services.add_samples) {
    bind("add_samples", [add = services.add_samples](const Json& in) {
      add(groups_from_json(in));
      return Json();
    });
  }
}

void HookBindings::bind(const std::string& function, python::NativeFunction body) {
  registrations_.push_back(std::make_unique<python::NativeFunctionRegistration>(
      name_ + "/" + function, std::move(body)));
}

}  // namespace ooze::rollout
