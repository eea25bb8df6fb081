// Agent sessions (serving/session_server.h) against the engines they front, on one in-process
// engine serving a small random Qwen3 (byte tokenizer) behind its HTTP server and a Router:
//
//   session_overhead   the same multi-turn workload (32 conversations at once, 3 chat turns of
//                      32 greedy tokens each, a user message between turns) through sessions,
//                      as an agent sends it (OpenAI chat requests over HTTP, the conversation
//                      re-sent every turn, the session rendering, splicing and recording), and
//                      as token ids straight to the router's /generate, as a hand-written
//                      token-level loop sends it (the rollout's own multi-turn path): generated
//                      tokens/s of sessions against the direct requests. Best of three each,
//                      alternating, prefix cache flushed before every run. Goal: ratio >= 0.9.
//   agent_start        what --agent-command costs per sample before the agent's first request:
//                      starting `true` and `python3 -c pass` through the agent runner (fork,
//                      sh, pipes, the sample on stdin), mean seconds over 20 runs; the baseline
//                      is the mean seconds of one session turn above, for scale.
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_support.h"
#include "core/error.h"
#include "core/load_time_settings.h"
#include "engine/engine.h"
#include "models/chat_template.h"
#include "models/model_init.h"
#include "models/tokenizer.h"
#include "rollout/agent_process.h"
#include "serving/http_client.h"
#include "serving/local_engines.h"
#include "serving/session_server.h"

using Clock = std::chrono::steady_clock;
namespace models = ooze::models;
namespace engine = ooze::engine;
namespace serving = ooze::serving;
using nlohmann::json;
using ooze::bench::print_line;
using ooze::bench::ScopedTempDir;
using ooze::bench::seconds_since;

