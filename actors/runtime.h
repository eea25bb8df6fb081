// The actor runtime's entry points: start or join a cluster, spawn actors, find them, kill
// them, reserve placement groups, use the head's key-value store.
//
//   int main(int argc, char** argv) {
//     ooze::actors::run_worker_if_requested();  // first: a worker process serves here
//     ooze::actors::init();                     // one machine: head + node in this process
//     auto counter = ooze::actors::spawn<Counter>({}, 10);
//     int value = counter.call(&Counter::add, 5).get();  // 15
//     ooze::actors::shutdown();                 // kills this driver's actors
//   }
//
// With `address` set ("HOST:PORT" of `ooze start --head`) the driver joins that cluster instead.
// Every actor runs in its own worker process, started from this same program (or
// worker_executable), so the actor classes it registers (actor_class.h) exist there too.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "actors/actor_class.h"
#include "actors/client.h"
#include "actors/errors.h"
#include "actors/future.h"
#include "actors/protocol.h"
#include "actors/resources.h"

namespace ooze::actors {

struct RuntimeOptions {
  std::string address;            // empty: embedded head and node; "HOST:PORT": join that cluster
  std::string token;              // cluster token (default: $OOZE_CLUSTER_TOKEN)
  ResourceSet resources;          // embedded node's resources (empty: detected)
  std::string session_dir;        // empty: a new /tmp/ooze/session_* directory
  std::string worker_executable;  // empty: this program
  bool log_to_driver = true;      // print workers' output lines with their prefix
  std::chrono::milliseconds node_timeout{10000};     // embedded head
  std::chrono::milliseconds client_timeout{5000};    // embedded head
  std::chrono::milliseconds connect_timeout{15000};  // to reach the head
};

// Starts the runtime for this process (a driver). Throws RuntimeError when the cluster cannot
// be reached, ConfigError on bad options. Calling it twice is an error.
void init(RuntimeOptions options = {});
// Kills this driver's actors and placement groups and stops an embedded head and node.
void shutdown();
// For a process that ends right after, from any thread, while others may still be inside the
// runtime (the thread that took a Ctrl-C): does what shutdown() does to the cluster (this
// driver's actors released, the embedded node's workers killed and reaped) but leaves the
// runtime's objects allocated, so that a thread still in a call or a wait is not left with freed
// memory. A shutdown already under way on another thread is waited for.
void shutdown_before_exit();
bool is_initialized();

// The actors this process tracks (it spawned them, or was handed them) that are dead for a
// reason other than kill(): their process exited, crashed or was killed, their constructor
// threw, their node was lost. When a run fails, a death is usually the cause and the first error
// only its echo (a peer's broken collective, a refused connection), and the news of the death
// may still be on its way: with none known yet, this waits up to `settle` for one. Empty when
// the runtime is not started.
std::vector<ActorInfo> dead_actors(std::chrono::milliseconds settle = std::chrono::milliseconds(0));

// When this process was started by a node agent to host an actor, constructs it and serves its
// calls until the process is killed; never returns then. Otherwise returns at once.
void run_worker_if_requested();

// The session directory (logs/ holds every worker's .out and .err).
const std::string& session_dir();
// The endpoint of the head this process talks to ("ipc://..." or "tcp://HOST:PORT").
const std::string& head_endpoint();
// The address collective peers reach this process's node at ($OOZE_NODE_ADDRESS, which the node
// gives its workers), or loopback outside a worker.
std::string node_address();

struct ActorOptions {
  ResourceSet resources;  // e.g. {{"CPU", 1}, {"GPU", 1}}; fractions allowed
  std::string name;       // a named actor can be found with get_actor<T>(name)
  std::string placement_group_id;
  int bundle_index = -1;         // -1: any bundle of the group with room
  int max_restarts = 0;          // restarts after unexpected deaths (the constructor runs again)
  unsigned max_concurrency = 1;  // >1: calls run on that many threads, in no fixed order
  std::map<std::string, std::string> env;
  // Leave CUDA_VISIBLE_DEVICES as the node has it and pass the GPU as OOZE_DEVICE_INDEX.
  bool all_gpus_visible = false;
  std::string label;  // log prefix (default: the class name)
};

namespace detail {
// What this process knows of the actor newest (the handle's own copy dates from its spawn).
ActorInfo newest_known(const ActorInfo& info);
// Lets this process's client call the actor, when this process runs the runtime.
void track_if_running(const ActorInfo& info);
}  // namespace detail

template <class T>
class ActorHandle {
 public:
  ActorHandle() = default;
  explicit ActorHandle(ActorInfo info) : info_(std::move(info)) {}

