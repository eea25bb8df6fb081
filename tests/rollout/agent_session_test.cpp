// Agents as users run them: real programs (Python with urllib only; node with the official
// OpenAI client) started by --agent-command's runner against a real session server in front of
// real engines. Each agent writes down every request it sent and every answer it got; the
// trained samples are checked against that transcript and the chat template, not against the
// session's own record.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "models/unicode_utils.h"
#include "rollout/agent_command.h"
#include "rollout/rollout_manager.h"
#include "serving/generate_protocol.h"
#include "serving/session_server.h"
#include "tests/support/process.h"
#include "tests/support/served_engines.h"

namespace ooze::rollout {
namespace agent_session_test {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSourceDir = OOZE_SOURCE_DIR;
const fs::path kAgents = kSourceDir / "tests/rollout/agents";

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json();
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The conversation of a request as the chat template takes it.
std::vector<models::ChatMessage> chat_messages(const json& messages) {
  std::vector<models::ChatMessage> out;
  for (const json& message : messages) {
    models::ChatMessage chat{message.at("role").get<std::string>(),
                             message.value("content", json("")).is_string()
                                 ? message.value("content", std::string())
                                 : std::string(),
                             std::nullopt};
    for (const json& call : message.value("tool_calls", json::array())) {
      chat.tool_calls.push_back({call["function"]["name"].get<std::string>(),
                                 call["function"]["arguments"].get<std::string>()});
    }
    out.push_back(std::move(chat));
  }
  return out;
}

models::ChatTools chat_tools(const json& request) {
  models::ChatTools tools;
  for (const json& tool : request.value("tools", json::array())) {
    nlohmann::ordered_json function;
    function["name"] = tool["function"]["name"];
    function["description"] = tool["function"]["description"];
    function["parameters"] = nlohmann::ordered_json::parse(tool["function"]["parameters"].dump());
    nlohmann::ordered_json entry;
    entry["type"] = "function";
    entry["function"] = function;
    tools.push_back(entry);
  }
  return tools;
}

std::string rendered_prompt(const models::ChatTemplate& chat, const json& request) {
  const bool thinking =
      request.value("chat_template_kwargs", json::object()).value("enable_thinking", true);
  return chat.render(chat_messages(request["messages"]), /*add_generation_prompt=*/true, thinking,
                     chat_tools(request));
}

// What the client got back for each sampled token: its bytes and log-prob.
struct ClientToken {
  std::string bytes;
  double logprob = 0;
};

std::vector<ClientToken> client_tokens(const json& response) {
  std::vector<ClientToken> tokens;
  for (const json& entry : response["choices"][0]["logprobs"]["content"]) {
    std::string bytes;
    for (const json& byte : entry["bytes"]) bytes += static_cast<char>(byte.get<int>());
    tokens.push_back({bytes, entry["logprob"].get<double>()});
  }
  return tokens;
}

class AgentSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engines_ = new testing::ServedEngines(1); }
  static void TearDownTestSuite() {
    delete engines_;
    engines_ = nullptr;
  }

  void SetUp() override {
    dir_ = testing::make_temp_dir("agent-session");
    use_template(models::select_chat_template(tokenizer(), ""));
  }

  void use_template(const models::ChatTemplate& chat) {
    server_.reset();
    chat_ = std::make_unique<models::ChatTemplate>(chat);
    server_ = std::make_unique<serving::SessionServer>(serving::ServerOptions{}, engines_->router(),
                                                       tokenizer(), chat_.get(), "",
                                                       engines_->engines()[0]->info());
  }

  const models::Tokenizer& tokenizer() const { return engines_->tokenizer(); }

  Sample sample(int64_t index = 5) const {
    Sample sample;
    sample.index = index;
    sample.group_index = 1;
    sample.prompt = "What is 2 + 3?";
    sample.tokens = tokenizer().encode(sample.prompt);
    sample.label = "5";
    return sample;
  }

  std::vector<Sample> run_agent(const std::string& command, double timeout_s = 60) {
    serving::SessionSettings settings;
    settings.max_completion_tokens = 200;
    return AgentCommand(command, timeout_s).run(sample(), *server_, settings, tokenizer());
  }