namespace {

constexpr int kConversations = 32;
constexpr int kTurns = 3;
constexpr int kTokensPerTurn = 32;
const char* kUserTurn = "Go on, and say more about it.";

engine::EngineOptions engine_options(const std::string& model_dir) {
  engine::EngineOptions options;
  options.model_dir = model_dir;
  options.dtype = "float32";
  options.max_running_requests = 64;
  options.block_size = 16;
  options.kv_cache_memory_mb = 128;
  options.intra_op_threads = 2;
  options.seed = 1;
  return options;
}

std::string question(int conversation) {
  return "Conversation " + std::to_string(conversation) + ": tell me a story about the number " +
         std::to_string(conversation * 7) + ".";
}

struct Run {
  double seconds = 0;
  int64_t tokens = 0;
  double tokens_per_second() const { return tokens / seconds; }
};

// Runs `conversation(i)` for every conversation at once; returns the wall time and tokens.
template <typename Fn>
Run run_all(Fn conversation) {
  std::vector<int64_t> tokens(kConversations, 0);
  std::vector<std::string> errors(kConversations);
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < kConversations; ++i) {
    threads.emplace_back([&, i] {
      try {
        tokens[i] = conversation(i);
      } catch (const std::exception& error) {
        errors[i] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  Run run;
  run.seconds = seconds_since(start);
  for (const std::string& error : errors) {
    if (!error.empty()) throw ooze::bench::BenchFailure("agent_session_bench: " + error);
  }
  for (int64_t count : tokens) run.tokens += count;
  return run;
}

// An agent's conversation through a session: OpenAI chat requests, the whole conversation sent
// each turn.
int64_t session_conversation(serving::SessionServer& sessions, int i) {
  const std::string id = sessions.open({});
  const std::string base = sessions.base_url(id);
  const std::string host = base.substr(0, base.find("/sessions/"));
  serving::HttpClient client(host);
  json messages = json::array({{{"role", "user"}, {"content", question(i)}}});
  int64_t tokens = 0;
  for (int turn = 0; turn < kTurns; ++turn) {
    serving::HttpRequest request;
    request.method = "POST";
    request.target = base.substr(host.size()) + "/chat/completions";
    request.headers = {{"Authorization", "Bearer " + sessions.api_key()}};
    request.body = json{
        {"model", "policy"},
        {"messages", messages},
        {"max_tokens", kTokensPerTurn},
        {"temperature", 0},
        {"ignore_eos", true},
        // The random model samples special tokens mid-turn; an agent that is to
        // send them back must see them.
        {"skip_special_tokens",
         false}}.dump();
    const serving::HttpResponse response = client.send(request);
    if (response.status != 200) throw ooze::Error("session answered " + response.body);
    const json answer = json::parse(response.body);
    tokens += answer["usage"]["completion_tokens"].get<int64_t>();
    messages.push_back(answer["choices"][0]["message"]);
    messages.push_back({{"role", "user"}, {"content", kUserTurn}});
  }
  sessions.close(id);
  return tokens;
}

// The same conversation as token ids straight to the router: the rendered prompt, then each
// turn's output ids and the template's next user turn appended.
int64_t direct_conversation(serving::Router& router, const models::Tokenizer& tokenizer,
                            const models::ChatTemplate& chat, int i) {
  std::vector<models::ChatMessage> messages = {{"user", question(i), std::nullopt}};
  const std::string first = chat.render(messages, /*add_generation_prompt=*/true);
  std::vector<int64_t> ids = tokenizer.encode(first);
  int64_t tokens = 0;
  for (int turn = 0; turn < kTurns; ++turn) {
    const json answer = router.generate(
        {{"input_ids", ids},
         {"sampling_params",
          {{"temperature", 0}, {"max_new_tokens", kTokensPerTurn}, {"ignore_eos", true}}},
         {"return_logprob", true}});
    const std::vector<int64_t> output = answer.at("output_ids").get<std::vector<int64_t>>();
    tokens += static_cast<int64_t>(output.size());
    ids.insert(ids.end(), output.begin(), output.end());
    // What the template adds after the assistant's text: its end of turn and the next user turn.
    const std::vector<int64_t> observation =
        tokenizer.encode("<|im_end|>\n" + chat.render({{"user", kUserTurn, std::nullopt}}, true));
    ids.insert(ids.end(), observation.begin(), observation.end());
  }
  return tokens;
}

}  // namespace

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  try {
    at::set_num_threads(2);
    ScopedTempDir files("agent-session-bench");
    models::ModelInitOptions model;
    model.arch = "qwen3";
    model.hidden_size = 256;
    model.num_layers = 4;
    model.num_heads = 4;
    model.num_kv_heads = 2;
    model.tokenizer = "byte";
    model.out_dir = files.path("model");
    model.seed = 3;
    models::init_hf_model(model);
    serving::LocalEngines engines(engine_options(model.out_dir), 1);
    const models::Tokenizer tokenizer = models::load_tokenizer(model.out_dir);
    const models::ChatTemplate chat = models::select_chat_template(tokenizer, "");
    serving::SessionServer sessions(serving::ServerOptions{}, engines.router(), tokenizer, &chat,
                                    "", engines.engines()[0]->info());
    auto flush = [&] {
      for (auto& engine : engines.engines()) engine->flush_cache();
    };

    run_all([&](int i) { return direct_conversation(engines.router(), tokenizer, chat, i); });
    std::optional<Run> session, direct;
    for (int round = 0; round < 3; ++round) {
      flush();
      const Run s = run_all([&](int i) { return session_conversation(sessions, i); });
      if (!session || s.seconds < session->seconds) session = s;
      flush();
      const Run d =
          run_all([&](int i) { return direct_conversation(engines.router(), tokenizer, chat, i); });
      if (!direct || d.seconds < direct->seconds) direct = d;
    }
    print_line("agent_session", "session_overhead_tokens_per_s", session->tokens_per_second(),
               "tokens/s", direct->tokens_per_second(),
               session->tokens_per_second() / direct->tokens_per_second());

    const double turn_seconds = session->seconds / kTurns;
    const std::string sample = json{{"index", 0}, {"prompt", question(0)}}.dump() + "\n";
    for (const auto& [name, command] : std::vector<std::pair<std::string, std::string>>{
             {"true", "true"}, {"python3", "python3 -c pass"}}) {
      constexpr int kStarts = 20;
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < kStarts; ++i) {
        const ooze::rollout::AgentProcessResult result =
            ooze::rollout::run_agent_process(command, {}, sample, 60.0);
        if (!result.succeeded()) {
          throw ooze::bench::BenchFailure("agent_session_bench: " + command + " " +
                                          result.describe());
        }
      }
      const double per_start = seconds_since(start) / kStarts;
      print_line("agent_session", "agent_start_" + name + "_s", per_start, "s", turn_seconds,
                 per_start / turn_seconds);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
