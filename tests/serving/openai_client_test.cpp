// The engine server as the official OpenAI client sees it: tests/serving/openai_client.mjs
// (node, the npm package "openai" from .deps/npm) calls models.list, completions and chat
// completions, streamed and not, with log-probs, a bad request and a wrong API key; this test
// checks what it printed against the engine run in-process.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "serving/engine_server.h"
#include "tests/support/tiny_model.h"

namespace ooze::serving {
namespace openai_client_test {

namespace fs = std::filesystem;
using nlohmann::json;

// The repository this test was compiled from (CMake passes absolute source paths).
fs::path source_root() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

bool have_node() { return std::system("node --version > /dev/null 2>&1") == 0; }

std::string run_and_capture(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return output;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  ::pclose(pipe);
  return output;
}

// Paths and URLs here hold no quote characters.
// Paths and URLs here hold no quote characters.
std::string shell_quoted(const std::string& text) { return "'" + text + "'"; }

engine::GenerateOutput greedy(engine::Engine& engine, const std::vector<int64_t>& ids,
                              int64_t max_new_tokens) {
  engine::GenerateRequest request;
  request.input_ids = ids;
  request.sampling.temperature = 0.0;
  request.sampling.max_new_tokens = max_new_tokens;
  request.sampling.ignore_eos = true;
  request.return_logprob = true;
  return engine.generate(request).at(0);
}

TEST(OpenAiClient, OfficialClientGetsWhatTheEngineComputes) {
  const fs::path npm_dir = source_root() / ".deps" / "npm";
  if (!have_node()) GTEST_SKIP() << "node is not installed (scripts/install-deps.sh installs it)";
  if (!fs::exists(npm_dir / "node_modules" / "openai" / "package.json")) {
    GTEST_SKIP() << "the npm package openai is not in " << npm_dir
                 << " (run scripts/install-deps.sh)";
  }
  at::set_num_threads(1);
  engine::EngineOptions options;
  options.model_dir = testing::tiny_model_dir();
  options.served_model_name = "ooze-tiny";
  options.kv_cache_blocks = 256;
  options.intra_op_threads = 1;
  engine::Engine engine(options);
  ServerOptions server_options;
  server_options.api_key = "sk-ooze-test";
  EngineServer server(engine, server_options);

  const std::string command =
      "node " + shell_quoted((source_root() / "tests/serving/openai_client.mjs").string()) + " " +
      shell_quoted(server.url()) + " " + shell_quoted(npm_dir.string()) + " " +
      shell_quoted(server_options.api_key) + " 2>&1";
  const std::string output = run_and_capture(command);
  json out;
  try {
    out = json::parse(output);
  } catch (const std::exception&) {
    FAIL() << "the client printed no JSON:\n" << output;
  }
  ASSERT_FALSE(out.contains("error")) << out["error"];

  EXPECT_EQ(out["models"], json::array({"ooze-tiny"}));

  // Completions: the same tokens as the engine in-process, streamed or not.
  const engine::GenerateOutput completion =
      greedy(engine, engine.tokenizer().encode("Once upon a time"), 16);
  EXPECT_EQ(out["completion"]["object"], "text_completion");
  EXPECT_EQ(out["completion"]["text"], completion.text);
  EXPECT_EQ(out["completion"]["finish_reason"], "length");
  ASSERT_EQ(out["completion"]["token_logprobs"].size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_NEAR(out["completion"]["token_logprobs"][i].get<double>(), completion.output_logprobs[i],
                1e-4);
  }
  EXPECT_EQ(out["completion"]["usage"]["completion_tokens"], 16);
  EXPECT_EQ(out["completion"]["usage"]["prompt_tokens"], completion.prompt_tokens);
  EXPECT_EQ(out["completion_stream"]["text"], out["completion"]["text"]);
  EXPECT_EQ(out["completion_stream"]["finish_reason"], "length");
  EXPECT_EQ(out["completion_stream"]["usage"], out["completion"]["usage"]);
  EXPECT_EQ(out["completion_stream"]["logprob_tokens"], 16);
  EXPECT_GT(out["completion_stream"]["chunks"].get<int>(), 2);  // streamed, not one answer

  // n = 2 over two prompts: prompt-major choices, equal greedy samples.
  ASSERT_EQ(out["samples"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out["samples"][i]["index"], i);
  EXPECT_EQ(out["samples"][0]["text"], out["samples"][1]["text"]);
  EXPECT_EQ(out["samples"][2]["text"], out["samples"][3]["text"]);
  EXPECT_EQ(out["samples"][0]["text"], greedy(engine, engine.tokenizer().encode("a"), 4).text);

  // Chat: the model's chat template with the generation prompt.
  const std::string prompt =
      models::select_chat_template(engine.tokenizer(), "")
          .render({{"system", "Be brief.", std::nullopt}, {"user", "Hello there", std::nullopt}},
                  /*add_generation_prompt=*/true);
  const engine::GenerateOutput chat = greedy(engine, engine.tokenizer().encode(prompt), 16);
  EXPECT_EQ(out["chat"]["object"], "chat.completion");
  EXPECT_EQ(out["chat"]["role"], "assistant");
  EXPECT_EQ(out["chat"]["content"], chat.text);
  ASSERT_EQ(out["chat"]["logprobs"].size(), 16u);
  EXPECT_NEAR(out["chat"]["logprobs"][0].get<double>(), chat.output_logprobs[0], 1e-4);
  EXPECT_EQ(out["chat"]["top_logprobs"][0], 2);
  EXPECT_EQ(out["chat_stream"]["content"], out["chat"]["content"]);
  EXPECT_EQ(out["chat_stream"]["first_role"], "assistant");
  EXPECT_EQ(out["chat_stream"]["finish_reason"], "length");
  EXPECT_EQ(out["chat_stream"]["usage"]["total_tokens"], out["chat"]["usage"]["total_tokens"]);

  // Errors as the client reports them.
  EXPECT_EQ(out["bad_request"]["status"], 400);
  EXPECT_EQ(out["bad_request"]["param"], "temperature");
  EXPECT_EQ(out["bad_request"]["type"], "invalid_request_error");
  EXPECT_EQ(out["wrong_key_status"], 401);

  // Nothing left running, every block free.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  engine::EngineStats stats = engine.stats();
  while ((stats.running_sequences > 0 || stats.free_blocks != stats.total_blocks) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stats = engine.stats();
  }
  EXPECT_EQ(stats.running_sequences, 0);
  EXPECT_EQ(stats.free_blocks, stats.total_blocks);
}

}  // namespace openai_client_test
}  // namespace ooze::serving