  // The trained sample is the prompt of the first call, then for every call the template's
  // new text (mask 0) and the tokens the client was sent (mask 1, their log-probs).
  void expect_token_exact(const Sample& trained, const json& transcript) {
    ASSERT_FALSE(transcript.empty());
    EXPECT_EQ(std::vector<int64_t>(trained.tokens.begin(),
                                   trained.tokens.begin() + trained.prompt_length()),
              tokenizer().encode(rendered_prompt(*chat_, transcript[0]["request"])));
    std::vector<ClientToken> sampled;
    for (const json& call : transcript) {
      for (const ClientToken& token : client_tokens(call["response"])) sampled.push_back(token);
    }
    std::vector<ClientToken> trained_policy;
    for (int64_t i = 0; i < trained.response_length; ++i) {
      const int64_t id = trained.tokens[static_cast<size_t>(trained.prompt_length() + i)];
      if (trained.loss_mask[static_cast<size_t>(i)] == 1) {
        trained_policy.push_back(
            {tokenizer().decode({id}), trained.rollout_log_probs[static_cast<size_t>(i)]});
        EXPECT_GE(trained.weight_versions[static_cast<size_t>(i)], 0);
      } else {
        EXPECT_EQ(trained.rollout_log_probs[static_cast<size_t>(i)], 0.0f);
        EXPECT_EQ(trained.weight_versions[static_cast<size_t>(i)], -1);
      }
    }
    ASSERT_EQ(trained_policy.size(), sampled.size());
    for (size_t i = 0; i < sampled.size(); ++i) {
      EXPECT_EQ(trained_policy[i].bytes, sampled[i].bytes) << "sampled token " << i;
      EXPECT_NEAR(trained_policy[i].logprob, sampled[i].logprob, 1e-5) << "sampled token " << i;
    }
    // The whole sequence reads as the last request's conversation and what it got back, as
    // the agent saw it: the random model's bytes are not always UTF-8, and the agent's copy of
    // a completion is (which is why the sampled tokens above are compared byte for byte).
    std::string last_completion;
    for (const ClientToken& token : client_tokens(transcript.back()["response"])) {
      last_completion += token.bytes;
    }
    EXPECT_EQ(models::utf8_lossy(tokenizer().decode(trained.tokens)),
              models::utf8_lossy(rendered_prompt(*chat_, transcript.back()["request"]) +
                                 last_completion));
  }

  static testing::ServedEngines* engines_;
  std::string dir_;
  std::unique_ptr<models::ChatTemplate> chat_;
  std::unique_ptr<serving::SessionServer> server_;
};

testing::ServedEngines* AgentSessionTest::engines_ = nullptr;

TEST_F(AgentSessionTest, PythonUrllibAgentTrainsOnTheTokensTheEngineSampled) {
  const std::string transcript_path = dir_ + "/transcript.json";
  const std::vector<Sample> samples =
      run_agent("python3 " + quoted(kAgents / "urllib_agent.py") + " tools3 " + transcript_path);
  const json transcript = read_json(transcript_path);
  ASSERT_EQ(transcript.size(), 3u) << transcript;
  ASSERT_EQ(samples.size(), 1u) << "a conversation that only grows is one sample";
  const Sample& trained = samples[0];
  EXPECT_TRUE(trained.rollout_id.is_null());
  EXPECT_EQ(trained.reward, 0.25);  // the agent's {"reward": ...} line
  EXPECT_EQ(trained.index, 5);
  EXPECT_EQ(trained.label, "5");
  EXPECT_EQ(trained.metrics["agent/turns"], 3);
  EXPECT_EQ(trained.metrics["agent/segments"], 1);
  expect_token_exact(trained, transcript);
  // The tool results went back through the template as tool responses.
  EXPECT_NE(trained.response.find("<tool_response>\n41\n</tool_response>"), std::string::npos)
      << trained.response;
}

TEST_F(AgentSessionTest, OfficialOpenAiClientAgentTrainsOnTheTokensTheEngineSampled) {
  const fs::path npm_dir = kSourceDir / ".deps" / "npm";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is missing";
  if (!fs::exists(npm_dir / "node_modules" / "openai" / "package.json")) {
    GTEST_SKIP() << "the npm package openai is not in " << npm_dir << " (make test installs it)";
  }
  const std::string transcript_path = dir_ + "/transcript.json";
  const std::vector<Sample> samples = run_agent("node " + quoted(kAgents / "openai_agent.mjs") +
                                                " " + quoted(npm_dir) + " " + transcript_path);
  const json transcript = read_json(transcript_path);
  ASSERT_EQ(transcript.size(), 3u) << (samples.empty() ? "" : samples[0].abort_reason);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].reward, 0.5);
  EXPECT_NE(samples[0].status, Sample::Status::kAborted) << samples[0].abort_reason;
  expect_token_exact(samples[0], transcript);
}

