// The engine's HTTP endpoints over real loopback sockets, against the same engine called
// in-process: /generate (single, batch, n > 1, streaming), the OpenAI APIs, controls, the API
// key, 1,000 malformed requests, and clients that leave mid-request (their blocks must return).
#include "serving/engine_server.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <future>
#include <random>
#include <thread>

#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "serving/generate_protocol.h"
#include "tests/support/http_test_client.h"
#include "tests/support/tiny_model.h"

namespace ooze::serving {
namespace engine_server_test {

using nlohmann::json;
using testing::HttpReply;
using testing::TestHttpClient;

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return predicate();
}

class EngineServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    at::set_num_threads(1);
    engine::EngineOptions options;
    options.model_dir = testing::tiny_model_dir();
    options.kv_cache_blocks = 512;
    options.block_size = 16;
    options.max_running_requests = 32;
    options.chunked_prefill_size = 256;
    options.intra_op_threads = 1;
    options.seed = 1;
    engine_ = new engine::Engine(options);
    server_ = new EngineServer(*engine_, ServerOptions{});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete engine_;
  }

  void TearDown() override {
    // Every test leaves the engine idle with every block free.
    EXPECT_TRUE(eventually([] { return idle(); })) << stats_text();
  }

  static bool idle() {
    const engine::EngineStats stats = engine_->stats();
    return stats.running_sequences == 0 && stats.waiting_sequences == 0 &&
           stats.free_blocks == stats.total_blocks;
  }
  static std::string stats_text() {
    const engine::EngineStats s = engine_->stats();
    return "running " + std::to_string(s.running_sequences) + ", waiting " +
           std::to_string(s.waiting_sequences) + ", free blocks " + std::to_string(s.free_blocks) +
           " of " + std::to_string(s.total_blocks);
  }

  static uint16_t port() { return server_->port(); }

  // The same request through the engine in-process.
  static engine::GenerateOutput in_process(const std::string& text, int64_t max_new_tokens,
                                           bool logprobs = false) {
    engine::GenerateRequest request;
    request.input_ids = engine_->tokenizer().encode(text);
    request.sampling.temperature = 0.0;
    request.sampling.max_new_tokens = max_new_tokens;
    request.sampling.ignore_eos = true;
    request.return_logprob = logprobs;
    return engine_->generate(request).at(0);
  }

  static json greedy_body(const json& prompt, int64_t max_new_tokens) {
    return {{"text", prompt},
            {"sampling_params",
             {{"temperature", 0}, {"max_new_tokens", max_new_tokens}, {"ignore_eos", true}}}};
  }

  static engine::Engine* engine_;
  static EngineServer* server_;
};

engine::Engine* EngineServerTest::engine_ = nullptr;
EngineServer* EngineServerTest::server_ = nullptr;

