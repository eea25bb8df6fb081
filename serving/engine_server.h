// The engine's HTTP endpoints (`ooze serve`), SGLang- and OpenAI-compatible:
//
//   POST /generate                   SGLang's native API (serving/generate_protocol.h)
//   POST /v1/completions             OpenAI completions (serving/openai_protocol.h)
//   POST /v1/chat/completions        OpenAI chat completions, the model's chat template
//   GET  /v1/models                  the served model
//   GET  /health                     200 while the server runs (no API key needed)
//   GET  /health_generate            200 once one token went through the engine; 503 if it
//                                    could not within 20 s (paused, asleep) or was aborted
//   GET  /get_model_info             {model_path, tokenizer_path, served_model_name, ...}
//   GET  /get_server_info            engine settings and statistics (running, waiting, blocks,
//                                    cache hit rate, tokens, weight version)
//   POST /flush_cache                forget the prefix cache
//   POST /abort_request              {rid} or {abort_all: true}
//   POST /pause_generation           {mode: "abort" (default) | "in_place" | "retract"}; the
//                                    last two keep running requests for continue_generation
//   POST /continue_generation
//   POST /release_memory_occupation, /resume_memory_occupation   Engine::release/resume_memory
//
// Bad requests get 400 with {"error": {"message", "type": "invalid_request_error", "param"}},
// param naming the field. Streams are server-sent events ending with "data: [DONE]". A client
// that disconnects before its answer is complete has its requests aborted, so their KV-cache
// blocks are freed at once.
//
// Output callbacks only store the latest output of each sample; formatting and sending happen
// on a small pool of the server's own, so the engine loop never waits on JSON or sockets.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "serving/http_server.h"

namespace ooze::serving {

class EngineServer {
 public:
  // Serves `engine`, which must outlive this server. Throws ServerError when it cannot listen.
  EngineServer(engine::Engine& engine, ServerOptions options);
  // stop().
  ~EngineServer();
  EngineServer(const EngineServer&) = delete;
  EngineServer& operator=(const EngineServer&) = delete;

  uint16_t port() const;
  std::string url() const;

  // Stops listening, gives requests in flight up to `drain` to be answered, then closes every
  // connection; requests still running are aborted in the engine before this returns.
  // Idempotent.
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(0));
  int64_t requests_in_flight() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ooze::serving
