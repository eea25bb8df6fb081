#include "actors/client.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <future>
#include <map>
#include <optional>
#include <vector>

#include "actors/wire.h"
#include "core/logging.h"

namespace ooze::actors {

void CallState::rethrow() const {
  if (error.type == "RemoteError") throw RemoteError(actor, error.exception, error.message);
  if (error.type == "ActorDiedError") {
    throw ActorDiedError(actor, error.message, actor_id, actor_pid);
  }
  if (error.type == "PlacementError") throw PlacementError(error.message);
  if (error.type == "Timeout") throw GetTimeoutError(error.message);
  if (error.type == "WireFormatError") throw WireFormatError(error.message);
  throw RuntimeError((actor.empty() ? "" : actor + ": ") + error.message);
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHeartbeatInterval = std::chrono::milliseconds(500);

struct PendingCall {
  uint64_t id = 0;
  std::string method;
  Payload arguments;
  std::shared_ptr<CallState> state;
};

// One actor as this client sees it.
struct ActorConnection {
  ActorInfo info;
  std::optional<zmq::socket_t> socket;
  std::string connected_endpoint;
  std::deque<PendingCall> waiting;                           // until the actor is alive
  std::map<uint64_t, std::shared_ptr<CallState>> in_flight;  // sent, no reply yet
};

}  // namespace

class Client::Loop {
 public:
  Loop(const std::string& head_endpoint, const Security& security, const std::string& id,
       std::shared_ptr<Completion> completion)
      : security_(security),
        head_(connect_socket(zmq::socket_type::dealer, head_endpoint, security,
                             kMaxControlPartBytes, id)),
        completion_(std::move(completion)) {}

  // ---- commands (run on the I/O thread) ---------------------------------------------------

  void head_request(const std::string& method, std::string body, std::shared_ptr<CallState> state) {
    uint64_t id = ++next_id_;
    Message message;
    message.header.kind = MessageKind::kRequest;
    message.header.id = id;
    message.header.method = method;
    message.body = std::move(body);
    head_calls_[id] = std::move(state);
    send_message(head_, std::move(message));
  }

  void track(const ActorInfo& info) {
    ActorConnection& actor = actors_[info.actor_id];
    if (actor.info.actor_id.empty() || info.version > actor.info.version) apply(actor, info);
  }

  void call(const std::string& actor_id, PendingCall call) {
    auto found = actors_.find(actor_id);
    if (found == actors_.end()) {
      fail(*call.state, "RuntimeError", "the actor " + actor_id + " is not known to this client");
      return;
    }
    ActorConnection& actor = found->second;
    call.state->actor = actor.info.label;
    call.state->actor_id = actor_id;
    if (actor.info.state == ActorState::kDead) {
      fail_died(*call.state, actor.info, actor.info.death_reason);
    } else if (actor.info.state == ActorState::kAlive && actor.socket && actor.waiting.empty()) {
      send_call(actor, std::move(call));
    } else {
      actor.waiting.push_back(std::move(call));
    }
  }

  // ---- the loop ---------------------------------------------------------------------------

  void poll_once(int wake_fd) {
    std::vector<zmq::pollitem_t> items{{head_.handle(), 0, ZMQ_POLLIN, 0},
                                       {nullptr, wake_fd, ZMQ_POLLIN, 0}};
    std::vector<ActorConnection*> polled;
    for (auto& [actor_id, actor] : actors_) {
      if (actor.socket) {
        items.push_back({actor.socket->handle(), 0, ZMQ_POLLIN, 0});
        polled.push_back(&actor);
      }
    }
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t count = 0;
      ssize_t ignored = read(wake_fd, &count, sizeof(count));
      (void)ignored;
    }
    drain_head();
    for (size_t i = 0; i < polled.size(); ++i) {
      if (items[i + 2].revents & ZMQ_POLLIN) drain_actor(*polled[i]);
    }
    if (Clock::now() - last_heartbeat_ > kHeartbeatInterval) {
      last_heartbeat_ = Clock::now();
      Message heartbeat;
      heartbeat.header.kind = MessageKind::kRequest;
      heartbeat.header.id = 0;  // replies to id 0 are dropped
      heartbeat.header.method = method::kHeartbeat;
      send_message(head_, std::move(heartbeat));
    }
  }

  // Fails everything outstanding (the client is closing).
  void abandon() {
    for (auto& [id, state] : head_calls_) fail(*state, "RuntimeError", "the client closed");
    head_calls_.clear();
    for (auto& [actor_id, actor] : actors_) fail_all(actor, "RuntimeError", "the client closed");
  }

  std::function<void(const LogLines&)> log_sink;
  std::map<std::string, ActorInfo> infos;  // guarded by completion_->mutex: for user threads

 private:
  void send_call(ActorConnection& actor, PendingCall call) {
    Message message;
    message.header.kind = MessageKind::kRequest;
    message.header.id = call.id;
    message.header.method = std::move(call.method);
    message.body = std::move(call.arguments.bytes);
    message.blobs = std::move(call.arguments.blobs);
    actor.in_flight[call.id] = call.state;
    send_message(*actor.socket, std::move(message));
  }