TEST_F(EngineServerTest, InformationEndpoints) {
  TestHttpClient client(port());
  EXPECT_EQ(client.request("GET", "/health").status, 200);
  HttpReply info = client.request("GET", "/get_model_info");
  ASSERT_EQ(info.status, 200);
  EXPECT_EQ(info.json()["model_path"], engine_->info().model_path);
  EXPECT_EQ(info.json()["is_generation"], true);
  EXPECT_EQ(info.json()["context_length"], engine_->info().context_length);
  HttpReply server_info = client.request("GET", "/get_server_info");
  ASSERT_EQ(server_info.status, 200);
  EXPECT_EQ(server_info.json()["num_blocks"], 512);
  EXPECT_EQ(server_info.json()["stats"]["total_blocks"], 512);
  EXPECT_TRUE(server_info.json()["stats"].contains("cache_hit_rate"));
  HttpReply models = client.request("GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["object"], "list");
  EXPECT_EQ(models.json()["data"][0]["id"], engine_->info().served_model_name.empty()
                                                ? engine_->info().model_path
                                                : engine_->info().served_model_name);
  const int64_t steps = engine_->stats().steps;
  EXPECT_EQ(client.request("GET", "/health_generate").status, 200);
  EXPECT_GT(engine_->stats().steps, steps);  // it really ran the engine
  EXPECT_EQ(client.request("POST", "/flush_cache").json()["success"], true);
  EXPECT_EQ(client.request("POST", "/v1/models").status, 405);
  EXPECT_EQ(client.request("GET", "/generate").status, 405);
  EXPECT_EQ(client.request("GET", "/v2/nothing").status, 404);
}

TEST_F(EngineServerTest, GenerateGreedyEqualsTheEngineInProcess) {
  const engine::GenerateOutput expected = in_process("The quick brown fox", 12, /*logprobs=*/true);
  TestHttpClient client(port());
  json body = greedy_body("The quick brown fox", 12);
  body["return_logprob"] = true;
  body["top_logprobs_num"] = 3;
  body["return_text_in_logprobs"] = true;
  HttpReply reply = client.post_json("/generate", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json out = reply.json();
  ASSERT_TRUE(out.is_object());
  EXPECT_EQ(out["text"], expected.text);
  EXPECT_EQ(out["output_ids"].get<std::vector<int64_t>>(), expected.output_ids);
  const json& meta = out["meta_info"];
  EXPECT_EQ(meta["finish_reason"]["type"], "length");
  EXPECT_EQ(meta["finish_reason"]["length"], 12);
  EXPECT_EQ(meta["prompt_tokens"], expected.prompt_tokens);
  EXPECT_EQ(meta["completion_tokens"], 12);
  ASSERT_EQ(meta["output_token_logprobs"].size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    const json& triple = meta["output_token_logprobs"][i];
    EXPECT_NEAR(triple[0].get<double>(), expected.output_logprobs[i], 1e-4);
    EXPECT_EQ(triple[1], expected.output_ids[i]);
    EXPECT_TRUE(triple[2].is_string());
    // Greedy: the sampled token is the most likely one.
    ASSERT_EQ(meta["output_top_logprobs"][i].size(), 3u);
    EXPECT_EQ(meta["output_top_logprobs"][i][0][1], expected.output_ids[i]);
  }
  // The same prompt as ids.
  json by_ids = greedy_body("", 12);
  by_ids.erase("text");
  by_ids["input_ids"] = engine_->tokenizer().encode("The quick brown fox");
  HttpReply ids_reply = client.post_json("/generate", by_ids);
  ASSERT_EQ(ids_reply.status, 200);
  EXPECT_EQ(ids_reply.json()["output_ids"], out["output_ids"]);
  // A second identical prompt reuses the cached prefix.
  EXPECT_GT(ids_reply.json()["meta_info"]["cached_tokens"].get<int64_t>(), 0);
}

TEST_F(EngineServerTest, GenerateScoresThePromptInSGLangShape) {
  // The teacher's call in on-policy distillation: every prompt token's log-prob, no output.
  const std::vector<int64_t> ids = engine_->tokenizer().encode("The quick brown fox");
  const int64_t length = static_cast<int64_t>(ids.size());
  engine::GenerateRequest request;
  request.input_ids = ids;
  request.sampling.max_new_tokens = 0;
  request.return_logprob = true;
  request.logprob_start_len = 0;
  request.top_logprobs_num = 2;
  const engine::GenerateOutput expected = engine_->generate(request).at(0);
  ASSERT_EQ(static_cast<int64_t>(expected.input_logprobs.size()), length - 1);

  TestHttpClient client(port());
  const json body = {{"input_ids", ids},       {"sampling_params", {{"max_new_tokens", 0}}},
                     {"return_logprob", true}, {"logprob_start_len", 0},
                     {"top_logprobs_num", 2},  {"return_text_in_logprobs", true}};
  HttpReply reply = client.post_json("/generate", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json out = reply.json();
  EXPECT_EQ(out["text"], "");
  EXPECT_EQ(out["output_ids"], json::array());
  const json& meta = out["meta_info"];
  EXPECT_EQ(meta["finish_reason"], (json{{"type", "length"}, {"length", 0}}));
  EXPECT_EQ(meta["completion_tokens"], 0);
  EXPECT_EQ(meta["output_token_logprobs"], json::array());
  const json& input = meta["input_token_logprobs"];
  ASSERT_EQ(static_cast<int64_t>(input.size()), length);
  EXPECT_TRUE(input[0][0].is_null());  // nothing predicts the first token
  EXPECT_EQ(input[0][1], ids[0]);
  for (int64_t i = 1; i < length; ++i) {
    EXPECT_NEAR(input[i][0].get<double>(), expected.input_logprobs[i - 1], 1e-6);
    EXPECT_EQ(input[i][1], ids[i]);
    EXPECT_EQ(input[i][2], engine_->tokenizer().decode({ids[i]}));
  }
  const json& top = meta["input_top_logprobs"];
  ASSERT_EQ(static_cast<int64_t>(top.size()), length);
  EXPECT_TRUE(top[0].is_null());
  for (int64_t i = 1; i < length; ++i) {
    ASSERT_EQ(top[i].size(), 2u);
    EXPECT_EQ(top[i][0][1], expected.input_top_logprobs[i - 1][0].token_id);
    EXPECT_GE(top[i][0][0].get<double>(), top[i][1][0].get<double>());
  }
  // What a client of the router reads back.
  EXPECT_EQ(generate_output_from_json(out).input_logprobs, expected.input_logprobs);

  // From position 3 on, with an output: one entry per prompt token from there, no text.
  json tail = body;
  tail["logprob_start_len"] = 3;
  tail["sampling_params"] = {{"max_new_tokens", 2}, {"temperature", 0}, {"ignore_eos", true}};
  tail.erase("return_text_in_logprobs");
  tail.erase("top_logprobs_num");
  HttpReply tail_reply = client.post_json("/generate", tail);
  ASSERT_EQ(tail_reply.status, 200) << tail_reply.body;
  const json tail_meta = tail_reply.json()["meta_info"];
  ASSERT_EQ(static_cast<int64_t>(tail_meta["input_token_logprobs"].size()), length - 3);
  EXPECT_NEAR(tail_meta["input_token_logprobs"][0][0].get<double>(), expected.input_logprobs[2],
              1e-5);
  EXPECT_TRUE(tail_meta["input_token_logprobs"][0][2].is_null());
  EXPECT_EQ(tail_meta["output_token_logprobs"].size(), 2u);
  EXPECT_FALSE(tail_meta.contains("input_top_logprobs"));

  // As SGLang: no prompt log-probs without return_logprob.
  json quiet = tail;
  quiet["return_logprob"] = false;
  HttpReply quiet_reply = client.post_json("/generate", quiet);
  ASSERT_EQ(quiet_reply.status, 200) << quiet_reply.body;
  EXPECT_FALSE(quiet_reply.json()["meta_info"].contains("input_token_logprobs"));
}

TEST_F(EngineServerTest, GenerateBatchAndSamplesComeInSGLangOrder) {
  const std::vector<std::string> prompts = {"alpha beta", "gamma", "delta epsilon zeta"};
  std::vector<engine::GenerateOutput> expected;
  for (const std::string& p : prompts) expected.push_back(in_process(p, 8));
  TestHttpClient client(port());
  HttpReply batch = client.post_json("/generate", greedy_body(prompts, 8));
  ASSERT_EQ(batch.status, 200) << batch.body;
  ASSERT_TRUE(batch.json().is_array());
  ASSERT_EQ(batch.json().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(batch.json()[i]["output_ids"].get<std::vector<int64_t>>(), expected[i].output_ids);
  }
  // A batch with n = 2: prompt-major, then sample; greedy samples equal their prompt's output.
  json body = greedy_body(prompts, 8);
  body["sampling_params"]["n"] = 2;
  body["rid"] = {"b0", "b1", "b2"};
  HttpReply samples = client.post_json("/generate", body);
  ASSERT_EQ(samples.status, 200) << samples.body;
  ASSERT_EQ(samples.json().size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(samples.json()[i]["meta_info"]["id"], "b" + std::to_string(i / 2));
    EXPECT_EQ(samples.json()[i]["output_ids"].get<std::vector<int64_t>>(),
              expected[i / 2].output_ids);
  }
  // n > 1 on one prompt with temperature: a list of n, reproducible with a seed.
  json sampled = {
      {"text", "sample me"},
      {"sampling_params", {{"temperature", 1.0}, {"max_new_tokens", 10}, {"n", 4}, {"seed", 42}}}};
  HttpReply first = client.post_json("/generate", sampled);
  HttpReply second = client.post_json("/generate", sampled);
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(first.json().size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(first.json()[i]["output_ids"], second.json()[i]["output_ids"]);
  }
  std::set<json> distinct;
  for (const json& out : first.json()) distinct.insert(out["output_ids"]);
  EXPECT_GT(distinct.size(), 1u);  // the samples differ from each other
}

TEST_F(EngineServerTest, GenerateStreamsCumulativeEvents) {
  const engine::GenerateOutput expected = in_process("stream this", 24);
  TestHttpClient client(port());
  json body = greedy_body("stream this", 24);
  body["stream"] = true;
  // The server sends each sample's latest output when its writer is free, so on a loaded machine
  // a short generation may finish before an intermediate event goes out: a few tries must show
  // one, and every try must be cumulative and end with the whole result.
  bool saw_intermediate = false;
  for (int attempt = 0; attempt < 5 && !saw_intermediate; ++attempt) {
    client.start_stream("/generate", body);
    ASSERT_EQ(client.stream_status(), 200);
    std::vector<std::string> events = client.rest_of_stream();
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back(), "[DONE]");
    size_t previous = 0;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const json event = json::parse(events[i]);
      const size_t length = event["output_ids"].size();
      EXPECT_GE(length, previous);  // cumulative
      previous = length;
      if (i + 2 < events.size()) {
        EXPECT_TRUE(event["meta_info"]["finish_reason"].is_null());
      }
    }
    const size_t first_length = json::parse(events[0])["output_ids"].size();
    EXPECT_GT(first_length, 0u);
    saw_intermediate = events.size() >= 3 && first_length < 24u;  // not only the final result
    const json last = json::parse(events[events.size() - 2]);
    EXPECT_EQ(last["text"], expected.text);
    EXPECT_EQ(last["output_ids"].get<std::vector<int64_t>>(), expected.output_ids);
    EXPECT_EQ(last["meta_info"]["finish_reason"]["type"], "length");
  }
  EXPECT_TRUE(saw_intermediate) << "five streams sent only their final result";
  // The connection serves the next request.
  EXPECT_EQ(client.request("GET", "/health").status, 200);
}

TEST_F(EngineServerTest, StopStringsEndTheTextInBothApisAndStreams) {
  // A stop string of two printable ASCII characters from the middle of a greedy text (a random
  // model writes any bytes): the output must end right before it.
  std::string prompt, stop;
  engine::GenerateOutput free_run;
  for (int attempt = 0; attempt < 20 && stop.empty(); ++attempt) {
    prompt = "stop here please " + std::to_string(attempt);
    free_run = in_process(prompt, 24);
    for (size_t at = 3; at + 1 < free_run.text.size() && stop.empty(); ++at) {
      if (std::isprint(static_cast<unsigned char>(free_run.text[at])) &&
          std::isprint(static_cast<unsigned char>(free_run.text[at + 1]))) {
        stop = free_run.text.substr(at, 2);
      }
    }
  }
  ASSERT_FALSE(stop.empty()) << "no greedy text with two ASCII characters in a row";
  const std::string before = free_run.text.substr(0, free_run.text.find(stop));
  TestHttpClient client(port());
  json body = greedy_body(prompt, 24);
  body["sampling_params"]["stop"] = stop;
  HttpReply reply = client.post_json("/generate", body);
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.json()["text"], before);
  EXPECT_EQ(reply.json()["meta_info"]["finish_reason"]["type"], "stop");
  EXPECT_EQ(reply.json()["meta_info"]["finish_reason"]["matched"], stop);

  json completion = {{"model", "m"},     {"prompt", prompt},       {"max_tokens", 24},
                     {"temperature", 0}, {"stop", {stop, "zzzz"}}, {"ignore_eos", true}};
  HttpReply whole = client.post_json("/v1/completions", completion);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.json()["choices"][0]["text"], before);
  EXPECT_EQ(whole.json()["choices"][0]["finish_reason"], "stop");
  // Streamed deltas never show the stop string, and add up to the same text.
  completion["stream"] = true;
  client.start_stream("/v1/completions", completion);
  std::string streamed;
  std::string finish;
  for (const std::string& event : client.rest_of_stream()) {
    if (event == "[DONE]") break;
    const json chunk = json::parse(event);
    streamed += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null())
      finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(streamed, before);
  EXPECT_EQ(finish, "stop");
}

