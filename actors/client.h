// The client side of the runtime, in the driver and in every worker: one I/O thread that owns
// the ZeroMQ sockets (one to the head, one per actor called), so user threads never touch a
// socket. User threads hand it calls through a queue and an eventfd; it sends them in order,
// matches replies to calls, and applies the head's actor events: a call waiting for an actor
// that is still starting is held until the actor is alive; calls in flight when an actor dies
// or restarts fail with ActorDiedError; calls to a dead actor fail at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/actor_class.h"
#include "actors/errors.h"
#include "actors/protocol.h"
#include "actors/transport.h"

namespace ooze::actors {

// Completion of calls: one mutex and condition variable per client, shared by its futures, so
// that wait_any can wait for several calls at once.
struct Completion {
  std::mutex mutex;
  std::condition_variable done;
  uint64_t failed_calls = 0;  // ever finished with an error; a waiter's cue to look for its own
};

// One call's outcome, filled by the I/O thread.
struct CallState {
  std::shared_ptr<Completion> completion;
  bool finished = false;  // guarded by completion->mutex
  bool ok = false;
  Payload result;                 // ok
  ErrorReply error;               // !ok
  std::string actor;              // the actor's label, for error messages
  std::string actor_id;           // and its id
  int32_t actor_pid = 0;          // the process that died, for ActorDiedError
  std::shared_ptr<void> decoded;  // the result, once a Future decoded it
  // Throws the error a failed call carries (RemoteError, ActorDiedError, RuntimeError, ...).
  [[noreturn]] void rethrow() const;
};

class Client {
 public:
  // Registers with the head; throws RuntimeError when it does not answer within
  // `connect_timeout` (no head there, or a wrong cluster token: CURVE refuses silently).
  Client(const std::string& head_endpoint, const Security& security, bool is_driver,
         std::string client_id = "",
         std::chrono::milliseconds connect_timeout = std::chrono::seconds(15));
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& id() const { return id_; }
  const std::shared_ptr<Completion>& completion() const { return completion_; }

  // A request to the head; waits for the reply. Throws the reply's error (PlacementError,
  // RuntimeError, ...) or RuntimeError when the head does not answer within `timeout`.
  std::string request_head(const std::string& method, std::string body,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30));
  template <class Result, class Request>
  Result ask_head(const std::string& method, const Request& request,
                  std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    Result result{};
    from_wire(request_head(method, to_wire(request), timeout), result);
    return result;
  }

  // Makes the client follow `info`'s actor (call before calling it).
  void track(const ActorInfo& info);
  // The newest state known of a tracked actor.
  ActorInfo actor_info(const std::string& actor_id);
  // The newest states known of every tracked actor.
  std::vector<ActorInfo> tracked_actors();
  // Waits until the actor is alive (returns true) or dead (false), or `timeout` passes (throws
  // GetTimeoutError).
  bool wait_alive(const std::string& actor_id, std::chrono::milliseconds timeout);

  // Sends `arguments` to method `qualified_method` ("Class.method") of the actor.
  std::shared_ptr<CallState> call(const std::string& actor_id, const std::string& qualified_method,
                                  Payload arguments);

  // Where the lines of workers' output go (the driver prints them); set before spawning.
  void on_log(std::function<void(const LogLines&)> sink);

 private:
  class Loop;
  void close();
  void post(std::function<void(Loop&)> command);

  std::string id_;
  std::shared_ptr<Completion> completion_;
  std::unique_ptr<Loop> loop_;
  int wake_fd_ = -1;
  std::mutex queue_mutex_;
  std::deque<std::function<void(Loop&)>> queue_;
  std::thread thread_;
  bool stopping_ = false;  // guarded by queue_mutex_
};

}  // namespace ooze::actors
