#include "serving/engine_server.h"

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "core/logging.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "serving/generate_protocol.h"
#include "serving/json_fields.h"
#include "serving/openai_protocol.h"

namespace ooze::serving {

namespace net = boost::asio;

namespace {

constexpr auto kHealthGenerateTimeout = std::chrono::seconds(20);

std::string dump(const nlohmann::json& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void respond_json(const std::shared_ptr<HttpExchange>& exchange, const nlohmann::json& json,
                  int status = 200) {
  exchange->respond(status, "application/json", dump(json));
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string random_hex(size_t digits) {
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}());
  static const char* kHex = "0123456789abcdef";
  std::lock_guard<std::mutex> lock(mutex);
  std::string out;
  for (size_t i = 0; i < digits; ++i) out += kHex[rng() % 16];
  return out;
}

// The body of a control endpoint: optional (empty means {}), a JSON object otherwise.
nlohmann::json optional_body(const HttpExchange& exchange) {
  const std::string& body = exchange.body();
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return nlohmann::json::object();
  return parse_json_body(body);
}

// Where the pool's work goes: posting stops once the server has stopped, so late engine
// callbacks never touch a destroyed pool.
struct PoolGate {
  std::mutex mutex;
  bool open = true;
  net::thread_pool* pool = nullptr;
  void post(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!open) return;
    net::post(*pool, [task = std::move(task)] {
      try {
        task();
      } catch (const std::exception& e) {
        OOZE_LOG(ERROR) << "engine server: a background task failed: " << e.what();
      }
    });
  }
};

// The outputs of the engine requests one HTTP call submitted. The engine's callbacks only store
// each sample's latest output; `deliver` then runs on the pool, one run at a time per call, with
// the slots that changed (a call's samples are numbered prompt-major, then sample index). For a
// call that does not stream it runs once, when every sample finished.
class PendingCall : public std::enable_shared_from_this<PendingCall> {
 public:
  using Deliver =
      std::function<void(const std::vector<size_t>& changed,
                         const std::vector<engine::GenerateOutput>& outputs, bool finished)>;

  PendingCall(std::shared_ptr<PoolGate> gate, size_t num_outputs, bool stream, Deliver deliver)
      : gate_(std::move(gate)),
        stream_(stream),
        deliver_(std::move(deliver)),
        latest_(num_outputs),
        view_(num_outputs),
        dirty_(num_outputs, false),
        slot_finished_(num_outputs, false) {}

  engine::OutputCallback callback(size_t first_slot) {
    return [self = shared_from_this(), first_slot](const engine::GenerateOutput& output) {
      self->on_output(first_slot + static_cast<size_t>(output.index), output);
    };
  }

  void add_request_id(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    request_ids_.push_back(id);
  }
  std::vector<std::string> unfinished_request_ids() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_count_ == latest_.size()) return {};
    return request_ids_;
  }

  // Every request is submitted: outputs may now be delivered.
  void release() {
    bool post = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held_ = false;
      post = should_post_locked();
    }
    if (post) post_drain();
  }
  // The call failed before all of it was submitted: deliver nothing.
  void cancel() {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }

 private:
  void on_output(size_t slot, const engine::GenerateOutput& output) {
    bool post = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (done_ || slot >= latest_.size()) return;
      latest_[slot] = output;
      dirty_[slot] = true;
      if (output.finished && !slot_finished_[slot]) {
        slot_finished_[slot] = true;
        ++finished_count_;
      }
      post = should_post_locked();
    }
    if (post) post_drain();
  }

  bool should_post_locked() {
    if (held_ || draining_ || done_) return false;
    const bool ready = stream_ ? std::find(dirty_.begin(), dirty_.end(), true) != dirty_.end()
                               : finished_count_ == latest_.size();
    if (ready) draining_ = true;
    return ready;
  }

  void post_drain() {
    gate_->post([self = shared_from_this()] { self->drain(); });
  }

  // Runs on the pool; draining_ keeps it the only one for this call.
  void drain() {
    while (true) {
      std::vector<size_t> changed;
      bool finished = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (done_) return;
        const bool ready = stream_ || finished_count_ == latest_.size();
        if (ready) {
          for (size_t slot = 0; slot < latest_.size(); ++slot) {
            if (!dirty_[slot]) continue;
            dirty_[slot] = false;
            view_[slot] = std::move(latest_[slot]);  // the engine sends whole outputs again
            changed.push_back(slot);
          }
        }
        finished = finished_count_ == latest_.size();
        if (changed.empty() && !finished) {
          draining_ = false;
          return;
        }
        if (finished) done_ = true;
      }
      deliver_(changed, view_, finished);
      if (finished) return;
    }
  }

  std::shared_ptr<PoolGate> gate_;
  const bool stream_;
  Deliver deliver_;
  mutable std::mutex mutex_;
  std::vector<engine::GenerateOutput> latest_;  // under mutex_
  std::vector<engine::GenerateOutput> view_;    // drain only
  std::vector<bool> dirty_, slot_finished_;
  size_t finished_count_ = 0;
  bool held_ = true, draining_ = false, done_ = false;
  std::vector<std::string> request_ids_;
};