TEST_F(EngineServerTest, OpenAiCompletionsMatchGenerate) {
  const engine::GenerateOutput expected = in_process("Once upon", 10, /*logprobs=*/true);
  TestHttpClient client(port());
  json body = {{"model", "anything"}, {"prompt", "Once upon"}, {"max_tokens", 10},
               {"temperature", 0},    {"logprobs", 2},         {"ignore_eos", true},
               {"user", "someone"}};
  HttpReply reply = client.post_json("/v1/completions", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json out = reply.json();
  EXPECT_EQ(out["object"], "text_completion");
  EXPECT_EQ(out["choices"][0]["text"], expected.text);
  EXPECT_EQ(out["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(out["usage"]["prompt_tokens"], expected.prompt_tokens);
  EXPECT_EQ(out["usage"]["completion_tokens"], 10);
  EXPECT_EQ(out["usage"]["total_tokens"], expected.prompt_tokens + 10);
  const json& logprobs = out["choices"][0]["logprobs"];
  ASSERT_EQ(logprobs["token_logprobs"].size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_NEAR(logprobs["token_logprobs"][i].get<double>(), expected.output_logprobs[i], 1e-4);
    // Two alternatives, unless their texts coincide (bytes that are no character both read
    // as U+FFFD): the legacy format is a dict keyed by token text.
    EXPECT_GE(logprobs["top_logprobs"][i].size(), 1u);
    EXPECT_LE(logprobs["top_logprobs"][i].size(), 2u);
  }
  // Several prompts and n: choices are prompt-major.
  body = {{"prompt", {"Once upon", "A"}},
          {"max_tokens", 4},
          {"temperature", 0},
          {"n", 2},
          {"ignore_eos", true}};
  HttpReply multi = client.post_json("/v1/completions", body);
  ASSERT_EQ(multi.status, 200) << multi.body;
  ASSERT_EQ(multi.json()["choices"].size(), 4u);
  EXPECT_EQ(multi.json()["choices"][1]["text"],
            expected.text.substr(0, multi.json()["choices"][1]["text"].get<std::string>().size()));
  EXPECT_EQ(multi.json()["choices"][0]["text"], multi.json()["choices"][1]["text"]);
  EXPECT_EQ(multi.json()["choices"][2]["text"], multi.json()["choices"][3]["text"]);
  EXPECT_EQ(multi.json()["choices"][3]["index"], 3);
  EXPECT_EQ(multi.json()["usage"]["completion_tokens"], 16);
}

TEST_F(EngineServerTest, OpenAiChatUsesTheChatTemplateAndStreams) {
  const std::vector<models::ChatMessage> messages = {{"system", "Be brief.", std::nullopt},
                                                     {"user", "Hello there", std::nullopt}};
  const std::string prompt =
      models::select_chat_template(engine_->tokenizer(), "").render(messages, true);
  engine::GenerateRequest request;
  request.input_ids = engine_->tokenizer().encode(prompt);
  request.sampling.temperature = 0.0;
  request.sampling.max_new_tokens = 12;
  request.sampling.ignore_eos = true;
  const engine::GenerateOutput expected = engine_->generate(request).at(0);

  TestHttpClient client(port());
  json body = {{"model", "m"},
               {"messages",
                {{{"role", "system"}, {"content", "Be brief."}},
                 {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hello there"}}}}}}},
               {"max_completion_tokens", 12},
               {"temperature", 0},
               {"ignore_eos", true},
               {"logprobs", true},
               {"top_logprobs", 2}};
  HttpReply reply = client.post_json("/v1/chat/completions", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json out = reply.json();
  EXPECT_EQ(out["object"], "chat.completion");
  EXPECT_EQ(out["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(out["choices"][0]["message"]["content"], expected.text);
  EXPECT_EQ(out["usage"]["prompt_tokens"], static_cast<int64_t>(request.input_ids.size()));
  ASSERT_EQ(out["choices"][0]["logprobs"]["content"].size(), 12u);
  EXPECT_EQ(out["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);

  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  client.start_stream("/v1/chat/completions", body);
  std::vector<std::string> events = client.rest_of_stream();
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  size_t logprob_count = 0;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    const json& choice = chunk["choices"][0];
    content += choice["delta"].value("content", "");
    if (choice["logprobs"].is_object()) logprob_count += choice["logprobs"]["content"].size();
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(content, expected.text);
  EXPECT_EQ(logprob_count, 12u);
  EXPECT_EQ(finish, "length");
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
}

TEST_F(EngineServerTest, ConcurrentClientsGetTheirOwnResults) {
  constexpr int kClients = 16;
  std::vector<std::string> prompts;
  std::vector<engine::GenerateOutput> expected;
  for (int i = 0; i < kClients; ++i) {
    prompts.push_back("client " + std::to_string(i) + " says");
    expected.push_back(in_process(prompts.back(), 8));
  }
  std::atomic<int> matches{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      TestHttpClient client(port());
      for (int round = 0; round < 3; ++round) {
        json body = greedy_body(prompts[i], 8);
        const bool stream = round == 1;
        if (stream) {
          body["stream"] = true;
          client.start_stream("/generate", body);
          std::vector<std::string> events = client.rest_of_stream();
          if (events.size() >= 2 &&
              json::parse(events[events.size() - 2])["output_ids"].get<std::vector<int64_t>>() ==
                  expected[i].output_ids) {
            ++matches;
          }
        } else {
          HttpReply reply = client.post_json("/generate", body);
          if (reply.status == 200 &&
              reply.json()["output_ids"].get<std::vector<int64_t>>() == expected[i].output_ids) {
            ++matches;
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(matches.load(), kClients * 3);
}

TEST_F(EngineServerTest, ApiKeyIsRequiredExceptForHealth) {
  ServerOptions options;
  options.api_key = "secret-key";
  EngineServer guarded(*engine_, options);
  TestHttpClient client(guarded.port());
  EXPECT_EQ(client.request("GET", "/health").status, 200);
  EXPECT_EQ(client.post_json("/generate", greedy_body("x", 2)).status, 401);
  EXPECT_EQ(client.request("GET", "/v1/models", "", {{"Authorization", "Bearer wrong"}}).status,
            401);
  EXPECT_EQ(client.request("GET", "/get_model_info").status, 401);
  HttpReply ok =
      client.post_json("/generate", greedy_body("x", 2), {{"Authorization", "Bearer secret-key"}});
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.json()["meta_info"]["completion_tokens"], 2);
}

TEST_F(EngineServerTest, BadRequestsName400Fields) {
  TestHttpClient client(port());
  struct Case {
    std::string target;
    std::string body;
    std::string param;
  };
  const std::string too_long = json{{"input_ids", std::vector<int64_t>(40000, 65)}}.dump();
  const std::vector<Case> cases = {
      {"/generate", "{\"text\": \"hi\"", "body"},
      {"/generate", "[1, 2]", "body"},
      {"/generate", "{\"text\": \"hi\", \"sampling_params\": {\"top_p\": 2}}",
       "sampling_params.top_p"},
      {"/generate", "{\"text\": \"hi\", \"sampling_params\": {\"max_new_tokens\": -3}}",
       "sampling_params.max_new_tokens"},
      {"/generate", "{\"text\": \"hi\", \"sampling_params\": {\"temprature\": 0}}",
       "sampling_params.temprature"},
      {"/generate", "{\"text\": \"hi\", \"bogus\": 1}", "bogus"},
      {"/generate", "{\"text\": 5}", "text"},
      {"/generate", "{\"text\": \"\"}", "text"},
      {"/generate", "{}", "text"},
      {"/generate", "{\"input_ids\": [1, 99999999]}", "input_ids"},
      {"/generate", "{\"input_ids\": [1, 2.5]}", "input_ids[1]"},
      {"/generate", "{\"text\": \"hi\", \"sampling_params\": {\"n\": 1e30}}", "sampling_params.n"},
      {"/generate",
       "{\"text\": \"hi\", \"sampling_params\": {\"max_new_tokens\": 18446744073709551615}}",
       "sampling_params.max_new_tokens"},
      {"/generate", "{\"text\": [\"ok\", 3]}", "text[1]"},
      {"/generate", "{\"text\": \"hi\", \"sampling_params\": {\"stop\": [1]}}",
       "sampling_params.stop[0]"},
      {"/generate", "{\"text\": \"hi\", \"sampling_params\": {\"seed\": -1}}",
       "sampling_params.seed"},
      {"/generate", "{\"text\": \"hi\", \"sampling_params\": {\"frequency_penalty\": 0.5}}",
       "sampling_params.frequency_penalty"},
      {"/generate",
       "{\"input_ids\": [1, 2, 3], \"return_logprob\": true, \"logprob_start_len\": 3}",
       "logprob_start_len"},
      {"/generate", "{\"text\": \"hi\", \"return_logprob\": true, \"logprob_start_len\": -2}",
       "logprob_start_len"},
      {"/generate", "{\"text\": \"hi\", \"logprob_start_len\": \"0\"}", "logprob_start_len"},
      {"/generate", "{\"text\": [\"a\", \"b\"], \"logprob_start_len\": [0]}", "logprob_start_len"},
      {"/generate", too_long, "input_ids"},
      {"/generate", "{\"text\": \"\xff\xfe\"}", "body"},
      {"/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 0}", "max_tokens"},
      {"/v1/completions", "{\"prompt\": \"hi\", \"temperature\": \"hot\"}", "temperature"},
      {"/v1/completions", "{\"prompt\": \"hi\", \"logprobs\": 50}", "logprobs"},
      {"/v1/completions", "{\"prompt\": \"hi\", \"echo\": true}", "echo"},
      {"/v1/completions", "{\"max_tokens\": 3}", "prompt"},
      {"/v1/completions", "{\"prompt\": []}", "prompt"},
      {"/v1/completions", "{\"prompt\": \"hi\", \"stream_options\": {\"include_usage\": true}}",
       "stream_options"},
      {"/v1/chat/completions", "{\"messages\": []}", "messages"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}",
       "messages[0].role"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content"},
      {"/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}",
       "top_logprobs"},
      {"/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{}]}",
       "tools[0].function"},
      {"/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"n\": 0}", "n"},
      {"/abort_request", "{}", "rid"},
      {"/pause_generation", "{\"mode\": \"sideways\"}", "mode"},
  };
  for (const Case& c : cases) {
    HttpReply reply = client.request("POST", c.target, c.body);
    EXPECT_EQ(reply.status, 400) << c.target << " " << c.body.substr(0, 200) << " -> "
                                 << reply.body;
    if (reply.status != 400) continue;
    const json error = reply.json()["error"];
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_EQ(error["param"], c.param) << error["message"];
    EXPECT_FALSE(error["message"].get<std::string>().empty());
  }
}

// Mutations of valid bodies that are invalid by construction, plus broken HTTP.
std::string invalid_body(std::mt19937& rng, std::string* target) {
  static const std::vector<std::pair<std::string, json>> valid = {
      {"/generate", {{"text", "hello"}, {"sampling_params", {{"max_new_tokens", 2}}}}},
      {"/generate", {{"input_ids", {1, 2, 3}}, {"sampling_params", {{"temperature", 0}}}}},
      {"/v1/completions", {{"prompt", "hello"}, {"max_tokens", 2}}},
      {"/v1/chat/completions",
       {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}}},
  };
  const auto& [path, base] = valid[rng() % valid.size()];
  *target = path;
  json body = base;
  const std::string text = body.dump();
  switch (rng() % 9) {
    case 0:  // truncated JSON
      return text.substr(0, rng() % (text.size() - 1));
    case 1:  // an unknown field
      body["unknown_" + std::to_string(rng() % 1000)] = static_cast<int>(rng() % 10);
      return body.dump();
    case 2: {  // a numeric field of the wrong type
      const char* bad[] = {"\"a string\"", "[1]", "{}", "true"};
      if (path == "/generate") {
        return "{\"text\": \"x\", \"sampling_params\": {\"temperature\": " +
               std::string(bad[rng() % 4]) + "}}";
      }
      json copy = body;
      copy["max_tokens"] = json::parse(bad[rng() % 4]);
      return copy.dump();
    }
    case 3:  // huge numbers
      if (path == "/generate") {
        return "{\"text\": \"x\", \"sampling_params\": {\"max_new_tokens\": 1" +
               std::string(20 + rng() % 300, '0') + "}}";
      }
      return "{\"prompt\": \"x\", \"n\": 1e" + std::to_string(20 + rng() % 300) + "}";
    case 4:  // negative lengths
      if (path == "/generate") {
        return "{\"text\": \"x\", \"sampling_params\": {\"max_new_tokens\": -" +
               std::to_string(1 + rng() % 100000) + "}}";
      }
      return "{\"prompt\": \"x\", \"max_tokens\": -" + std::to_string(1 + rng() % 1000) + "}";
    case 5: {  // invalid UTF-8 inside a string
      std::string bytes = text;
      const size_t at = bytes.find("\"", bytes.find(":")) + 1;
      const char invalid[] = {'\xff', '\xc0', '\x80', '\xed'};
      bytes.insert(at, 1, invalid[rng() % 4]);
      return bytes;
    }
    case 6:  // not an object
      return json::array({body}).dump();
    case 7:  // random bytes
    {
      std::string bytes(1 + rng() % 64, ' ');
      for (char& c : bytes) c = static_cast<char>(rng() % 256);
      return "{" + bytes;
    }
    default:  // the prompt of the wrong type
      if (path == "/generate") return "{\"text\": {\"nested\": 1}}";
      if (path == "/v1/completions") return "{\"prompt\": 3.5}";
      return "{\"messages\": \"hello\"}";
  }
}

TEST_F(EngineServerTest, AThousandMalformedRequestsLeaveTheServerHealthy) {
  std::mt19937 rng(20240607);
  TestHttpClient client(port());
  int rejected = 0;
  for (int i = 0; i < 900; ++i) {
    std::string target;
    const std::string body = invalid_body(rng, &target);
    HttpReply reply = client.request("POST", target, body);
    if (reply.status >= 400 && reply.status < 500) {
      ++rejected;
    } else {
      ADD_FAILURE() << target << " " << body << " -> " << reply.status << " " << reply.body;
    }
  }
  EXPECT_EQ(rejected, 900);
  // Broken HTTP: bad headers, wrong Content-Length, garbage request lines.
  const std::vector<std::string> broken = {
      "POST /generate HTTP/1.1\r\nContent-Length: 5\r\n\r\n{\"te",
      "POST /generate HTTP/1.1\r\nContent-Length: abc\r\n\r\n{}",
      "POST /generate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{\"text\": \"x\"}",
      "POST /generate HTTP/1.1\r\nHost x\r\n\r\n",
      "PO ST /generate HTTP/1.1\r\n\r\n",
      "GET /v1/models HTTP/3.0\r\n\r\n",
      "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  // a TLS hello
  };
  for (int i = 0; i < 100; ++i) {
    std::string bytes = broken[i % broken.size()];
    if (i >= static_cast<int>(broken.size())) bytes.insert(rng() % bytes.size(), 1, '\0');
    HttpReply reply = testing::raw_exchange(port(), bytes, std::chrono::milliseconds(300));
    // 505 answers an HTTP version other than 1.0 and 1.1.
    EXPECT_TRUE(reply.status == 0 || (reply.status >= 400 && reply.status < 500) ||
                reply.status == 505)
        << reply.status << " for " << bytes;
  }
  // Still serving, and nothing leaked (TearDown checks the blocks and sequences).
  HttpReply good = client.post_json("/generate", greedy_body("still fine", 3));
  EXPECT_EQ(good.status, 200);
  EXPECT_EQ(good.json()["meta_info"]["completion_tokens"], 3);
}

TEST_F(EngineServerTest, ClientLeavingMidStreamAbortsItsRequest) {
  const int64_t generated_before = engine_->stats().generated_tokens;
  {
    TestHttpClient client(port());
    json body = greedy_body("a very long answer", 6000);
    body["stream"] = true;
    client.start_stream("/generate", body);
    ASSERT_TRUE(client.next_event().has_value());
    ASSERT_TRUE(client.next_event().has_value());
    EXPECT_EQ(engine_->stats().running_sequences, 1);
    client.close();
  }
  EXPECT_TRUE(eventually([] { return idle(); }, std::chrono::seconds(5))) << stats_text();
  EXPECT_LT(engine_->stats().generated_tokens - generated_before, 6000);
}

TEST_F(EngineServerTest, ClientLeavingBeforeTheAnswerAbortsItsRequest) {
  const int64_t generated_before = engine_->stats().generated_tokens;
  {
    testing::test_net::io_context io;
    testing::test_net::ip::tcp::socket socket(io);
    socket.connect({testing::test_net::ip::make_address("127.0.0.1"), port()});
    const std::string body = greedy_body("another long one", 6000).dump();
    testing::test_net::write(
        socket, testing::test_net::buffer("POST /generate HTTP/1.1\r\nContent-Length: " +
                                          std::to_string(body.size()) + "\r\n\r\n" + body));
    ASSERT_TRUE(eventually([] { return engine_->stats().running_sequences == 1; }));
  }
  EXPECT_TRUE(eventually([] { return idle(); }, std::chrono::seconds(5))) << stats_text();
  EXPECT_LT(engine_->stats().generated_tokens - generated_before, 6000);
}

TEST_F(EngineServerTest, AbortRequestEndsAStreamWithAbort) {
  TestHttpClient client(port());
  json body = greedy_body("abort me", 6000);
  body["stream"] = true;
  body["rid"] = "abort-me-1";
  client.start_stream("/generate", body);
  ASSERT_TRUE(client.next_event().has_value());
  TestHttpClient control(port());
  EXPECT_EQ(control.post_json("/abort_request", {{"rid", "abort-me-1"}}).status, 200);
  std::vector<std::string> events = client.rest_of_stream();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json last = json::parse(events[events.size() - 2]);
  EXPECT_EQ(last["meta_info"]["finish_reason"]["type"], "abort");
  EXPECT_LT(last["output_ids"].size(), 6000u);
}

TEST_F(EngineServerTest, PauseInPlaceKeepsRequestsAndAbortModeEndsThem) {
  TestHttpClient control(port());
  ASSERT_EQ(control.post_json("/pause_generation", {{"mode", "in_place"}}).status, 200);
  EXPECT_TRUE(control.request("GET", "/get_server_info").json()["stats"]["paused"]);
  std::future<HttpReply> waiting = std::async(std::launch::async, [] {
    return TestHttpClient(port()).post_json("/generate", greedy_body("paused prompt", 5));
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_EQ(control.request("POST", "/continue_generation").status, 200);
  HttpReply reply = waiting.get();
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.json()["meta_info"]["finish_reason"]["type"], "length");
  EXPECT_EQ(reply.json()["output_ids"].get<std::vector<int64_t>>(),
            in_process("paused prompt", 5).output_ids);

  // Abort mode: a running stream ends with finish_reason abort.
  TestHttpClient client(port());
  json body = greedy_body("long stream", 6000);
  body["stream"] = true;
  client.start_stream("/generate", body);
  ASSERT_TRUE(client.next_event().has_value());
  ASSERT_EQ(control.request("POST", "/pause_generation").status, 200);  // default: abort
  std::vector<std::string> events = client.rest_of_stream();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(json::parse(events[events.size() - 2])["meta_info"]["finish_reason"]["type"], "abort");
  ASSERT_EQ(control.request("POST", "/continue_generation").status, 200);
}

TEST_F(EngineServerTest, StoppingTheServerAbortsWhatIsRunning) {
  EngineServer temporary(*engine_, ServerOptions{});
  std::thread client_thread([port = temporary.port()] {
    try {
      TestHttpClient client(port);
      json body = greedy_body("long", 6000);
      body["stream"] = true;
      client.start_stream("/generate", body);
      client.rest_of_stream();
    } catch (const std::exception&) {
    }
  });
  ASSERT_TRUE(eventually([] { return engine_->stats().running_sequences == 1; }));
  temporary.stop();
  client_thread.join();
  EXPECT_TRUE(eventually([] { return idle(); }, std::chrono::seconds(5))) << stats_text();
}

}  // namespace engine_server_test
}  // namespace ooze::serving