  // Calls `method`, T's own or one T inherits, with `args` (converted to its parameter types);
  // returns at once. A reference result comes back as a value.
  template <class C, class R, class... Params, class... Args>
  Future<std::decay_t<R>> call(R (C::*method)(Params...), Args&&... args) const {
    return call_impl<std::decay_t<R>, Params...>(method, std::forward<Args>(args)...);
  }
  template <class C, class R, class... Params, class... Args>
  Future<std::decay_t<R>> call(R (C::*method)(Params...) const, Args&&... args) const {
    return call_impl<std::decay_t<R>, Params...>(method, std::forward<Args>(args)...);
  }

  const std::string& id() const { return info_.actor_id; }
  const std::string& label() const { return info_.label; }
  // The actor's newest known state (pid, node, restarts, death reason).
  ActorInfo info() const;
  // Blocks until the actor is alive; throws ActorDiedError if it died, GetTimeoutError.
  void wait_ready(std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;

  // A handle travels as an argument of an actor call, as Ray's do: the process that receives it
  // can call the actor too, and follows its later restarts and death as every client does.
  template <class A>
  void save(A& ar) const {
    ar(detail::newest_known(info_));
  }
  template <class A>
  void load(A& ar) {
    ar(info_);
    detail::track_if_running(info_);
  }

 private:
  template <class R, class... Params, class Method, class... Args>
  Future<R> call_impl(Method method, Args&&... args) const;

  ActorInfo info_;
};

namespace detail {
Client& client();
ActorInfo spawn_actor(const std::string& class_name, const ActorOptions& options,
                      std::string constructor_arguments);
ActorInfo find_actor(const std::string& name);
}  // namespace detail

// Starts an actor of class T (registered with ActorClass<T>) in a new worker process. The
// arguments must match the registered constructor's exactly (after decay). Throws
// PlacementError when no node could ever host it.
template <class T, class... Args>
ActorHandle<T> spawn(const ActorOptions& options, Args&&... args) {
  const ClassEntry& entry = ActorRegistry::instance().by_type(typeid(T));
  using Tuple = std::tuple<std::decay_t<Args>...>;
  if (entry.constructor_arguments != std::type_index(typeid(Tuple))) {
    throw ConfigError("spawn<" + entry.name + "> was given " + type_name(typeid(Tuple)) +
                      " but its registered constructor takes " +
                      type_name(entry.constructor_arguments));
  }
  std::string arguments = to_wire(Tuple(std::forward<Args>(args)...));
  return ActorHandle<T>(detail::spawn_actor(entry.name, options, std::move(arguments)));
}

// The live actor named `name`; throws ooze::Error when there is none or it is not a T.
template <class T>
ActorHandle<T> get_actor(const std::string& name) {
  const ClassEntry& entry = ActorRegistry::instance().by_type(typeid(T));
  ActorInfo info = detail::find_actor(name);
  if (info.class_name != entry.name) {
    throw Error("actor \"" + name + "\" is a " + info.class_name + ", not a " + entry.name);
  }
  return ActorHandle<T>(std::move(info));
}

// Kills the actor's process now (pending calls fail with ActorDiedError). No restart unless
// allow_restart.
void kill_actor(const std::string& actor_id, bool allow_restart = false);
template <class T>
void kill(const ActorHandle<T>& handle, bool allow_restart = false) {
  kill_actor(handle.id(), allow_restart);
}

// The head's key-value store (rendezvous for collective groups).
void kv_put(const std::string& key, const std::string& value);
// Waits up to `timeout` for the key; throws GetTimeoutError.
std::string kv_get(const std::string& key,
                   std::chrono::milliseconds timeout = std::chrono::seconds(60));
// Atomically adds `delta` to the integer at `key` and returns the sum. The integer is kept as 8
// little-endian bytes, as comm::TcpStore keeps it; an unset key (or a value of another size)
// counts as 0.
int64_t kv_add(const std::string& key, int64_t delta);
// Waits up to `timeout` until every key is set; returns the keys still not set then (empty: all
// are). A zero timeout only looks.
std::vector<std::string> kv_wait(const std::vector<std::string>& keys,
                                 std::chrono::milliseconds timeout);

ClusterStatus cluster_status();

// ---- implementation of the templates --------------------------------------------------------

template <class T>
template <class R, class... Params, class Method, class... Args>
Future<R> ActorHandle<T>::call_impl(Method method, Args&&... args) const {
  const std::string& name = registered_method_name<T>(method);
  Payload payload = to_payload(std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...));
  return Future<R>(detail::client().call(info_.actor_id, name, std::move(payload)));
}

template <class T>
ActorInfo ActorHandle<T>::info() const {
  return detail::client().actor_info(info_.actor_id);
}

template <class T>
void ActorHandle<T>::wait_ready(std::chrono::milliseconds timeout) const {
  if (!detail::client().wait_alive(info_.actor_id, timeout)) {
    const ActorInfo dead = info();
    throw ActorDiedError(dead.label, dead.death_reason, dead.actor_id, dead.pid);
  }
}

}  // namespace ooze::actors
