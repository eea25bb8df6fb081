#include "serving/session_server.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "core/strings.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "models/tool_call_parser.h"
#include "models/unicode_utils.h"
#include "serving/generate_protocol.h"
#include "serving/openai_protocol.h"

namespace ooze::serving {

using nlohmann::json;

namespace {

const std::string kSessionsPrefix = "/sessions/";

std::string random_hex(size_t length) {
  static thread_local std::mt19937_64 generator{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < length; ++i) out += digits[generator() % 16];
  return out;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The session cannot take calls any more: 404 when it ended, 503 when its rollout stopped.
struct SessionUnavailable : Error {
  SessionUnavailable(int status, const std::string& message) : Error(message), status(status) {}
  int status;
};

// An answer other than 200 for the agent: what was wrong and, for a bad request, the field.
struct Refusal {
  int status = 500;
  std::string message;
  std::string param;
};

}  // namespace

// One session's state. Calls of one session may run at once (an agent's parallel branches);
// the mutex orders their records.
struct Session {
  std::mutex mutex;
  SessionSettings settings;
  SessionRecord record;
  bool closed = false;
  int64_t used_tokens = 0;  // completion tokens so far, against max_completion_tokens
  int64_t next_call = 0;
  std::set<std::string> in_flight;  // engine request ids of calls not answered yet
  // The last call's prompt and completion: what the next prompt is spliced onto.
  std::vector<int64_t> history_ids;
  std::string history_text;  // empty when the last prompt came as ids
};

struct SessionServer::Impl {
  Impl(ServerOptions options, Router& router, const models::Tokenizer& tokenizer,
       const models::ChatTemplate* chat_template, std::string no_template_reason,
       engine::EngineInfo engine_info)
      : router(router),
        tokenizer(tokenizer),
        chat_template(chat_template),
        no_template_reason(std::move(no_template_reason)),
        info(std::move(engine_info)) {
    // Chat calls without max_tokens may fill the context; the KV cache is the engine's business.
    if (info.num_blocks * info.block_size <= 0) {
      info.block_size = 1;
      info.num_blocks = info.context_length;
    }
    model = info.served_model_name.empty() ? info.model_path : info.served_model_name;
    if (options.api_key.empty()) options.api_key = "ooze-" + random_hex(32);
    api_key = options.api_key;
    HttpRoutes routes;
    routes.set_fallback([this](std::shared_ptr<HttpExchange> exchange) { dispatch(exchange); });
    server = std::make_unique<HttpServer>(std::move(options), routes.handler());
  }

  ~Impl() {
    server->stop();
    std::vector<std::string> ids;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& [id, session] : sessions) ids.push_back(id);
    }
    for (const std::string& id : ids) close(id);
    std::unique_lock<std::mutex> lock(mutex);
    idle.wait(lock, [this] { return running_calls == 0; });
  }

  std::shared_ptr<Session> find(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = sessions.find(id);
    return found == sessions.end() ? nullptr : found->second;
  }

