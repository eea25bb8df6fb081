#include "actors/worker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <typeinfo>
#include <vector>

#include "actors/actor_class.h"
#include "actors/client.h"
#include "actors/runtime.h"
#include "actors/shared_memory.h"
#include "actors/wire.h"
#include "core/logging.h"

namespace ooze::actors {
namespace detail {
void adopt_worker_client(std::unique_ptr<Client> client, const std::string& head_endpoint,
                         const std::string& session_dir);
}  // namespace detail

namespace {

std::string required_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw RuntimeError(std::string("worker started without ") + name);
  return value;
}

// The exception in flight as (type, message).
std::pair<std::string, std::string> describe_current_exception() {
  try {
    throw;
  } catch (const std::exception& error) {
    return {type_name(typeid(error)), error.what()};
  } catch (...) {
    return {"unknown exception", "(not derived from std::exception)"};
  }
}

struct Task {
  std::string routing_id;
  Message request;
};

struct Done {
  std::string routing_id;
  Message reply;
};

class ActorServer {
 public:
  ActorServer(const ClassEntry& entry, std::shared_ptr<void> instance, unsigned concurrency,
              zmq::socket_t socket, std::string label)
      : entry_(entry),
        instance_(std::move(instance)),
        socket_(std::move(socket)),
        label_(std::move(label)),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    // One call at a time runs on this thread, between receives: a hand-off to an executor and
    // back would add two thread wake-ups to every call (a fifth of a small call's round trip).
    // Requests that arrive meanwhile wait in the socket, in order, as they would in the queue.
    if (concurrency <= 1) return;
    for (unsigned i = 0; i < concurrency; ++i) executors_.emplace_back([this] { execute(); });
  }

  [[noreturn]] void serve() {
    while (true) {
      zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, std::chrono::milliseconds(-1));
      if (items[1].revents & ZMQ_POLLIN) {
        uint64_t count = 0;
        ssize_t ignored = read(wake_fd_, &count, sizeof(count));
        (void)ignored;
        send_done();
      }
      if (items[0].revents & ZMQ_POLLIN) receive_requests();
    }
  }

 private:
  void receive_requests() {
    while (true) {
      std::string routing_id, rejected;
      auto message = receive_message(socket_, &routing_id, &rejected);
      if (!message) {
        if (rejected.empty()) return;
        OOZE_LOG(WARN) << label_ << " dropped a malformed message: " << rejected;
        continue;
      }
      if (message->header.kind != MessageKind::kRequest) continue;
      if (entry_.find_method(message->header.method) == nullptr) {
        reply_error(routing_id, message->header.id, "UnknownMethod",
                    entry_.name + " has no registered method \"" + message->header.method + "\"");
        continue;
      }
      if (executors_.empty()) {
        Message reply = run(*message);
        send(routing_id, std::move(reply));
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        tasks_.push_back(Task{std::move(routing_id), std::move(*message)});
      }
      task_ready_.notify_one();
    }
  }

  void reply_error(const std::string& routing_id, uint64_t id, const std::string& type,
                   const std::string& message, const std::string& exception = "") {
    Message reply;
    reply.header.kind = MessageKind::kReply;
    reply.header.id = id;
    reply.header.ok = false;
    reply.body = to_wire(ErrorReply{type, message, exception});
    send(routing_id, std::move(reply));
  }

  void send(const std::string& routing_id, Message&& reply) {
    try {
      send_message(socket_, std::move(reply), &routing_id);
    } catch (const zmq::error_t&) {
      // The caller went away; nobody is left to answer.
    }
  }

  // The method a request names, its reply (an ErrorReply when it throws).
  Message run(Message& request) {
    const MethodEntry& method = *entry_.find_method(request.header.method);
    Message reply;
    reply.header.kind = MessageKind::kReply;
    reply.header.id = request.header.id;
    Payload arguments{std::move(request.body), std::move(request.blobs)};
    try {
      Payload result = method.invoke(instance_.get(), arguments);
      reply.body = std::move(result.bytes);
      reply.blobs = std::move(result.blobs);
    } catch (const WireFormatError& error) {
      reply.header.ok = false;
      reply.body = to_wire(ErrorReply{
          "WireFormatError", "bad arguments for " + method.name + ": " + error.what(), ""});
    } catch (...) {
      auto [type, message] = describe_current_exception();
      reply.header.ok = false;
      reply.body = to_wire(ErrorReply{"RemoteError", method.name + ": " + message, type});
    }
    return reply;
  }

  // An executor of a concurrent actor: runs queued calls, hands their replies to the socket's
  // thread (ZeroMQ sockets are not shared between threads).
  void execute() {
    while (true) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        task_ready_.wait(lock, [&] { return !tasks_.empty(); });
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      Message reply = run(task.request);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        done_.push_back(Done{std::move(task.routing_id), std::move(reply)});
      }
      uint64_t one = 1;
      ssize_t ignored = write(wake_fd_, &one, sizeof(one));
      (void)ignored;
    }
  }

  void send_done() {
    std::deque<Done> done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done.swap(done_);
    }
    for (Done& item : done) send(item.routing_id, std::move(item.reply));
  }

  const ClassEntry& entry_;
  std::shared_ptr<void> instance_;
  zmq::socket_t socket_;
  std::string label_;
  int wake_fd_;
  std::mutex mutex_;
  std::condition_variable task_ready_;
  std::deque<Task> tasks_;
  std::deque<Done> done_;
  std::vector<std::thread> executors_;
};

}  // namespace