// An engine InvalidRequest with its field renamed for the endpoint's API.
[[noreturn]] void rethrow_renamed(const engine::InvalidRequest& e, const std::string& param) {
  const std::string prefix = e.field() + ": ";
  std::string message = e.what();
  if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
  throw engine::InvalidRequest(param, message);
}

}  // namespace

class EngineServer::Impl {
 public:
  Impl(engine::Engine& engine, ServerOptions options)
      : engine_(engine), pool_(2), gate_(std::make_shared<PoolGate>()), started_(unix_seconds()) {
    gate_->pool = &pool_;
    try {
      chat_template_.emplace(models::select_chat_template(engine_.tokenizer(), ""));
    } catch (const std::exception& e) {
      no_template_reason_ = e.what();
    }
    HttpRoutes routes;
    routes.add("GET", "/health",
               [](std::shared_ptr<HttpExchange> ex) { ex->respond(200, "text/plain", ""); });
    add(routes, "POST", "/generate", &Impl::generate);
    add(routes, "POST", "/v1/completions", &Impl::completions);
    add(routes, "POST", "/v1/chat/completions", &Impl::chat_completions);
    add(routes, "GET", "/v1/models", &Impl::models);
    add(routes, "GET", "/health_generate", &Impl::health_generate);
    add(routes, "GET", "/get_model_info", &Impl::model_info);
    add(routes, "GET", "/get_server_info", &Impl::server_info);
    add(routes, "POST", "/flush_cache", &Impl::flush_cache);
    add(routes, "GET", "/flush_cache", &Impl::flush_cache);
    add(routes, "POST", "/abort_request", &Impl::abort_request);
    add(routes, "POST", "/pause_generation", &Impl::pause_generation);
    add(routes, "POST", "/continue_generation", &Impl::continue_generation);
    add(routes, "POST", "/release_memory_occupation", &Impl::release_memory);
    add(routes, "POST", "/resume_memory_occupation", &Impl::resume_memory);
    // Last: requests may arrive as soon as it listens.
    server_ = std::make_unique<HttpServer>(std::move(options), routes.handler());
  }

  ~Impl() { stop(std::chrono::milliseconds(0)); }

  void stop(std::chrono::milliseconds drain) {
    std::lock_guard<std::mutex> stop_lock(stop_mutex_);
    if (stopped_) return;
    stopped_ = true;
    server_->stop(drain);  // closing connections aborts their requests (on the pool)
    {
      std::lock_guard<std::mutex> lock(timers_mutex_);
      for (auto& [id, timer] : timers_) timer->cancel();
    }
    pool_.join();
    std::lock_guard<std::mutex> lock(gate_->mutex);
    gate_->open = false;
  }

  HttpServer& server() { return *server_; }

 private:
  using Endpoint = void (Impl::*)(const std::shared_ptr<HttpExchange>&);

  // Every endpoint answers InvalidRequest with 400 naming the field, WeightsIncomplete with 503,
  // other errors with 500.
  void add(HttpRoutes& routes, const std::string& method, const std::string& path,
           Endpoint endpoint) {
    routes.add(method, path, [this, endpoint](std::shared_ptr<HttpExchange> ex) {
      guarded(ex, [&] { (this->*endpoint)(ex); });
    });
  }

  template <typename Fn>
  static void guarded(const std::shared_ptr<HttpExchange>& ex, Fn&& fn) {
    try {
      fn();
    } catch (const engine::InvalidRequest& e) {
      ex->respond_error(400, e.what(), e.field());
    } catch (const engine::WeightsIncomplete& e) {
      ex->respond_error(503, e.what());  // unavailable until a complete weight sync
    } catch (const std::exception& e) {
      ex->respond_error(500, e.what());
    }
  }

  // Runs blocking engine calls off the server's threads; answers errors like guarded().
  void in_background(const std::shared_ptr<HttpExchange>& ex, std::function<void()> fn) {
    gate_->post([ex, fn = std::move(fn)] { guarded(ex, fn); });
  }