  SessionRecord close(const std::string& id) {
    std::shared_ptr<Session> session;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto found = sessions.find(id);
      if (found == sessions.end()) throw Error("no agent session '" + id + "' is open");
      session = std::move(found->second);
      sessions.erase(found);
    }
    std::set<std::string> in_flight;
    SessionRecord record;
    {
      std::lock_guard<std::mutex> lock(session->mutex);
      session->closed = true;
      in_flight = session->in_flight;
      record = std::move(session->record);
    }
    // The agent is gone: what it still waits for is of no use to anyone.
    for (const std::string& rid : in_flight) {
      for (const BroadcastResult& result : router.broadcast("/abort_request", {{"rid", rid}})) {
        if (!result.ok() && result.status != 0) {
          OOZE_LOG(DEBUG) << "session " << id << ": abort of " << rid << " on " << result.engine_url
                          << " answered " << result.status;
        }
      }
    }
    return record;
  }

  void dispatch(const std::shared_ptr<HttpExchange>& exchange) {
    const std::string& path = exchange->path();
    if (!starts_with(path, kSessionsPrefix)) {
      exchange->respond_error(404, "no such path: " + path +
                                       "; agent sessions are at /sessions/ID/v1/chat/completions");
      return;
    }
    const size_t id_end = path.find('/', kSessionsPrefix.size());
    const std::string id = path.substr(kSessionsPrefix.size(), id_end - kSessionsPrefix.size());
    const std::string rest = id_end == std::string::npos ? "" : path.substr(id_end);
    std::shared_ptr<Session> session = find(id);
    if (!session) {
      exchange->respond_error(
          404, "agent session '" + id + "' is not open (it ended, or its sample was aborted)");
      return;
    }
    const bool post = exchange->method() == "POST";
    if (rest == "/v1/models" && exchange->method() == "GET") {
      json models = {{"object", "list"},
                     {"data", json::array({{{"id", model},
                                            {"object", "model"},
                                            {"owned_by", "ooze"},
                                            {"max_model_len", info.context_length}}})}};
      exchange->respond(200, "application/json", models.dump());
    } else if (post && (rest == "/v1/chat/completions" || rest == "/v1/completions")) {
      const OpenAiApi api = rest == "/v1/completions" ? OpenAiApi::kCompletions : OpenAiApi::kChat;
      run_detached([this, exchange, session, id, api] { answer(exchange, session, id, api); });
    } else {
      exchange->respond_error(404, "no such path in an agent session: " + exchange->method() + " " +
                                       rest +
                                       " (POST /v1/chat/completions, POST /v1/completions and "
                                       "GET /v1/models are served)");
    }
  }

  // A call waits for its engine on a thread of its own, so a long generation holds no server
  // thread; the destructor waits for them.
  void run_detached(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++running_calls;
    }
    std::thread([this, work = std::move(work)] {
      work();
      std::lock_guard<std::mutex> lock(mutex);
      --running_calls;
      idle.notify_all();
    }).detach();
  }

  void answer(const std::shared_ptr<HttpExchange>& exchange,
              const std::shared_ptr<Session>& session, const std::string& id, OpenAiApi api) {
    std::string rid;
    bool streaming = false;
    Refusal refusal;
    try {
      call(exchange, session, id, api, &rid, &streaming);
      return;
    } catch (const engine::InvalidRequest& e) {
      refusal = {400, e.what(), e.field()};
    } catch (const SessionUnavailable& e) {
      refusal = {e.status, e.what(), ""};
    } catch (const EngineResponseError& e) {
      refusal = {e.status(), e.what(), ""};
    } catch (const EngineFailedError& e) {
      refusal = {502, e.what(), ""};
    } catch (const NoLiveEngineError& e) {
      refusal = {503, e.what(), ""};
    } catch (const std::exception& e) {
      refusal = {500, e.what(), ""};
    }
    {
      std::lock_guard<std::mutex> lock(session->mutex);
      if (!rid.empty()) session->in_flight.erase(rid);
      ++session->record.refused_calls;
      session->record.last_refusal =
          std::to_string(refusal.status) + " " +
          (refusal.param.empty() || starts_with(refusal.message, refusal.param)
               ? ""
               : refusal.param + ": ") +
          refusal.message;
    }
    if (streaming) {
      exchange->send_event(
          json{{"error",
                {{"message", refusal.message}, {"type", "server_error"}, {"code", refusal.status}}}}
              .dump());
      exchange->finish();
    } else {
      exchange->respond_error(refusal.status, refusal.message, refusal.param);
    }
  }

  void call(const std::shared_ptr<HttpExchange>& exchange, const std::shared_ptr<Session>& session,
            const std::string& id, OpenAiApi api, std::string* rid, bool* streaming) {
    json body = json::parse(exchange->body(), nullptr, /*allow_exceptions=*/false);
    if (!body.is_object()) {
      throw engine::InvalidRequest("", "the request body must be a JSON object");
    }
    SessionSettings settings;
    {
      std::lock_guard<std::mutex> lock(session->mutex);
      settings = session->settings;
    }
    for (const auto& [key, value] : settings.defaults.items()) {
      if (!body.contains(key)) body[key] = value;
    }
    OpenAiCall call = api == OpenAiApi::kChat ? parse_chat_call(body, tokenizer, chat_template,
                                                                no_template_reason, info)
                                              : parse_completions_call(body, tokenizer, info);
    if (call.requests.size() != 1) {
      throw engine::InvalidRequest("prompt",
                                   "a session call takes one prompt (a session is one trajectory)");
    }
    engine::GenerateRequest& request = call.requests.front();
    if (request.sampling.n != 1) {
      throw engine::InvalidRequest("n",
                                   "must be 1 in an agent session (a session is one "
                                   "trajectory); got " +
                                       std::to_string(request.sampling.n));
    }
    const std::string prompt_text = call.prompt_texts.empty() ? "" : call.prompt_texts.front();

    std::vector<int64_t> history_ids;
    std::string history_text;
    int64_t left = -1;
    {
      std::lock_guard<std::mutex> lock(session->mutex);
      if (session->closed) throw SessionUnavailable(404, "the agent session ended");
      if (settings.stop && settings.stop->load()) {
        throw SessionUnavailable(503, "the rollout has the samples it needs; this session is over");
      }
      history_ids = session->history_ids;
      history_text = session->history_text;
      if (settings.max_completion_tokens >= 0) {
        left = std::max<int64_t>(0, settings.max_completion_tokens - session->used_tokens);
      }
      *rid = "session-" + id + "-" + std::to_string(session->next_call++);
      session->in_flight.insert(*rid);
    }
    if (!history_text.empty() && starts_with(prompt_text, history_text)) {
      // Keep the tokens the model sampled; tokenize only what is new.
      std::vector<int64_t> ids = std::move(history_ids);
      const std::vector<int64_t> added =
          tokenizer.encode(std::string_view(prompt_text).substr(history_text.size()));
      ids.insert(ids.end(), added.begin(), added.end());
      request.input_ids = std::move(ids);
    }
    if (left >= 0)
      request.sampling.max_new_tokens = std::min(request.sampling.max_new_tokens, left);
    request.id = *rid;
    request.return_logprob = true;  // the record needs them, whether the agent asked or not

    const std::string response_id =
        (api == OpenAiApi::kChat ? "chatcmpl-" : "cmpl-") + random_hex(24);
    const int64_t created = unix_seconds();
    if (left == 0) {
      // The budget is spent: the agent learns it as a completion cut at its length.
      engine::GenerateOutput output;
      output.finished = true;
      output.finish_reason = engine::FinishReason::kLength;
      finish_without_engine(exchange, session, call, output, *rid, response_id, created);
      return;
    }

    RouteOptions route;
    route.routing_key = settings.routing_key;
    const json engine_body = generate_request_json(request);
    if (!call.stream) {
      json answer = router.generate(engine_body, route);
      if (answer.is_array()) answer = answer.at(0);
      const engine::GenerateOutput output = generate_output_from_json(answer);
      record(session, *rid, request.input_ids, prompt_text, answer, output, call);
      exchange->respond(
          200, "application/json",
          openai_response(call, {output}, response_id, created, model, tokenizer).dump());
      return;
    }

    *streaming = true;
    OpenAiStream stream(call, response_id, created, model, tokenizer);
    exchange->start_stream();
    bool client_left = false;
    router.generate_stream(
        engine_body,
        [&](const json& chunk) {
          const engine::GenerateOutput output = generate_output_from_json(chunk);
          // Recorded before the agent sees the end, so its next call splices onto this one.
          if (output.finished) {
            record(session, *rid, request.input_ids, prompt_text, chunk, output, call);
          }
          for (const json& event : stream.update(0, output)) {
            if (!exchange->send_event(event.dump())) {
              client_left = true;
              return false;  // the engine aborts the request
            }
          }
          return true;
        },
        route);
    if (client_left) {
      std::lock_guard<std::mutex> lock(session->mutex);
      session->in_flight.erase(*rid);
      return;
    }
    if (call.include_usage) exchange->send_event(stream.usage_chunk().dump());
    exchange->send_event("[DONE]");
    exchange->finish();
  }

  void finish_without_engine(const std::shared_ptr<HttpExchange>& exchange,
                             const std::shared_ptr<Session>& session, const OpenAiCall& call,
                             const engine::GenerateOutput& output, const std::string& rid,
                             const std::string& response_id, int64_t created) {
    {
      std::lock_guard<std::mutex> lock(session->mutex);
      session->in_flight.erase(rid);
    }
    if (!call.stream) {
      exchange->respond(
          200, "application/json",
          openai_response(call, {output}, response_id, created, model, tokenizer).dump());
      return;
    }
    OpenAiStream stream(call, response_id, created, model, tokenizer);
    for (const json& event : stream.update(0, output)) exchange->send_event(event.dump());
    if (call.include_usage) exchange->send_event(stream.usage_chunk().dump());
    exchange->send_event("[DONE]");
    exchange->finish();
  }

  // The completion as the agent's next prompt carries it, so that the splice maps the agent's
  // copy to the exact tokens: the text it got (valid UTF-8, special tokens skipped as the
  // request asked: the model may sample <|im_start|> mid-text, and the agent never sees it),
  // then the stop or end-of-turn token that ended the call, which a chat template writes back.
  // A stop string stays in: the agent got the text before it and writes it back itself.
  std::string text_as_sent_back(const engine::GenerateOutput& output, const OpenAiCall& call) {
    std::vector<int64_t> sampled = output.output_ids;
    std::string end_of_turn;
    if (output.matched_token && !sampled.empty() && sampled.back() == *output.matched_token) {
      end_of_turn = tokenizer.decode({sampled.back()});
      sampled.pop_back();
    }
    const bool skip_special = call.requests.front().sampling.skip_special_tokens;
    return models::utf8_lossy(tokenizer.decode(sampled, skip_special)) + end_of_turn;
  }

  void record(const std::shared_ptr<Session>& session, const std::string& rid,
              const std::vector<int64_t>& prompt_ids, const std::string& prompt_text,
              const json& answer, const engine::GenerateOutput& output, const OpenAiCall& call) {
    SessionCall entry;
    entry.prompt_ids = prompt_ids;
    entry.prompt_text = prompt_text;
    entry.output = answer;
    if (call.tool_syntax && output.finish_reason == engine::FinishReason::kStop) {
      if (auto parsed = models::parse_tool_calls(output.text, *call.tool_syntax)) {
        entry.tool_calls = static_cast<int64_t>(parsed->calls.size());
      }
    }
    std::vector<int64_t> history_ids = prompt_ids;
    history_ids.insert(history_ids.end(), output.output_ids.begin(), output.output_ids.end());
    const std::string history_text =
        prompt_text.empty() ? "" : prompt_text + text_as_sent_back(output, call);
    std::lock_guard<std::mutex> lock(session->mutex);
    session->in_flight.erase(rid);
    if (session->closed) return;
    if (session->settings.on_call) session->settings.on_call(answer);
    session->used_tokens += output.completion_tokens();
    session->record.calls.push_back(std::move(entry));
    session->history_ids = std::move(history_ids);
    session->history_text = history_text;
  }

  Router& router;
  const models::Tokenizer& tokenizer;
  const models::ChatTemplate* chat_template;
  std::string no_template_reason;
  engine::EngineInfo info;
  std::string model;
  std::string api_key;

  std::mutex mutex;  // guards sessions and running_calls
  std::condition_variable idle;
  std::map<std::string, std::shared_ptr<Session>> sessions;
  int64_t running_calls = 0;
  std::unique_ptr<HttpServer> server;  // last: it calls into the members above
};

SessionServer::SessionServer(ServerOptions options, Router& router,
                             const models::Tokenizer& tokenizer,
                             const models::ChatTemplate* chat_template,
                             std::string no_template_reason, engine::EngineInfo info)
    : impl_(std::make_unique<Impl>(std::move(options), router, tokenizer, chat_template,
                                   std::move(no_template_reason), std::move(info))) {}

SessionServer::~SessionServer() = default;

std::string SessionServer::open(SessionSettings settings) {
  auto session = std::make_shared<Session>();
  session->settings = std::move(settings);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::string id;
  do {
    id = random_hex(16);
  } while (impl_->sessions.count(id) > 0);
  impl_->sessions.emplace(id, std::move(session));
  return id;
}

std::string SessionServer::base_url(const std::string& id) const {
  return impl_->server->url() + kSessionsPrefix + id + "/v1";
}

const std::string& SessionServer::api_key() const { return impl_->api_key; }

SessionRecord SessionServer::close(const std::string& id) { return impl_->close(id); }

}  // namespace ooze::serving