bool started_as_worker() { return std::getenv("OOZE_WORKER_ACTOR_ID") != nullptr; }

int serve_actor_from_environment() {
  std::string actor_id = required_env("OOZE_WORKER_ACTOR_ID");
  std::string head = required_env("OOZE_HEAD_ADDRESS");
  std::string bind = required_env("OOZE_WORKER_BIND");
  std::string session_dir = required_env("OOZE_SESSION_DIR");
  const char* token = std::getenv("OOZE_CLUSTER_TOKEN");
  Security security = token != nullptr ? Security::from_token(token) : Security::none();
  // Programs this actor starts are not workers.
  unsetenv("OOZE_WORKER_ACTOR_ID");
  unsetenv("OOZE_CLUSTER_TOKEN");

  // The client is the actor's own runtime: its id is the actor's, so the actors it spawns are
  // owned by (and die with) it.
  auto client = std::make_unique<Client>(head, security, /*is_driver=*/false, actor_id);
  Client& head_client = *client;
  ActorSpec spec = head_client.ask_head<ActorSpec>(method::kActorSpec, actor_id);
  detail::adopt_worker_client(std::move(client), head, session_dir);

  std::shared_ptr<void> instance;
  const ClassEntry* entry = nullptr;
  try {
    entry = &ActorRegistry::instance().by_name(spec.class_name);
    Payload arguments{spec.constructor_args, {}};
    instance = entry->construct(arguments);
  } catch (...) {
    auto [type, message] = describe_current_exception();
    WorkerEvent failed{actor_id, static_cast<int32_t>(getpid()), "",
                       "its constructor raised " + type + ": " + message};
    head_client.request_head(method::kActorFailed, to_wire(failed));
    return 1;
  }
  // Callers of an ipc:// worker are on this machine: big tensors go through shared memory.
  enable_shared_memory(bind.rfind("ipc://", 0) == 0);
  std::string endpoint;
  zmq::socket_t socket =
      bind_socket(zmq::socket_type::router, bind, security, kMaxDataPartBytes, &endpoint);
  ActorServer server(*entry, std::move(instance), spec.max_concurrency, std::move(socket),
                     spec.label);
  WorkerEvent ready{actor_id, static_cast<int32_t>(getpid()), endpoint, ""};
  head_client.request_head(method::kActorReady, to_wire(ready));
  server.serve();
}

}  // namespace ooze::actors