  void abort_in_background(const std::shared_ptr<PendingCall>& call) {
    gate_->post([this, weak = std::weak_ptr<PendingCall>(call)] {
      if (auto call = weak.lock()) {
        for (const std::string& id : call->unfinished_request_ids()) engine_.abort(id);
      }
    });
  }

  // Submits every request of a call; the first the engine refuses aborts the ones before it.
  // A client that goes away aborts them all.
  void submit_all(const std::shared_ptr<HttpExchange>& ex, const std::shared_ptr<PendingCall>& call,
                  const std::vector<engine::GenerateRequest>& requests,
                  const std::function<std::string(const std::string&)>& param) {
    size_t slot = 0;
    for (const engine::GenerateRequest& request : requests) {
      try {
        call->add_request_id(engine_.submit(request, call->callback(slot)));
      } catch (const engine::InvalidRequest& e) {
        call->cancel();
        abort_in_background(call);
        rethrow_renamed(e, param(e.field()));
      } catch (...) {
        call->cancel();
        abort_in_background(call);
        throw;
      }
      slot += static_cast<size_t>(request.sampling.n);
    }
    ex->on_close([this, weak = std::weak_ptr<PendingCall>(call)] {
      if (auto call = weak.lock()) abort_in_background(call);
    });
    call->release();
  }

  void generate(const std::shared_ptr<HttpExchange>& ex) {
    const nlohmann::json body = parse_json_body(ex->body());
    auto call = std::make_shared<GenerateCall>(
        parse_generate_call(body, engine_.tokenizer(), engine_.info()));
    std::vector<size_t> request_of_slot;
    for (size_t r = 0; r < call->requests.size(); ++r) {
      request_of_slot.insert(request_of_slot.end(),
                             static_cast<size_t>(call->requests[r].sampling.n), r);
    }
    const models::Tokenizer& tokenizer = engine_.tokenizer();
    PendingCall::Deliver deliver;
    if (call->stream) {
      deliver = [ex, call, request_of_slot, &tokenizer](
                    const std::vector<size_t>& changed,
                    const std::vector<engine::GenerateOutput>& outputs, bool finished) {
        for (size_t slot : changed) {
          nlohmann::json event =
              generate_output_json(*call, request_of_slot[slot], outputs[slot], tokenizer);
          if (call->answers_with_list()) event["index"] = slot;
          ex->send_event(dump(event));
        }
        if (finished) {
          ex->send_event("[DONE]");
          ex->finish();
        }
      };
    } else {
      deliver = [ex, call, request_of_slot, &tokenizer](
                    const std::vector<size_t>&, const std::vector<engine::GenerateOutput>& outputs,
                    bool) {
        nlohmann::json list = nlohmann::json::array();
        for (size_t slot = 0; slot < outputs.size(); ++slot) {
          list.push_back(
              generate_output_json(*call, request_of_slot[slot], outputs[slot], tokenizer));
        }
        respond_json(ex, call->answers_with_list() ? list : list[0]);
      };
    }
    auto pending =
        std::make_shared<PendingCall>(gate_, call->num_outputs(), call->stream, std::move(deliver));
    submit_all(ex, pending, call->requests,
               [&body](const std::string& field) { return generate_param(field, body); });
  }

  void completions(const std::shared_ptr<HttpExchange>& ex) { openai(ex, OpenAiApi::kCompletions); }
  void chat_completions(const std::shared_ptr<HttpExchange>& ex) { openai(ex, OpenAiApi::kChat); }

  void openai(const std::shared_ptr<HttpExchange>& ex, OpenAiApi api) {
    const nlohmann::json body = parse_json_body(ex->body());
    const models::Tokenizer& tokenizer = engine_.tokenizer();
    auto call = std::make_shared<OpenAiCall>(
        api == OpenAiApi::kChat
            ? parse_chat_call(body, tokenizer, chat_template_ ? &*chat_template_ : nullptr,
                              no_template_reason_, engine_.info())
            : parse_completions_call(body, tokenizer, engine_.info()));
    const std::string id = (api == OpenAiApi::kChat ? "chatcmpl-" : "cmpl-") + random_hex(24);
    const int64_t created = unix_seconds();
    const std::string model = served_model_name();
    PendingCall::Deliver deliver;
    if (call->stream) {
      auto stream = std::make_shared<OpenAiStream>(*call, id, created, model, tokenizer);
      deliver = [ex, call, stream](const std::vector<size_t>& changed,
                                   const std::vector<engine::GenerateOutput>& outputs,
                                   bool finished) {
        for (size_t slot : changed) {
          for (const nlohmann::json& chunk : stream->update(slot, outputs[slot])) {
            ex->send_event(dump(chunk));
          }
        }
        if (finished) {
          if (call->include_usage) ex->send_event(dump(stream->usage_chunk()));
          ex->send_event("[DONE]");
          ex->finish();
        }
      };
    } else {
      deliver = [ex, call, id, created, model, &tokenizer](
                    const std::vector<size_t>&, const std::vector<engine::GenerateOutput>& outputs,
                    bool) {
        respond_json(ex, openai_response(*call, outputs, id, created, model, tokenizer));
      };
    }
    auto pending =
        std::make_shared<PendingCall>(gate_, call->num_choices(), call->stream, std::move(deliver));
    submit_all(ex, pending, call->requests,
               [api](const std::string& field) { return openai_param(field, api); });
  }