TEST_F(AgentSessionTest, SpecialTokenSampledMidTextKeepsTheConversationOneSample) {
  // The random model samples <|endoftext|> or <|im_start|> now and then; the returned text skips
  // them, so the agent's next prompt lacks them while the sampled ids hold them. A seed whose
  // first completion has one inside it (and runs to its length) shows the splice still holds.
  const std::vector<int64_t> prompt_ids = tokenizer().encode(sample().prompt);
  std::optional<int64_t> seed;
  for (int64_t candidate = 0; candidate < 200 && !seed; ++candidate) {
    const json answer = engines_->router().generate(
        {{"input_ids", prompt_ids},
         {"sampling_params", {{"max_new_tokens", 24}, {"temperature", 1.0}, {"seed", candidate}}}});
    const engine::GenerateOutput output = serving::generate_output_from_json(answer);
    const auto& ids = output.output_ids;
    if (ids.size() == 24 && std::any_of(ids.begin(), ids.end() - 1, [](int64_t id) {
          return id == 256 || id == 257;  // <|endoftext|>, <|im_start|>: special, not EOS
        })) {
      seed = candidate;
    }
  }
  ASSERT_TRUE(seed) << "no seed in 200 sampled a special token inside 24 tokens";

  const std::string transcript_path = dir_ + "/transcript.json";
  const std::vector<Sample> samples =
      run_agent("python3 " + quoted(kAgents / "urllib_agent.py") + " completions " +
                transcript_path + " " + std::to_string(*seed));
  const json transcript = read_json(transcript_path);
  ASSERT_EQ(transcript.size(), 2u) << transcript;
  const std::string first_text = transcript[0]["response"]["choices"][0]["text"];
  EXPECT_EQ(first_text.find("<|im_start|>"), std::string::npos) << "the text skips special tokens";
  ASSERT_EQ(samples.size(), 1u) << "the agent's second prompt extends its first call";
  const Sample& trained = samples[0];
  EXPECT_EQ(trained.metrics["agent/segments"], 1);
  // The prompt, the 24 sampled ids (specials included), " Go on." as an observation, 4 more.
  ASSERT_EQ(trained.response_length, 24 + 7 + 4);
  const auto mask_at = [&](size_t i) { return trained.loss_mask[i]; };
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(mask_at(i), 1) << i;
  for (size_t i = 24; i < 31; ++i) EXPECT_EQ(mask_at(i), 0) << i;
  for (size_t i = 31; i < 35; ++i) EXPECT_EQ(mask_at(i), 1) << i;
  const std::vector<int64_t> sampled(trained.tokens.begin() + trained.prompt_length(),
                                     trained.tokens.begin() + trained.prompt_length() + 24);
  EXPECT_TRUE(std::any_of(sampled.begin(), sampled.end() - 1, [](int64_t id) {
    return id == 256 || id == 257;
  })) << "the trained tokens are the ones sampled, the special one included";
  // And they read as the agent's second prompt once the special tokens are skipped.
  const std::vector<int64_t> spliced(trained.tokens.begin() + trained.prompt_length(),
                                     trained.tokens.begin() + trained.prompt_length() + 31);
  EXPECT_EQ(models::utf8_lossy(tokenizer().decode(spliced, /*skip_special_tokens=*/true)),
            first_text + " Go on.");
}

TEST_F(AgentSessionTest, TemplateThatDropsEarlierThinkingSplitsTheRolloutInTwo) {
  // Qwen3 without thinking writes an empty think block into the generation prompt, and leaves
  // it out when the same turn is history: the second prompt does not extend the first.
  use_template(models::ChatTemplate::from_name("qwen3"));
  const std::string transcript_path = dir_ + "/transcript.json";
  const std::vector<Sample> samples =
      run_agent("python3 " + quoted(kAgents / "urllib_agent.py") + " reasoning " + transcript_path);
  const json transcript = read_json(transcript_path);
  ASSERT_EQ(transcript.size(), 2u);
  ASSERT_EQ(samples.size(), 2u);
  for (const Sample& segment : samples) {
    EXPECT_EQ(segment.rollout_id, 5) << "the segments of one session are one rollout";
    EXPECT_EQ(segment.index, 5);
    EXPECT_EQ(std::count(segment.loss_mask.begin(), segment.loss_mask.end(), 0), 0)
        << "each segment is one call: prompt, then sampled tokens only";
  }
  EXPECT_EQ(samples[0].reward, 0) << "a rollout's reward is the sum of its samples'";
  EXPECT_EQ(samples[1].reward, 0.25);
  EXPECT_EQ(samples[0].metrics["agent/segments"], 2);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(std::vector<int64_t>(samples[i].tokens.begin(),
                                   samples[i].tokens.begin() + samples[i].prompt_length()),
              tokenizer().encode(rendered_prompt(*chat_, transcript[i]["request"])));
    EXPECT_EQ(samples[i].rollout_log_probs.size(), client_tokens(transcript[i]["response"]).size());
  }
}