  void apply(ActorConnection& actor, const ActorInfo& info) {
    actor.info = info;
    {
      std::lock_guard<std::mutex> lock(completion_->mutex);
      infos[info.actor_id] = info;
    }
    completion_->done.notify_all();
    if (info.state == ActorState::kAlive) {
      if (actor.connected_endpoint != info.endpoint) {
        actor.socket.reset();
        actor.socket.emplace(
            connect_socket(zmq::socket_type::dealer, info.endpoint, security_, kMaxDataPartBytes));
        actor.connected_endpoint = info.endpoint;
      }
      while (!actor.waiting.empty()) {
        send_call(actor, std::move(actor.waiting.front()));
        actor.waiting.pop_front();
      }
      return;
    }
    if (info.state == ActorState::kRestarting || info.state == ActorState::kDead) {
      // The instance that had the calls in flight is gone (at-most-once: they are not retried).
      std::string reason = info.death_reason.empty() ? "its process ended" : info.death_reason;
      for (auto& [id, state] : actor.in_flight) fail_died(*state, info, reason);
      actor.in_flight.clear();
      actor.socket.reset();
      actor.connected_endpoint.clear();
      if (info.state == ActorState::kDead) {
        for (PendingCall& call : actor.waiting) fail_died(*call.state, info, reason);
        actor.waiting.clear();
      }
    }
  }

  void fail_all(ActorConnection& actor, const std::string& type, const std::string& message) {
    for (auto& [id, state] : actor.in_flight) fail(*state, type, message);
    actor.in_flight.clear();
    for (PendingCall& call : actor.waiting) fail(*call.state, type, message);
    actor.waiting.clear();
  }

  // The call's actor died: the error names the process that did (`info` is the death's news,
  // with the pid of the instance that had the call).
  void fail_died(CallState& state, const ActorInfo& info, const std::string& reason) {
    fail(state, "ActorDiedError", reason, info.pid);
  }

  void fail(CallState& state, const std::string& type, const std::string& message,
            int32_t actor_pid = 0) {
    {
      std::lock_guard<std::mutex> lock(completion_->mutex);
      state.actor_pid = actor_pid;
      state.ok = false;
      state.error = ErrorReply{type, message, ""};
      state.finished = true;
      ++completion_->failed_calls;
    }
    completion_->done.notify_all();
  }

  void finish(CallState& state, Message& reply) {
    bool decoded = true;
    ErrorReply error;
    if (!reply.header.ok) {
      try {
        from_wire(reply.body, error);
      } catch (const WireFormatError& malformed) {
        error = ErrorReply{"RuntimeError",
                           std::string("malformed error reply: ") + malformed.what(), ""};
      }
      decoded = false;
    }
    {
      std::lock_guard<std::mutex> lock(completion_->mutex);
      state.ok = decoded;
      if (decoded) {
        state.result.bytes = std::move(reply.body);
        state.result.blobs = std::move(reply.blobs);
      } else {
        state.error = std::move(error);
        ++completion_->failed_calls;
      }
      state.finished = true;
    }
    completion_->done.notify_all();
  }

  void drain_head() {
    while (true) {
      std::string rejected;
      auto message = receive_message(head_, nullptr, &rejected);
      if (!message) {
        if (rejected.empty()) return;
        OOZE_LOG(WARN) << "dropped a malformed message from the head: " << rejected;
        continue;
      }
      if (message->header.kind == MessageKind::kReply) {
        auto call = head_calls_.find(message->header.id);
        if (call == head_calls_.end()) continue;
        finish(*call->second, *message);
        head_calls_.erase(call);
      } else if (message->header.kind == MessageKind::kEvent) {
        try {
          if (message->header.method == topic::kActor) {
            ActorInfo info;
            from_wire(message->body, info);
            auto actor = actors_.find(info.actor_id);
            if (actor != actors_.end() && info.version > actor->second.info.version) {
              apply(actor->second, info);
            }
          } else if (message->header.method == topic::kLog && log_sink) {
            LogLines lines;
            from_wire(message->body, lines);
            log_sink(lines);
          }
        } catch (const WireFormatError& error) {
          OOZE_LOG(WARN) << "dropped a malformed event from the head: " << error.what();
        }
      }
    }
  }

  void drain_actor(ActorConnection& actor) {
    while (actor.socket) {
      std::string rejected;
      auto message = receive_message(*actor.socket, nullptr, &rejected);
      if (!message) {
        if (rejected.empty()) return;
        OOZE_LOG(WARN) << "dropped a malformed reply from " << actor.info.label << ": " << rejected;
        continue;
      }
      auto call = actor.in_flight.find(message->header.id);
      if (call == actor.in_flight.end()) continue;
      finish(*call->second, *message);
      actor.in_flight.erase(call);
    }
  }

