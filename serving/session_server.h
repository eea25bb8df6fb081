// Agent sessions: an OpenAI-compatible base URL per sample, in front of the router, that records
// the exact tokens of every model call the agent makes. Any agent program (any language, any
// OpenAI client) is trained this way: it is pointed at its session's URL and runs as it would.
//
//   SessionServer sessions(options, router, tokenizer, &chat_template, info);
//   const std::string id = sessions.open(settings);
//   ... the agent talks to sessions.base_url(id) ("http://HOST:PORT/sessions/ID/v1") ...
//   SessionRecord record = sessions.close(id);   // every call: prompt ids, the engine's output
//
// Endpoints under /sessions/ID/v1 (the server's API key, when set, guards them all):
//   POST chat/completions, completions  the OpenAI APIs of serving/openai_protocol.h, streaming
//        too, tools included; one prompt and n = 1 per call (a session is one trajectory)
//   GET  models                         the served model
// Each call:
//   prompt    rendered by the chat template and tokenized. When its text extends the text of
//             the session's last call (prompt + completion as the agent got it), its ids are
//             that call's prompt and sampled ids followed by the new text tokenized alone: the
//             model's own tokens are never re-tokenized, so a conversation stays one token
//             sequence however the tokenizer would have merged across a boundary.
//   sampling  the session's defaults fill the fields the request leaves out; max_tokens is
//             capped by what the session's completion-token budget has left. A call with none
//             left answers an empty completion with finish_reason "length" at once.
//   recorded  sent to the router's /generate as token ids with log-probs; the engine's output
//             (sampled ids, log-probs, weight versions, finish reason) is recorded with the
//             prompt ids before the answer goes to the agent.
// Errors: an unknown or closed session 404; a call after the rollout stopped 503; a malformed
// request 400 naming the field (as the engine server); an engine that refuses the request its
// status and message; an engine that fails 502; no live engine 503.
//
// close() ends a session: calls still in flight are aborted on the engines and not recorded.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serving/http_server.h"
#include "serving/router.h"

namespace ooze::models {
class Tokenizer;
class ChatTemplate;
}  // namespace ooze::models

namespace ooze::serving {

// One model call of a session, as the engine saw and answered it.
struct SessionCall {
  std::vector<int64_t> prompt_ids;
  std::string prompt_text;  // the prompt as text; empty when it came as token ids
  nlohmann::json output;    // the engine's /generate output object
  int64_t tool_calls = 0;   // calls parsed from the completion
};

struct SessionRecord {
  std::vector<SessionCall> calls;  // in the order they finished
  int64_t refused_calls = 0;       // calls answered with an error status
  std::string last_refusal;        // the last such error: "400 messages[1].role: ..."
};

struct SessionSettings {
  // Request fields (OpenAI names: temperature, top_p, top_k, stop, ...) a call gets when it
  // leaves them out.
  nlohmann::json defaults = nlohmann::json::object();
  int64_t max_completion_tokens = -1;  // over all calls together; -1: no limit
  std::string routing_key;             // keeps a session's calls on one engine (prefix cache)
  // Once set, calls are refused with 503 (the rollout has what it needs); not owned.
  const std::atomic<bool>* stop = nullptr;
  // Called with the engine's output of every recorded call, until the session is closed.
  std::function<void(const nlohmann::json& output)> on_call;
};

class SessionServer {
 public:
  // `chat_template` may be null (then `no_template_reason` says why chat calls are refused);
  // the tokenizer, template and router must outlive the server. Throws ServerError when the
  // address cannot be bound.
  SessionServer(ServerOptions options, Router& router, const models::Tokenizer& tokenizer,
                const models::ChatTemplate* chat_template, std::string no_template_reason,
                engine::EngineInfo info);
  // Stops listening, aborts the calls in flight and waits for their threads.
  ~SessionServer();
  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  std::string open(SessionSettings settings);
  // "http://HOST:PORT/sessions/ID/v1": what an OpenAI client takes as its base URL.
  std::string base_url(const std::string& id) const;
  const std::string& api_key() const;
  // Ends the session and returns what it recorded; throws Error for an unknown id.
  SessionRecord close(const std::string& id);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ooze::serving