  std::string served_model_name() const {
    const engine::EngineInfo& info = engine_.info();
    return info.served_model_name.empty() ? info.model_path : info.served_model_name;
  }

  void models(const std::shared_ptr<HttpExchange>& ex) {
    const engine::EngineInfo& info = engine_.info();
    respond_json(ex, {{"object", "list"},
                      {"data",
                       {{{"id", served_model_name()},
                         {"object", "model"},
                         {"created", started_},
                         {"owned_by", "ooze"},
                         {"root", info.model_path},
                         {"max_model_len", info.context_length}}}}});
  }

  // One greedy token through the engine, within kHealthGenerateTimeout.
  void health_generate(const std::shared_ptr<HttpExchange>& ex) {
    engine::GenerateRequest request;
    request.id = "health-generate-" + random_hex(12);
    request.input_ids = {0};
    request.sampling.max_new_tokens = 1;
    request.sampling.temperature = 0.0;
    engine_.submit(request, [ex](const engine::GenerateOutput& output) {
      if (!output.finished) return;
      if (output.finish_reason == engine::FinishReason::kAbort) {
        ex->respond_error(503, "the health check's generation was aborted: " + output.abort_message,
                          "", "server_error");
      } else {
        ex->respond(200, "text/plain", "");
      }
    });
    std::lock_guard<std::mutex> lock(timers_mutex_);
    const uint64_t timer_id = next_timer_id_++;
    auto timer = std::make_unique<net::steady_timer>(pool_, kHealthGenerateTimeout);
    timer->async_wait([this, ex, timer_id, id = request.id](boost::system::error_code ec) {
      if (!ec && !ex->client_gone()) {
        ex->respond_error(503,
                          "no token came out of the engine within " +
                              std::to_string(kHealthGenerateTimeout.count()) +
                              " s (is it paused or asleep?)",
                          "", "server_error");
      }
      if (!ec) engine_.abort(id);
      std::lock_guard<std::mutex> lock(timers_mutex_);
      timers_.erase(timer_id);
    });
    timers_[timer_id] = std::move(timer);
  }

  void model_info(const std::shared_ptr<HttpExchange>& ex) {
    const engine::EngineInfo& info = engine_.info();
    respond_json(ex, {{"model_path", info.model_path},
                      {"tokenizer_path", info.model_path},
                      {"served_model_name", served_model_name()},
                      {"is_generation", true},
                      {"weight_version", engine_.stats().weight_version},
                      {"context_length", info.context_length},
                      {"vocab_size", info.vocab_size},
                      {"dtype", info.dtype},
                      {"device", info.device},
                      {"eos_token_ids", info.eos_token_ids},
                      {"chat_template", chat_template_ ? chat_template_->name() : ""}});
  }

  void server_info(const std::shared_ptr<HttpExchange>& ex) {
    const engine::EngineInfo& info = engine_.info();
    const engine::EngineStats stats = engine_.stats();
    respond_json(ex, {{"model_path", info.model_path},
                      {"served_model_name", served_model_name()},
                      {"dtype", info.dtype},
                      {"device", info.device},
                      {"context_length", info.context_length},
                      {"block_size", info.block_size},
                      {"num_blocks", info.num_blocks},
                      {"max_running_requests", info.max_running_requests},
                      {"weight_version", stats.weight_version},
                      {"requests_in_flight", server_->requests_in_flight()},
                      {"stats",
                       {{"running_sequences", stats.running_sequences},
                        {"waiting_sequences", stats.waiting_sequences},
                        {"total_blocks", stats.total_blocks},
                        {"free_blocks", stats.free_blocks},
                        {"cached_blocks", stats.cached_blocks},
                        {"prompt_tokens", stats.prompt_tokens},
                        {"cached_prompt_tokens", stats.cached_prompt_tokens},
                        {"cache_hit_rate", stats.cache_hit_rate()},
                        {"computed_prefill_tokens", stats.computed_prefill_tokens},
                        {"generated_tokens", stats.generated_tokens},
                        {"preemptions", stats.preemptions},
                        {"steps", stats.steps},
                        {"paused", stats.paused},
                        {"sleeping", stats.sleeping},
                        {"syncing_weights", stats.syncing_weights},
                        {"weights_incomplete", stats.weights_incomplete}}}});
  }