 public:
  uint64_t next_id_ = 0;

 private:
  Security security_;
  zmq::socket_t head_;
  std::shared_ptr<Completion> completion_;
  std::map<uint64_t, std::shared_ptr<CallState>> head_calls_;
  std::map<std::string, ActorConnection> actors_;
  Clock::time_point last_heartbeat_ = Clock::now();
};

Client::Client(const std::string& head_endpoint, const Security& security, bool is_driver,
               std::string client_id, std::chrono::milliseconds connect_timeout)
    : id_(client_id.empty() ? random_id() : std::move(client_id)),
      completion_(std::make_shared<Completion>()) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw RuntimeError("eventfd failed");
  // The sockets are made on the I/O thread that will use them.
  std::promise<void> started;
  std::exception_ptr failure;
  thread_ = std::thread([this, head_endpoint, security, &started, &failure] {
    try {
      loop_ = std::make_unique<Loop>(head_endpoint, security, id_, completion_);
    } catch (...) {
      failure = std::current_exception();
      started.set_value();
      return;
    }
    started.set_value();
    while (true) {
      std::deque<std::function<void(Loop&)>> commands;
      bool stop = false;
      {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        commands.swap(queue_);
        stop = stopping_;
      }
      for (auto& command : commands) command(*loop_);
      if (stop) break;
      loop_->poll_once(wake_fd_);
    }
    loop_->abandon();
    loop_.reset();
  });
  started.get_future().wait();
  if (failure) {
    thread_.join();
    std::rethrow_exception(failure);
  }
  RegisterClient request{id_, static_cast<int32_t>(getpid()), is_driver};
  try {
    request_head(method::kRegisterClient, to_wire(request), connect_timeout);
  } catch (const RuntimeError& error) {
    close();
    throw RuntimeError("no ooze head answers at " + head_endpoint + " (" + error.what() +
                       "); is `ooze start --head` running there, and is the cluster token right?");
  }
}

Client::~Client() { close(); }

void Client::close() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  thread_.join();
  ::close(wake_fd_);
  wake_fd_ = -1;
}

void Client::post(std::function<void(Loop&)> command) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (stopping_) throw RuntimeError("the actor runtime was shut down");
    queue_.push_back(std::move(command));
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

std::string Client::request_head(const std::string& method, std::string body,
                                 std::chrono::milliseconds timeout) {
  auto state = std::make_shared<CallState>();
  state->completion = completion_;
  post([method, body = std::move(body), state](Loop& loop) mutable {
    loop.head_request(method, std::move(body), state);
  });
  std::unique_lock<std::mutex> lock(completion_->mutex);
  if (!completion_->done.wait_for(lock, timeout, [&] { return state->finished; })) {
    throw RuntimeError("the head did not answer " + method + " within " +
                       std::to_string(timeout.count()) + " ms");
  }
  if (!state->ok) state->rethrow();
  return std::move(state->result.bytes);
}

void Client::track(const ActorInfo& info) {
  post([info](Loop& loop) { loop.track(info); });
}

ActorInfo Client::actor_info(const std::string& actor_id) {
  std::lock_guard<std::mutex> lock(completion_->mutex);
  auto found = loop_->infos.find(actor_id);
  if (found == loop_->infos.end()) throw RuntimeError("actor " + actor_id + " is not tracked");
  return found->second;
}

std::vector<ActorInfo> Client::tracked_actors() {
  std::lock_guard<std::mutex> lock(completion_->mutex);
  std::vector<ActorInfo> infos;
  for (const auto& [actor_id, info] : loop_->infos) infos.push_back(info);
  return infos;
}

bool Client::wait_alive(const std::string& actor_id, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(completion_->mutex);
  ActorState state = ActorState::kPending;
  bool settled = completion_->done.wait_for(lock, timeout, [&] {
    auto found = loop_->infos.find(actor_id);
    if (found == loop_->infos.end()) return false;
    state = found->second.state;
    return state == ActorState::kAlive || state == ActorState::kDead;
  });
  if (!settled) {
    throw GetTimeoutError("actor " + actor_id + " was not alive within " +
                          std::to_string(timeout.count()) + " ms");
  }
  return state == ActorState::kAlive;
}

std::shared_ptr<CallState> Client::call(const std::string& actor_id,
                                        const std::string& qualified_method, Payload arguments) {
  auto state = std::make_shared<CallState>();
  state->completion = completion_;
  // std::function must be copyable; the payload (with its message parts) is not.
  auto payload = std::make_shared<Payload>(std::move(arguments));
  post([actor_id, qualified_method, payload, state](Loop& loop) {
    PendingCall call{++loop.next_id_, qualified_method, std::move(*payload), state};
    loop.call(actor_id, std::move(call));
  });
  return state;
}

void Client::on_log(std::function<void(const LogLines&)> sink) {
  post([sink = std::move(sink)](Loop& loop) { loop.log_sink = sink; });
}

}  // namespace ooze::actors
