// `ooze serve` as a real process: it prints its URL once it answers, serves with an API key, and
// on SIGTERM aborts what is generating (the client gets its partial answer) and exits 0.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/support/http_test_client.h"
#include "tests/support/process.h"
#include "tests/support/tiny_model.h"

namespace ooze::launcher {
namespace serve_command_test {

using ::ooze::testing::ooze_binary;

using nlohmann::json;
using ::ooze::testing::TestHttpClient;

// The port of the "listening on http://HOST:PORT" line, once printed (0 until then).
int wait_for_port(const ::ooze::testing::Process& process, std::chrono::seconds limit) {
  const std::regex line("listening on http://[^:]+:([0-9]+)");
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch match;
    const std::string output = process.output();
    if (std::regex_search(output, match, line)) return std::stoi(match[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

TEST(ServeCommand, ServesUntilSigtermThenAbortsAndExitsZero) {
  if (!std::filesystem::exists(ooze_binary())) {
    GTEST_SKIP() << ooze_binary() << " is not built (ninja -C build ooze)";
  }
  const std::string dir = ::ooze::testing::make_temp_dir("serve");
  ::ooze::testing::Process serve(
      {ooze_binary(), "serve", "--model", ::ooze::testing::tiny_model_dir(), "--port", "0",
       "--kv-cache-blocks", "512", "--threads", "1", "--api-key", "serve-key",
       "--served-model-name", "tiny"},
      {{"OMP_NUM_THREADS", "1"}}, dir + "/serve.log");
  const int port = wait_for_port(serve, std::chrono::seconds(60));
  ASSERT_GT(port, 0) << serve.output();
  const uint16_t server_port = static_cast<uint16_t>(port);
  const ::ooze::testing::TestHeaders auth = {{"Authorization", "Bearer serve-key"}};

  TestHttpClient client(server_port);
  EXPECT_EQ(client.request("GET", "/health").status, 200);
  EXPECT_EQ(client.request("GET", "/v1/models").status, 401);
  EXPECT_EQ(client.request("GET", "/v1/models", "", auth).json()["data"][0]["id"], "tiny");
  const json greedy = {{"text", "hello"},
                       {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 4}}}};
  ::ooze::testing::HttpReply reply = client.post_json("/generate", greedy, auth);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["meta_info"]["completion_tokens"], 4);

  // A long stream is running when SIGTERM arrives: it ends with an abort, then [DONE].
  json long_stream = {{"text", "a long one"},
                      {"sampling_params", {{"max_new_tokens", 6000}, {"ignore_eos", true}}},
                      {"stream", true}};
  TestHttpClient streaming(server_port);
  streaming.start_stream("/generate", long_stream, auth);
  ASSERT_TRUE(streaming.next_event().has_value());
  serve.kill(SIGTERM);
  std::vector<std::string> rest = streaming.rest_of_stream();
  ASSERT_GE(rest.size(), 2u) << serve.output();
  EXPECT_EQ(rest.back(), "[DONE]");
  EXPECT_EQ(json::parse(rest[rest.size() - 2])["meta_info"]["finish_reason"]["type"], "abort");

  const ::ooze::testing::ExitStatus status = serve.wait(std::chrono::seconds(30));
  EXPECT_TRUE(status.exited && status.code == 0) << status.describe() << "\n" << serve.output();
  EXPECT_NE(serve.output().find("ooze serve: stopped"), std::string::npos) << serve.output();
}

// VmRSS of process `pid` in bytes (0 when unreadable).
int64_t resident_bytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string key; status >> key;) {
    int64_t kib = 0;
    if (key == "VmRSS:" && status >> kib) return kib * 1024;
  }
  return 0;
}

// By default the KV cache holds what the engine can use and no more, and the start-up line says
// how much it took and why: for the tiny model, --max-running-requests 64 at its full context,
// worked out here from its config.json.
TEST(ServeCommand, KvCacheIsSizedForItsRequestsAndSaysWhy) {
  if (!std::filesystem::exists(ooze_binary())) {
    GTEST_SKIP() << ooze_binary() << " is not built (ninja -C build ooze)";
  }
  const std::string model = ::ooze::testing::tiny_model_dir();
  const json config = json::parse(std::ifstream(model + "/config.json"));
  const int64_t context = config["max_position_embeddings"].get<int64_t>();
  const int64_t head_dim =
      config.value("head_dim", config["hidden_size"].get<int64_t>() /
                                   config["num_attention_heads"].get<int64_t>());
  const int64_t bytes_per_token = 2 * config["num_hidden_layers"].get<int64_t>() *
                                  config["num_key_value_heads"].get<int64_t>() * head_dim * 4;
  const int64_t blocks = 64 * ((context + 15) / 16);
  char expected[256];
  std::snprintf(expected, sizeof(expected),
                "ooze serve: KV cache %.1f MB, %lld blocks of 16 tokens: enough for "
                "--max-running-requests 64 at the full context of %lld tokens (its pages become "
                "resident as blocks are used)",
                static_cast<double>(blocks * 16 * bytes_per_token) / (1 << 20),
                static_cast<long long>(blocks), static_cast<long long>(context));

  const std::string dir = ::ooze::testing::make_temp_dir("serve-kv");
  ::ooze::testing::Process serve(
      {ooze_binary(), "serve", "--model", model, "--port", "0", "--threads", "1"},
      {{"OMP_NUM_THREADS", "1"}}, dir + "/serve.log");
  ASSERT_GT(wait_for_port(serve, std::chrono::seconds(60)), 0) << serve.output();
  EXPECT_NE(serve.output().find(expected), std::string::npos)
      << "expected \"" << expected << "\" in:\n"
      << serve.output();
  // On the CPU the cache's pages become resident as blocks are used: an idle server holds
  // LibTorch and the model (well under 400 MB here), not the whole cache.
  const int64_t rss = resident_bytes(serve.pid());
  EXPECT_GT(rss, 0);
  EXPECT_LT(rss, int64_t{400} << 20)
      << "resident " << rss << " bytes with a cache of " << blocks * 16 * bytes_per_token;
}

TEST(ServeCommand, MissingModelIsAnError) {
  if (!std::filesystem::exists(ooze_binary())) {
    GTEST_SKIP() << ooze_binary() << " is not built (ninja -C build ooze)";
  }
  const std::string dir = ::ooze::testing::make_temp_dir("serve-bad");
  ::ooze::testing::Process serve({ooze_binary(), "serve", "--port", "0"}, {}, dir + "/serve.log");
  const ::ooze::testing::ExitStatus status = serve.wait(std::chrono::seconds(30));
  EXPECT_TRUE(status.exited && status.code != 0) << status.describe();
  EXPECT_NE(serve.output().find("model"), std::string::npos) << serve.output();
}

}  // namespace serve_command_test
}  // namespace ooze::launcher
