#include "actors/client.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <utility>
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
  bool sent_to = false;                                      // since the socket was last read
};

}  // namespace

// What one thread waits on: the wake-up, the head, then `actors`' sockets.
struct Client::Wait {
  std::vector<pollfd> descriptors;
  std::vector<ActorConnection*> actors;
  uint64_t sockets_version = 0;
};

class Client::Loop {
 public:
  Loop(const std::string& head_endpoint, const Security& security, const std::string& id,
       std::shared_ptr<Completion> completion)
      : security_(security),
        head_(connect_socket(zmq::socket_type::dealer, head_endpoint, security,
                             kMaxControlPartBytes, id)),
        completion_(std::move(completion)) {}

  // ---- commands (run by the thread that runs the loop, under its mutex) -------------------

  void head_request(const std::string& method, std::string body, std::shared_ptr<CallState> state) {
    uint64_t id = ++next_id_;
    Message message;
    message.header.kind = MessageKind::kRequest;
    message.header.id = id;
    message.header.method = method;
    message.body = std::move(body);
    head_calls_[id] = std::move(state);
    send_to_head(std::move(message));
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

  // ---- waiting on the sockets, which a thread does without the loop's mutex --------------
  //
  // The wait is a plain poll() on each socket's ZMQ_FD, not zmq::poll: zmq::poll asks every
  // socket for its events before and after waiting, two system calls per socket per pass, and
  // with an actor per socket that was most of a synchronous call's time in this client. A
  // ZMQ_FD signals only a change, and a send may consume that signal, so a socket that was
  // sent on is read until empty before anyone waits on it (see zmq_getsockopt, ZMQ_FD).

  void prepare_wait(int wake_fd, Wait& wait) {
    drain_sent_to();
    wait.descriptors.assign({{wake_fd, POLLIN, 0}, {head_.get(zmq::sockopt::fd), POLLIN, 0}});
    wait.actors.clear();
    for (auto& [actor_id, actor] : actors_) {
      if (!actor.socket) continue;
      wait.descriptors.push_back({actor.socket->get(zmq::sockopt::fd), POLLIN, 0});
      wait.actors.push_back(&actor);
    }
    wait.sockets_version = sockets_version_;
  }

  // Reads what the wait found; every socket when sockets were replaced meanwhile.
  void after_wait(int wake_fd, const Wait& wait) {
    if (wait.descriptors[0].revents & POLLIN) {
      uint64_t count = 0;
      ssize_t ignored = read(wake_fd, &count, sizeof(count));
      (void)ignored;
    }
    if (wait.sockets_version != sockets_version_) {
      drain_head();
      for (auto& [actor_id, actor] : actors_) drain_actor(actor);
    } else {
      if (wait.descriptors[1].revents & POLLIN) drain_head();
      for (size_t i = 0; i < wait.actors.size(); ++i) {
        if (wait.descriptors[i + 2].revents & POLLIN) drain_actor(*wait.actors[i]);
      }
    }
    if (Clock::now() - last_heartbeat_ > kHeartbeatInterval) {
      last_heartbeat_ = Clock::now();
      Message heartbeat;
      heartbeat.header.kind = MessageKind::kRequest;
      heartbeat.header.id = 0;  // replies to id 0 are dropped
      heartbeat.header.method = method::kHeartbeat;
      send_to_head(std::move(heartbeat));
    }
  }

  // Reads the sockets sent on since they were last read (their ZMQ_FD may no longer signal).
  void drain_sent_to() {
    if (head_sent_to_) {
      head_sent_to_ = false;
      drain_head();
    }
    for (auto& [actor_id, actor] : actors_) {
      if (!actor.sent_to) continue;
      actor.sent_to = false;
      drain_actor(actor);
    }
  }

  // Whether a socket was made or closed since the last look: whoever waits on the sockets must
  // choose them again.
  bool take_sockets_changed() { return std::exchange(sockets_changed_, false); }

  // Whether a call finished or an actor's state changed since the last look.
  bool take_completion_changed() { return std::exchange(completion_changed_, false); }

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
    actor.sent_to = true;
  }

  void socket_changed() {
    ++sockets_version_;
    sockets_changed_ = true;
  }

  void send_to_head(Message&& message) {
    send_message(head_, std::move(message));
    head_sent_to_ = true;
  }

