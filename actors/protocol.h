// The control-plane messages between driver, head, node agents and workers (bodies of
// wire.h messages, keyed by the header's method or event topic).
//
//   node   -> head  register_node, heartbeat, worker_started, worker_exited, worker_log
//   worker -> head  actor_spec (what to construct), actor_ready, actor_failed
//   client -> head  register_client, heartbeat, create_actor, wait_actor, get_actor,
//                   kill_actor, create_placement_group, wait_placement_group,
//                   remove_placement_group, kv_put, kv_get, kv_add, kv_wait, status
//   head -> node    start_worker, kill_worker          (requests the node answers)
//   head -> client  event "actor" (ActorInfo: state changes), event "log" (LogLines)
//   client -> worker  a request whose method is "Class.method", answered by a reply
#pragma once

#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actors/placement.h"
#include "actors/resources.h"

namespace ooze::actors {

namespace method {
constexpr const char* kRegisterNode = "register_node";
constexpr const char* kRegisterClient = "register_client";
constexpr const char* kHeartbeat = "heartbeat";
constexpr const char* kWorkerStarted = "worker_started";
constexpr const char* kWorkerExited = "worker_exited";
constexpr const char* kWorkerLog = "worker_log";
constexpr const char* kActorSpec = "actor_spec";
constexpr const char* kActorReady = "actor_ready";
constexpr const char* kActorFailed = "actor_failed";
constexpr const char* kCreateActor = "create_actor";
constexpr const char* kWaitActor = "wait_actor";
constexpr const char* kGetActor = "get_actor";
constexpr const char* kKillActor = "kill_actor";
constexpr const char* kCreatePlacementGroup = "create_placement_group";
constexpr const char* kWaitPlacementGroup = "wait_placement_group";
constexpr const char* kRemovePlacementGroup = "remove_placement_group";
constexpr const char* kKvPut = "kv_put";
constexpr const char* kKvGet = "kv_get";
constexpr const char* kKvAdd = "kv_add";
constexpr const char* kKvWait = "kv_wait";
constexpr const char* kStatus = "status";
constexpr const char* kStartWorker = "start_worker";
constexpr const char* kKillWorker = "kill_worker";
constexpr const char* kShutdown = "shutdown";
}  // namespace method

namespace topic {
constexpr const char* kActor = "actor";
constexpr const char* kLog = "log";
}  // namespace topic

// The body of a reply whose header says !ok.
struct ErrorReply {
  std::string type;  // "RemoteError" for a method's exception: then `exception` is its type
  std::string message;
  std::string exception;
  template <class A>
  void serialize(A& ar) {
    ar(type, message, exception);
  }
};

template <class A>
void serialize(A& ar, Allocation& allocation) {
  ar(allocation.node_id, allocation.resources, allocation.gpu_ids);
}

// Everything needed to (re)start an actor, kept by the head.
struct ActorSpec {
  std::string actor_id;
  std::string class_name;
  std::string name;              // empty: anonymous
  std::string label;             // log prefix, e.g. "TrainActor rank=1"
  std::string constructor_args;  // cereal bytes of the constructor's argument tuple
  ResourceSet resources;
  std::string placement_group_id;
  int32_t bundle_index = -1;  // -1: any bundle of the group
  int32_t max_restarts = 0;
  uint32_t max_concurrency = 1;
  std::map<std::string, std::string> env;
  std::string executable;         // the program that hosts the actor (the driver's own binary)
  std::string owner_id;           // the client that spawned it: its death takes the actor along
  bool all_gpus_visible = false;  // CUDA_VISIBLE_DEVICES unchanged + OOZE_DEVICE_INDEX
  template <class A>
  void serialize(A& ar) {
    ar(actor_id, class_name, name, label, constructor_args, resources, placement_group_id,
       bundle_index, max_restarts, max_concurrency, env, executable, owner_id, all_gpus_visible);
  }
};

enum class ActorState : uint8_t { kPending = 0, kStarting, kAlive, kRestarting, kDead };
const char* actor_state_name(ActorState state);

// How the death reason of an actor stopped by ooze::actors::kill() begins: a death its owner
// asked for, which drivers do not report as a failure.
inline constexpr char kKilledOnRequest[] = "killed by ooze::actors::kill()";

struct ActorInfo {
  std::string actor_id;
  std::string name;
  std::string class_name;
  std::string label;
  ActorState state = ActorState::kPending;
  std::string node_id;
  std::string endpoint;  // where the worker takes calls (when alive)
  int32_t pid = 0;
  int32_t restarts = 0;
  std::string death_reason;
  std::vector<int32_t> gpu_ids;
  std::string owner_id;
  uint64_t version = 0;  // grows with every change: a client keeps the newest it has seen
  template <class A>
  void serialize(A& ar) {
    ar(actor_id, name, class_name, label, state, node_id, endpoint, pid, restarts, death_reason,
       gpu_ids, owner_id, version);
  }
};

struct RegisterNode {
  std::string node_id;
  std::string address;  // host the node's workers bind on
  ResourceSet resources;
  int32_t pid = 0;
  template <class A>
  void serialize(A& ar) {
    ar(node_id, address, resources, pid);
  }
};

struct RegisterClient {
  std::string client_id;
  int32_t pid = 0;
  bool is_driver = true;  // drivers own the actors they spawn; their death kills them
  template <class A>
  void serialize(A& ar) {
    ar(client_id, pid, is_driver);
  }
};

struct StartWorker {
  ActorSpec spec;
  std::vector<int32_t> gpu_ids;
  int32_t restarts = 0;
  std::string head_address;
  template <class A>
  void serialize(A& ar) {
    ar(spec, gpu_ids, restarts, head_address);
  }
};

struct KillRequest {
  std::string actor_id;
  bool allow_restart = false;
  template <class A>
  void serialize(A& ar) {
    ar(actor_id, allow_restart);
  }
};

struct WorkerEvent {  // worker_started, worker_exited, actor_ready, actor_failed, kill_worker
  std::string actor_id;
  int32_t pid = 0;
  std::string endpoint;  // actor_ready
  std::string reason;    // exited / failed / kill: why
  template <class A>
  void serialize(A& ar) {
    ar(actor_id, pid, endpoint, reason);
  }
};

struct LogLines {
  std::string actor_id;
  std::string owner_id;
  std::string prefix;  // "(TrainActor rank=1 pid=1234)"
  std::vector<std::string> lines;
  bool is_stderr = false;
  template <class A>
  void serialize(A& ar) {
    ar(actor_id, owner_id, prefix, lines, is_stderr);
  }
};

struct PlacementGroupSpec {
  std::string name;
  std::vector<ResourceSet> bundles;
  std::string strategy;  // PACK, SPREAD, STRICT_PACK, STRICT_SPREAD
  std::string owner_id;
  template <class A>
  void serialize(A& ar) {
    ar(name, bundles, strategy, owner_id);
  }
};

enum class PlacementGroupState : uint8_t { kPending = 0, kCreated, kRemoved };
const char* placement_group_state_name(PlacementGroupState state);

struct BundleInfo {
  int32_t index = 0;  // in the order the user asked for
  std::string node_id;
  std::string node_address;
  std::vector<int32_t> gpu_ids;
  ResourceSet resources;
  template <class A>
  void serialize(A& ar) {
    ar(index, node_id, node_address, gpu_ids, resources);
  }
};

struct PlacementGroupInfo {
  std::string id;
  std::string name;
  std::string strategy;
  PlacementGroupState state = PlacementGroupState::kPending;
  std::vector<BundleInfo> bundles;  // created: sorted by (node address, GPU id)
  std::string reason;               // pending or infeasible: what is missing
  template <class A>
  void serialize(A& ar) {
    ar(id, name, strategy, state, bundles, reason);
  }
};

struct NodeInfo {
  std::string node_id;
  std::string address;
  ResourceSet total;
  ResourceSet available;
  bool alive = true;
  int32_t pid = 0;
  template <class A>
  void serialize(A& ar) {
    ar(node_id, address, total, available, alive, pid);
  }
};

struct ClusterStatus {
  std::vector<NodeInfo> nodes;
  std::vector<ActorInfo> actors;
  std::vector<PlacementGroupInfo> placement_groups;
  template <class A>
  void serialize(A& ar) {
    ar(nodes, actors, placement_groups);
  }
};

// The tables as `ooze status` prints them.
std::string format_status(const ClusterStatus& status);

struct WaitRequest {  // wait_actor, wait_placement_group, kv_get: answered when ready
  std::string key;    // actor id, placement group id or kv key
  int64_t timeout_ms = 0;
  template <class A>
  void serialize(A& ar) {
    ar(key, timeout_ms);
  }
};

struct KeyValue {
  std::string key;
  std::string value;
  template <class A>
  void serialize(A& ar) {
    ar(key, value);
  }
};

// kv_add: adds `delta` to the integer at `key`, kept as 8 little-endian bytes as comm::TcpStore
// keeps it (unset, or a value of another size, counts as 0; the sum wraps). Answered with the
// sum (int64_t).
struct KvAdd {
  std::string key;
  int64_t delta = 0;
  template <class A>
  void serialize(A& ar) {
    ar(key, delta);
  }
};

// kv_wait: answered with the keys that are not set (std::vector<std::string>): at once when
// every key is set or timeout_ms <= 0, else once every key is set (empty) or at the deadline.
struct KvWait {
  std::vector<std::string> keys;
  int64_t timeout_ms = 0;
  template <class A>
  void serialize(A& ar) {
    ar(keys, timeout_ms);
  }
};

}  // namespace ooze::actors