  static nlohmann::json success(const std::string& message) {
    return {{"success", true}, {"message", message}};
  }

  void flush_cache(const std::shared_ptr<HttpExchange>& ex) {
    optional_body(*ex);
    in_background(ex, [this, ex] {
      engine_.flush_cache();
      respond_json(ex, success("the prefix cache was flushed"));
    });
  }

  void abort_request(const std::shared_ptr<HttpExchange>& ex) {
    const nlohmann::json body = optional_body(*ex);
    JsonFields fields(body, "");
    const std::optional<std::string> rid = fields.string("rid");
    const bool all = fields.boolean("abort_all").value_or(false);
    fields.reject_unknown();
    if (!all && (!rid || rid->empty())) {
      throw engine::InvalidRequest("rid", "give the request id to abort, or abort_all: true");
    }
    in_background(ex, [this, ex, rid, all] {
      if (all) {
        engine_.abort_all();
      } else {
        engine_.abort(*rid);
      }
      respond_json(ex, success(all ? "every request was aborted" : "request " + *rid + " aborted"));
    });
  }

  void pause_generation(const std::shared_ptr<HttpExchange>& ex) {
    const nlohmann::json body = optional_body(*ex);
    JsonFields fields(body, "");
    const std::string mode = fields.string("mode").value_or("abort");
    fields.reject_unknown();
    if (mode != "abort" && mode != "in_place" && mode != "retract") {
      throw engine::InvalidRequest("mode",
                                   "must be abort, in_place or retract, got '" + mode + "'");
    }
    in_background(ex, [this, ex, mode] {
      engine_.pause_generation(/*abort_in_flight=*/mode == "abort");
      respond_json(ex, success("generation paused (" + mode + ")"));
    });
  }

  void continue_generation(const std::shared_ptr<HttpExchange>& ex) {
    JsonFields(optional_body(*ex), "").reject_unknown();
    in_background(ex, [this, ex] {
      engine_.continue_generation();
      respond_json(ex, success("generation continues"));
    });
  }

  // SGLang's bodies carry {tags: [...]}; the engine releases or resumes everything.
  void memory_call(const std::shared_ptr<HttpExchange>& ex, bool release) {
    const nlohmann::json body = optional_body(*ex);
    JsonFields fields(body, "");
    if (const nlohmann::json* tags = fields.raw("tags")) json_string_or_strings(*tags, "tags");
    fields.reject_unknown();
    in_background(ex, [this, ex, release] {
      if (release) {
        engine_.release_memory();
      } else {
        engine_.resume_memory();
      }
      respond_json(ex, success(release ? "memory released" : "memory resumed"));
    });
  }
  void release_memory(const std::shared_ptr<HttpExchange>& ex) { memory_call(ex, true); }
  void resume_memory(const std::shared_ptr<HttpExchange>& ex) { memory_call(ex, false); }

  engine::Engine& engine_;
  net::thread_pool pool_;
  std::shared_ptr<PoolGate> gate_;
  const int64_t started_;
  std::optional<models::ChatTemplate> chat_template_;
  std::string no_template_reason_;

  std::mutex timers_mutex_;
  uint64_t next_timer_id_ = 0;
  std::map<uint64_t, std::unique_ptr<net::steady_timer>> timers_;

  std::mutex stop_mutex_;
  bool stopped_ = false;
  std::unique_ptr<HttpServer> server_;  // last: destroyed first
};

EngineServer::EngineServer(engine::Engine& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}

EngineServer::~EngineServer() = default;

uint16_t EngineServer::port() const { return impl_->server().port(); }
std::string EngineServer::url() const { return impl_->server().url(); }
void EngineServer::stop(std::chrono::milliseconds drain) { impl_->stop(drain); }
int64_t EngineServer::requests_in_flight() const { return impl_->server().requests_in_flight(); }

}  // namespace ooze::serving
