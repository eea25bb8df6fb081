// --env-url against a real environment server: examples/env/env_server.py (Python's
// http.server) started as its own process, played by the rollout manager over real engines.
// The server logs every step it answered; the samples are checked against that log.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "models/tokenizer.h"
#include "rollout/rollout_manager.h"
#include "serving/http_client.h"
#include "tests/support/process.h"
#include "tests/support/served_engines.h"

namespace ooze::rollout {
namespace env_loop_test {

using nlohmann::json;

// The addition prompts of the demo task, one group each.
PromptSource addition_prompts(const models::Tokenizer& tokenizer, int count) {
  std::vector<std::string> lines;
  for (int i = 0; i < count; ++i) {
    lines.push_back(json{{"input", std::to_string(i) + "+" + std::to_string(i + 1) + "="},
                         {"label", std::to_string(2 * i + 1)}}
                        .dump());
  }
  PromptDatasetOptions data;
  data.path = testing::write_lines("env_prompts.jsonl", lines);
  data.label_key = "label";
  return PromptSource(std::make_shared<const PromptDataset>(data, tokenizer));
}

RolloutOptions env_options(const std::string& url) {
  RolloutOptions options;
  options.rollout_batch_size = 3;
  options.n_samples_per_prompt = 2;
  options.sampling.max_response_len = 160;
  options.progress_interval_s = 0;
  options.env_url = url;
  options.env_max_turns = 3;
  options.env_timeout_s = 30;
  return options;
}

// The runs of `sample`'s response with loss mask `mask`, as text.
std::vector<std::string> runs_with_mask(const Sample& sample, int32_t mask,
                                        const models::Tokenizer& tokenizer) {
  std::vector<std::string> runs;
  std::vector<int64_t> current;
  for (int64_t i = 0; i <= sample.response_length; ++i) {
    const bool inside = i < sample.response_length && sample.loss_mask[i] == mask;
    if (inside) {
      current.push_back(sample.tokens[static_cast<size_t>(sample.prompt_length() + i)]);
    } else if (!current.empty()) {
      runs.push_back(tokenizer.decode(current));
      current.clear();
    }
  }
  return runs;
}

RewardOptions environment_rewards() {
  RewardOptions options;
  options.environment_rewards = true;  // as ooze train sets it for --env-url
  return options;
}

class EnvLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engines_ = new testing::ServedEngines(1); }
  static void TearDownTestSuite() {
    delete engines_;
    engines_ = nullptr;
  }
  static testing::ServedEngines* engines_;
};

testing::ServedEngines* EnvLoopTest::engines_ = nullptr;

TEST_F(EnvLoopTest, EpisodesBecomeSamplesWithTheEnvironmentsObservationsAndReturn) {
  const std::string dir = testing::make_temp_dir("env-loop");
  const std::string log = dir + "/episodes.jsonl";
  const int port = testing::pick_free_port();
  testing::Process env(
      {"/usr/bin/python3", std::string(OOZE_SOURCE_DIR) + "/examples/env/env_server.py", "--port",
       std::to_string(port), "--log", log},
      {}, dir + "/env.log");
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  serving::HttpClient probe(url);
  serving::HttpRequest health;
  health.target = "/health";
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    try {
      up = probe.send(health).status == 200;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_TRUE(up) << env.output();

  PromptSource source = addition_prompts(engines_->tokenizer(), 3);
  RewardModel rewards(environment_rewards());
  RolloutManager manager(env_options(url), source, engines_->router(), engines_->tokenizer(),
                         rewards);
  const RolloutResult result = manager.generate(0);

  std::map<std::string, std::vector<json>> steps;  // by episode, in order
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    const json step = json::parse(line);
    steps[step["episode_id"].get<std::string>()].push_back(step);
  }
  ASSERT_EQ(result.groups.size(), 3u);
  int64_t samples = 0, observed = 0;
  for (const std::vector<Sample>& group : result.groups) {
    for (const Sample& sample : group) {
      ++samples;
      const std::vector<json>& episode = steps["sample-" + std::to_string(sample.index)];
      ASSERT_FALSE(episode.empty()) << "sample " << sample.index << " took no step";
      EXPECT_NE(sample.status, Sample::Status::kAborted) << sample.abort_reason;
      double episode_return = 0;
      std::vector<std::string> observations;
      for (const json& step : episode) {
        episode_return += step["reward"].get<double>();
        if (!step["done"].get<bool>()) observations.push_back(step["observation"]);
      }
      EXPECT_DOUBLE_EQ(sample.reward.get<double>(), episode_return);
      EXPECT_EQ(sample.metrics["agent/turns"], static_cast<int64_t>(episode.size()));
      // Observations are the environment's text exactly, with loss mask 0; the policy's turns,
      // one per step, mask 1. A sample whose response budget ran out keeps what fitted of the
      // last observation (the random model's turns are long).
      const std::vector<std::string> masked = runs_with_mask(sample, 0, engines_->tokenizer());
      observed += static_cast<int64_t>(masked.size());
      if (sample.status == Sample::Status::kTruncated) {
        ASSERT_LE(masked.size(), observations.size());
        for (size_t i = 0; i < masked.size(); ++i) {
          EXPECT_EQ(observations[i].rfind(masked[i], 0), 0u) << masked[i];
          if (i + 1 < masked.size()) {
            EXPECT_EQ(masked[i], observations[i]);
          }
        }
      } else {
        EXPECT_EQ(masked, observations);
      }
      EXPECT_EQ(runs_with_mask(sample, 1, engines_->tokenizer()).size(), episode.size());
      EXPECT_LE(episode.size(), 3u);
    }
  }
  EXPECT_EQ(samples, 6);
  EXPECT_GT(observed, 0) << "no episode went past its first step";
  EXPECT_EQ(steps.size(), 6u);
  EXPECT_GE(result.metrics.at("rollout/agent/turns/max"), 1);
}

TEST_F(EnvLoopTest, AnEnvironmentThatIsNotThereAbortsSamplesAndTheRolloutGoesOn) {
  const std::string url = "http://127.0.0.1:" + std::to_string(testing::pick_free_port());
  PromptSource source = addition_prompts(engines_->tokenizer(), 3);
  RewardModel rewards(environment_rewards());
  RolloutManager manager(env_options(url), source, engines_->router(), engines_->tokenizer(),
                         rewards);
  const RolloutResult result = manager.generate(0);
  ASSERT_EQ(result.groups.size(), 3u);
  for (const std::vector<Sample>& group : result.groups) {
    for (const Sample& sample : group) {
      EXPECT_EQ(sample.status, Sample::Status::kAborted);
      EXPECT_NE(sample.abort_reason.find("environment " + url + ": POST /reset failed"),
                std::string::npos)
          << sample.abort_reason;
      EXPECT_EQ(sample.reward, 0);
    }
  }
  EXPECT_EQ(result.metrics.at("rollout/agent/aborted/env"), 6);
}

}  // namespace env_loop_test
}  // namespace ooze::rollout
