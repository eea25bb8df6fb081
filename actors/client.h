// The client side of the runtime, in the driver and in every worker. Its ZeroMQ sockets (one to
// the head, one per actor called) are used by one thread at a time, under a mutex: a caller
// waiting for a result sends the queued calls and reads the sockets itself, so that the reply
// wakes it directly; an I/O thread does both while no caller waits. Calls are sent in order;
// replies are matched to calls; the head's actor events are applied: a call waiting for an
// actor that is still starting is held until the actor is alive; calls in flight when an actor
// dies or restarts fail with ActorDiedError; calls to a dead actor fail at once.
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
class Client;
struct Completion {
  std::mutex mutex;
  std::condition_variable done;
  uint64_t failed_calls = 0;  // ever finished with an error; a waiter's cue to look for its own
  Client* client = nullptr;   // while open: waiters read its sockets (wait_until_ready)
  int waiting_in_client = 0;  // threads in wait_until_ready that use `client`
};

// One call's outcome, filled by the thread that reads its reply.
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

// Waits until `ready()`, called under completion.mutex, or until `timeout` passed (returns
// false). The waiting thread reads the client's sockets itself when no other thread does, so
// that a reply wakes it directly.
bool wait_until_ready(Completion& completion, const std::function<bool()>& ready,
                      std::chrono::milliseconds timeout);
// Waits until the call finished, or until `timeout` passed (returns false).
bool wait_for_call(const CallState& state, std::chrono::milliseconds timeout);

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
  friend bool wait_until_ready(Completion& completion, const std::function<bool()>& ready,
                               std::chrono::milliseconds timeout);
  using Clock = std::chrono::steady_clock;
  class Loop;
  struct Wait;
  // The longest single wait on the sockets: the loop sends heartbeats between waits.
  static constexpr std::chrono::milliseconds kLongestPoll{100};
  // How long the I/O thread stands aside after a reader left, for the caller's next call.
  static constexpr std::chrono::milliseconds kReaderLinger{2};

  void run_io_thread();
  bool wait_reading(const std::function<bool()>& ready, Clock::time_point deadline);
  void wait_once(std::unique_lock<std::mutex>& lock, Wait& wait, std::chrono::milliseconds timeout);
  void set_reader_active(bool active);
  void publish(std::unique_lock<std::mutex>& lock, bool by_reader);
  void close();
  void wake_pollers();
  void post(std::function<void(Loop&)> command);
  void run_queued();
  bool queue_empty();

  std::string id_;
  std::shared_ptr<Completion> completion_;
  std::mutex loop_mutex_;  // guards loop_'s sockets and state, and the fields up to queue_mutex_
  std::unique_ptr<Loop> loop_;
  int wake_fd_ = -1;  // wakes whoever waits on the sockets: a call queued or finished, close
  std::thread thread_;
  bool reader_active_ = false;  // a caller reads the sockets (written under both mutexes)
  Clock::time_point last_reader_left_;
  std::condition_variable io_thread_wake_;
  std::mutex queue_mutex_;
  std::deque<std::function<void(Loop&)>> queue_;
  int pollers_ = 0;        // threads waiting on the sockets
  bool stopping_ = false;  // written under both mutexes
  bool closed_ = false;    // the loop stopped (guarded by completion_->mutex)
};

}  // namespace ooze::actors