TEST_F(AgentSessionTest, FailingAgentsGiveAbortedSamplesWithTheirReason) {
  const std::string agent = "python3 " + quoted(kAgents / "urllib_agent.py");
  const std::string transcript = dir_ + "/transcript.json";

  const std::vector<Sample> crashed = run_agent(agent + " crash " + transcript);
  ASSERT_EQ(crashed.size(), 1u);
  EXPECT_EQ(crashed[0].status, Sample::Status::kAborted);
  EXPECT_NE(crashed[0].abort_reason.find("exited with code 3"), std::string::npos);
  EXPECT_NE(crashed[0].abort_reason.find("boom: the agent fell over"), std::string::npos)
      << crashed[0].abort_reason;
  EXPECT_EQ(crashed[0].reward, 0);
  EXPECT_EQ(crashed[0].response_length, 0);
  EXPECT_EQ(crashed[0].tokens, sample().tokens);
  EXPECT_EQ(crashed[0].metrics["agent/aborted_exit_code"], 1);

  const auto start = std::chrono::steady_clock::now();
  const std::vector<Sample> hung = run_agent(agent + " hang " + transcript, /*timeout_s=*/1.0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_EQ(hung.size(), 1u);
  EXPECT_EQ(hung[0].status, Sample::Status::kAborted);
  EXPECT_NE(hung[0].abort_reason.find("timed out"), std::string::npos) << hung[0].abort_reason;
  EXPECT_EQ(hung[0].metrics["agent/aborted_timeout"], 1);

  const std::vector<Sample> missing = run_agent("/no/such/agent --flag");
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_NE(missing[0].abort_reason.find("exited with code 127"), std::string::npos);
  EXPECT_NE(missing[0].abort_reason.find("/no/such/agent"), std::string::npos)
      << missing[0].abort_reason;

  // Garbage on stdout is not a reward line; the agent's one good turn is its sample.
  const std::vector<Sample> garbage = run_agent(agent + " garbage " + transcript);
  ASSERT_EQ(garbage.size(), 1u);
  EXPECT_NE(garbage[0].status, Sample::Status::kAborted) << garbage[0].abort_reason;
  EXPECT_EQ(garbage[0].reward, 0.25);
  EXPECT_GT(garbage[0].response_length, 0);

  // A malformed request is answered 400 naming the field, and the session goes on.
  const std::vector<Sample> malformed = run_agent(agent + " malformed " + transcript);
  const json calls = read_json(transcript);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["status"], 400);
  EXPECT_EQ(calls[0]["response"]["error"]["param"], "messages[0].role") << calls[0];
  EXPECT_EQ(calls[1]["status"], 200);
  ASSERT_EQ(malformed.size(), 1u);
  EXPECT_NE(malformed[0].status, Sample::Status::kAborted);
  EXPECT_EQ(malformed[0].metrics["agent/turns"], 1);
}

TEST_F(AgentSessionTest, RolloutWithAgentCommandGoesOnPastFailingAgents) {
  std::vector<std::string> lines;
  for (int i = 0; i < 4; ++i) {
    lines.push_back(json{{"input", "question " + std::to_string(i)}, {"label", "x"}}.dump());
  }
  PromptDatasetOptions data;
  data.path = testing::write_lines("agent_prompts.jsonl", lines);
  data.label_key = "label";
  PromptSource source(std::make_shared<const PromptDataset>(data, tokenizer()));
  RewardOptions reward_options;
  reward_options.custom_rm_path = std::string(OOZE_ROLLOUT_TEST_PLUGINS) + ":first_token_parity";
  RewardModel rewards(reward_options);
  RolloutOptions options;
  options.rollout_batch_size = 2;
  options.n_samples_per_prompt = 2;
  options.sampling.max_response_len = 64;
  options.progress_interval_s = 0;
  // Odd samples crash; even ones make one turn and leave the reward to the run's function.
  options.agent_command =
      "python3 " + quoted(kAgents / "urllib_agent.py") + " crash_odd " + dir_ + "/transcript.json";
  options.agent_timeout_s = 60;
  options.concurrency = 4;
  RolloutManager manager(options, source, engines_->router(), tokenizer(), rewards);
  const RolloutResult result = manager.generate(0);
  ASSERT_EQ(result.groups.size(), 2u);
  int64_t aborted = 0;
  for (const std::vector<Sample>& group : result.groups) {
    ASSERT_EQ(group.size(), 2u);
    for (const Sample& trained : group) {
      ASSERT_FALSE(trained.reward.is_null());
      if (trained.index % 2 == 1) {
        ++aborted;
        EXPECT_EQ(trained.status, Sample::Status::kAborted);
        EXPECT_EQ(trained.reward, 0);
      } else {
        EXPECT_NE(trained.status, Sample::Status::kAborted) << trained.abort_reason;
        EXPECT_GT(trained.response_length, 0);
      }
    }
  }
  EXPECT_EQ(aborted, 2);
  EXPECT_EQ(result.metrics.at("rollout/agent/aborted/exit_code"), 2);
  EXPECT_EQ(result.metrics.at("rollout/agent/turns/max"), 1);
  EXPECT_EQ(result.metrics.at("rollout/agent/turns/mean"), 0.5);
}

}  // namespace agent_session_test
}  // namespace ooze::rollout