  void apply(ActorConnection& actor, const ActorInfo& info) {
    actor.info = info;
    {
      std::lock_guard<std::mutex> lock(completion_->mutex);
      infos[info.actor_id] = info;
    }
    completion_changed_ = true;
    if (info.state == ActorState::kAlive) {
      if (actor.connected_endpoint != info.endpoint) {
        actor.socket.reset();
        actor.socket.emplace(
            connect_socket(zmq::socket_type::dealer, info.endpoint, security_, kMaxDataPartBytes));
        actor.connected_endpoint = info.endpoint;
        socket_changed();
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
      socket_changed();
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
    completion_changed_ = true;
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
    completion_changed_ = true;
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
  bool head_sent_to_ = false;        // since the head's socket was last read
  uint64_t sockets_version_ = 0;     // counts the sockets made and closed
  bool sockets_changed_ = false;     // since take_sockets_changed
  bool completion_changed_ = false;  // since take_completion_changed
  Clock::time_point last_heartbeat_ = Clock::now();
};

Client::Client(const std::string& head_endpoint, const Security& security, bool is_driver,
               std::string client_id, std::chrono::milliseconds connect_timeout)
    : id_(client_id.empty() ? random_id() : std::move(client_id)),
      completion_(std::make_shared<Completion>()) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw RuntimeError("eventfd failed");
  try {
    loop_ = std::make_unique<Loop>(head_endpoint, security, id_, completion_);
  } catch (...) {
    ::close(wake_fd_);
    throw;
  }
  completion_->client = this;
  thread_ = std::thread([this] { run_io_thread(); });
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

// Waits on the sockets and reads what arrives (replies, the head's events, its workers' output),
// and sends the queued calls, while no caller does. A caller waiting for a result does both
// itself (wait_reading). While one does, and for a moment after (it is likely to wait again
// for its next call), this thread stands aside: a reply then wakes one thread, not two.
void Client::run_io_thread() {
  Wait wait;
  std::unique_lock<std::mutex> lock(loop_mutex_);
  while (!stopping_) {
    if (reader_active_ || (Clock::now() - last_reader_left_ < kReaderLinger && queue_empty())) {
      io_thread_wake_.wait_for(lock, kReaderLinger);
      continue;
    }
    wait_once(lock, wait, kLongestPoll);
    publish(lock, /*by_reader=*/false);
    lock.lock();
  }
  run_queued();
  loop_->abandon();
  publish(lock, /*by_reader=*/false);
}

// Sends what is queued, waits on the sockets up to `timeout` (unless more was queued
// meanwhile), and reads what arrived. `lock` holds loop_mutex_, released during the wait.
void Client::wait_once(std::unique_lock<std::mutex>& lock, Wait& wait,
                       std::chrono::milliseconds timeout) {
  run_queued();
  loop_->prepare_wait(wake_fd_, wait);
  bool polls = false;
  {
    std::lock_guard<std::mutex> queue_lock(queue_mutex_);
    polls = queue_.empty();
    if (polls) ++pollers_;  // a call queued from now on wakes the wait
  }
  if (polls) {
    lock.unlock();
    if (::poll(wait.descriptors.data(), wait.descriptors.size(),
               static_cast<int>(timeout.count())) < 0 &&
        errno != EINTR) {
      OOZE_LOG(ERROR) << "the actor client's poll failed: " << std::strerror(errno);
    }
    {
      std::lock_guard<std::mutex> queue_lock(queue_mutex_);
      --pollers_;
    }
    lock.lock();
  }
  loop_->after_wait(wake_fd_, wait);
}

// Reads the sockets until `ready()` or `deadline`, when no other thread reads them: the reply
// then wakes this thread directly, not the I/O thread and then this one.
bool Client::wait_reading(const std::function<bool()>& ready, Clock::time_point deadline) {
  Wait wait;
  std::unique_lock<std::mutex> lock(loop_mutex_);
  auto finished = [&] {
    std::lock_guard<std::mutex> completion_lock(completion_->mutex);
    return ready();
  };
  while (!stopping_ && reader_active_) {  // another thread reads: wait to be told
    lock.unlock();
    {
      std::unique_lock<std::mutex> completion_lock(completion_->mutex);
      bool done = false;
      completion_->done.wait_until(completion_lock, std::min(deadline, Clock::now() + kLongestPoll),
                                   [&] { return (done = ready()) || !reader_active_; });
      if (done) return true;
    }
    if (Clock::now() >= deadline) return false;
    lock.lock();
  }
  // Once the client closes, what the loop has not finished will not come.
  auto wait_to_be_told = [&] {
    std::unique_lock<std::mutex> completion_lock(completion_->mutex);
    bool done = false;
    completion_->done.wait_until(completion_lock, deadline,
                                 [&] { return (done = ready()) || closed_; });
    return done;
  };
  if (stopping_) {  // the I/O thread fails every call as it stops
    lock.unlock();
    return wait_to_be_told();
  }
  set_reader_active(true);
  bool done = finished();
  while (!done && !stopping_ && Clock::now() < deadline) {
    wait_once(lock, wait,
              std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::min<Clock::duration>(deadline - Clock::now(), kLongestPoll)));
    publish(lock, /*by_reader=*/true);
    lock.lock();
    done = finished();
  }
  loop_->drain_sent_to();  // a thread that waits on the sockets now may wait for their signal
  set_reader_active(false);
  last_reader_left_ = Clock::now();
  lock.unlock();
  completion_->done.notify_all();  // a follower may read now
  return done || wait_to_be_told();
}

void Client::set_reader_active(bool active) {
  std::lock_guard<std::mutex> completion_lock(completion_->mutex);  // followers read it under it
  reader_active_ = active;
}

// Tells the others what work on the loop changed, after releasing it (`lock`), so that a woken
// caller can send its next call at once: the waiters of finished calls; and whoever waits on
// the sockets, when sockets changed or when a call finished that a reader may wait for.
void Client::publish(std::unique_lock<std::mutex>& lock, bool by_reader) {
  const bool completed = loop_->take_completion_changed();
  const bool wake = loop_->take_sockets_changed() || (completed && reader_active_ && !by_reader);
  lock.unlock();
  if (wake) wake_pollers();
  if (completed) completion_->done.notify_all();
}

void Client::close() {
  {
    std::scoped_lock lock(loop_mutex_, queue_mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  {
    std::lock_guard<std::mutex> completion_lock(completion_->mutex);
    completion_->client = nullptr;  // new waiters wait on the completion alone
  }
  io_thread_wake_.notify_all();
  wake_pollers();
  thread_.join();  // it failed every call left
  {
    std::unique_lock<std::mutex> completion_lock(completion_->mutex);
    closed_ = true;
    completion_->done.notify_all();
    completion_->done.wait(completion_lock, [&] { return completion_->waiting_in_client == 0; });
  }
  loop_.reset();
  ::close(wake_fd_);
  wake_fd_ = -1;
}

void Client::wake_pollers() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

// Queues a command for whichever thread next runs the loop: one waiting on the sockets is woken.
// With none, the caller itself is likely to wait for its call next and send it then; a second
// command queued behind the first is a caller that goes on sending (calls in flight), and wakes
// the I/O thread to send them meanwhile.
void Client::post(std::function<void(Loop&)> command) {
  bool wake_waiting = false;
  bool wake_io_thread = false;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (stopping_) throw RuntimeError("the actor runtime was shut down");
    queue_.push_back(std::move(command));
    wake_waiting = pollers_ > 0;
    wake_io_thread = !wake_waiting && queue_.size() > 1;
  }
  if (wake_waiting) wake_pollers();
  if (wake_io_thread) io_thread_wake_.notify_one();
}

void Client::run_queued() {
  std::deque<std::function<void(Loop&)>> commands;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    commands.swap(queue_);
  }
  for (auto& command : commands) command(*loop_);
}

bool Client::queue_empty() {
  std::lock_guard<std::mutex> lock(queue_mutex_);
  return queue_.empty();
}

std::string Client::request_head(const std::string& method, std::string body,
                                 std::chrono::milliseconds timeout) {
  auto state = std::make_shared<CallState>();
  state->completion = completion_;
  post([method, body = std::move(body), state](Loop& loop) mutable {
    loop.head_request(method, std::move(body), state);
  });
  if (!wait_for_call(*state, timeout)) {
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
  ActorState state = ActorState::kPending;
  auto settled = [&] {
    auto found = loop_->infos.find(actor_id);
    if (found == loop_->infos.end()) return false;
    state = found->second.state;
    return state == ActorState::kAlive || state == ActorState::kDead;
  };
  if (!wait_until_ready(*completion_, settled, timeout)) {
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
    loop.call(actor_id, PendingCall{++loop.next_id_, qualified_method, std::move(*payload), state});
  });
  return state;
}

void Client::on_log(std::function<void(const LogLines&)> sink) {
  post([sink = std::move(sink)](Loop& loop) { loop.log_sink = sink; });
}

}  // namespace ooze::actors

namespace ooze::actors {

bool wait_until_ready(Completion& completion, const std::function<bool()>& ready,
                      std::chrono::milliseconds timeout) {
  const auto deadline = timeout == std::chrono::milliseconds::max()
                            ? std::chrono::steady_clock::time_point::max()
                            : std::chrono::steady_clock::now() + timeout;
  Client* client = nullptr;
  {
    std::unique_lock<std::mutex> lock(completion.mutex);
    if (ready()) return true;
    client = completion.client;
    if (client == nullptr) return completion.done.wait_until(lock, deadline, ready);
    ++completion.waiting_in_client;  // the client stays open until this thread leaves it
  }
  const bool done = client->wait_reading(ready, deadline);
  {
    std::lock_guard<std::mutex> lock(completion.mutex);
    --completion.waiting_in_client;
  }
  completion.done.notify_all();
  return done;
}

bool wait_for_call(const CallState& state, std::chrono::milliseconds timeout) {
  return wait_until_ready(
      *state.completion, [&] { return state.finished; }, timeout);
}

}  // namespace ooze::actors
