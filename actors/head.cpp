#include "actors/head.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "actors/errors.h"
#include "actors/protocol.h"
#include "actors/wire.h"
#include "core/logging.h"

namespace ooze::actors {
namespace {

using Clock = std::chrono::steady_clock;

struct NodeRecord {
  NodeCapacity capacity;
  std::string routing_id;
  int32_t pid = 0;
  Clock::time_point last_seen;
};

struct ClientRecord {
  std::string routing_id;
  bool is_driver = false;
  int32_t pid = 0;
  Clock::time_point last_seen;
};

struct ActorRecord {
  ActorSpec spec;
  ActorInfo info;
  std::optional<Allocation> allocation;  // on its node, or inside its bundle
  int32_t bundle = -1;                   // the bundle it runs in
  bool killed = false;                   // by kill(): never restarted
};

struct PlacementGroupRecord {
  PlacementGroupSpec spec;
  PlacementGroupInfo info;
  std::vector<Allocation> allocations;  // per bundle, request order (on the nodes)
  std::vector<NodeCapacity> bundles;    // what is left of each bundle for actors
};

// A bundle seen as a small node for the actors placed in it: its GPU ids are indices into the
// `gpus` devices the bundle holds (a fractional GPU bundle holds a fraction of one).
NodeCapacity bundle_capacity(const std::string& node_id, const std::string& address,
                             const ResourceSet& bundle, size_t gpus) {
  NodeCapacity capacity;
  capacity.node_id = node_id;
  capacity.address = address;
  capacity.total = bundle;
  capacity.available = bundle;
  double amount = bundle.count("GPU") ? bundle.at("GPU") : 0.0;
  if (gpus == 0 && amount > 0) gpus = static_cast<size_t>(std::ceil(amount));
  capacity.gpu_free.assign(gpus, amount < 1.0 ? amount : 1.0);
  return capacity;
}

// A waiter's deadline; absurd timeouts from the wire are clamped to a day.
Clock::time_point deadline_after(int64_t timeout_ms) {
  return Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms, 0, 86400000));
}

struct Waiter {
  std::string routing_id;
  uint64_t request_id = 0;
  Clock::time_point deadline;
};

}  // namespace

class Head::Loop {
 public:
  Loop(HeadOptions options, std::string* endpoint)
      : options_(std::move(options)),
        socket_(bind_socket(zmq::socket_type::router, options_.endpoint, options_.security,
                            kMaxControlPartBytes, endpoint)),
        endpoint_(*endpoint) {}

  void run(const std::atomic<bool>& stopping) {
    auto last_check = Clock::now();
    while (!stopping.load()) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      for (int drained = 0; drained < 1000; ++drained) {
        std::string routing_id, rejected;
        auto message = receive_message(socket_, &routing_id, &rejected);
        if (!message) {
          if (rejected.empty()) break;
          OOZE_LOG(WARN) << "head dropped a malformed message: " << rejected;
          continue;
        }
        handle(routing_id, *message);
      }
      if (Clock::now() - last_check > std::chrono::milliseconds(100)) {
        last_check = Clock::now();
        check_liveness();
        expire_waiters();
      }
    }
  }

 private:
  // ---- sending ----------------------------------------------------------------------------

  void send(const std::string& routing_id, MessageKind kind, uint64_t id, const std::string& method,
            bool ok, std::string body) {
    Message message;
    message.header.kind = kind;
    message.header.id = id;
    message.header.method = method;
    message.header.ok = ok;
    message.body = std::move(body);
    try {
      send_message(socket_, std::move(message), &routing_id);
    } catch (const zmq::error_t&) {
      // The peer is gone (ROUTER_MANDATORY): its liveness check will catch up with it.
    }
  }
  template <class T>
  void reply(const std::string& routing_id, uint64_t id, const T& value) {
    send(routing_id, MessageKind::kReply, id, "", true, to_wire(value));
  }
  void reply_error(const std::string& routing_id, uint64_t id, const std::string& type,
                   const std::string& message) {
    send(routing_id, MessageKind::kReply, id, "", false, to_wire(ErrorReply{type, message, ""}));
  }
  template <class T>
  void event(const std::string& routing_id, const char* topic, const T& value) {
    send(routing_id, MessageKind::kEvent, 0, topic, true, to_wire(value));
  }

  // ---- dispatch ---------------------------------------------------------------------------

  void handle(const std::string& from, Message& message) {
    if (message.header.kind != MessageKind::kRequest) return;  // the head asks nobody anything
    const std::string& method = message.header.method;
    uint64_t id = message.header.id;
    try {
      if (method == method::kHeartbeat) {
        touch(from);
        reply(from, id, std::string());
      } else if (method == method::kRegisterNode) {
        register_node(from, id, decode<RegisterNode>(message));
      } else if (method == method::kRegisterClient) {
        register_client(from, id, decode<RegisterClient>(message));
      } else if (method == method::kCreateActor) {
        create_actor(from, id, decode<ActorSpec>(message));
      } else if (method == method::kGetActor) {
        get_actor(from, id, decode<std::string>(message));
      } else if (method == method::kKillActor) {
        kill_actor(from, id, decode<KillRequest>(message));
      } else if (method == method::kActorSpec) {
        actor_spec(from, id, decode<std::string>(message));
      } else if (method == method::kWorkerStarted) {
        worker_started(decode<WorkerEvent>(message));
        reply(from, id, std::string());
      } else if (method == method::kActorReady) {
        actor_ready(decode<WorkerEvent>(message));
        reply(from, id, std::string());
      } else if (method == method::kActorFailed) {
        actor_failed(decode<WorkerEvent>(message));
        reply(from, id, std::string());
      } else if (method == method::kWorkerExited) {
        worker_exited(decode<WorkerEvent>(message));
        reply(from, id, std::string());
      } else if (method == method::kWorkerLog) {
        forward_log(decode<LogLines>(message));
        reply(from, id, std::string());
      } else if (method == method::kCreatePlacementGroup) {
        create_placement_group(from, id, decode<PlacementGroupSpec>(message));
      } else if (method == method::kWaitPlacementGroup) {
        wait_placement_group(from, id, decode<WaitRequest>(message));
      } else if (method == method::kRemovePlacementGroup) {
        remove_placement_group(decode<std::string>(message));
        reply(from, id, std::string());
      } else if (method == method::kKvPut) {
        kv_put(decode<KeyValue>(message));
        reply(from, id, std::string());
      } else if (method == method::kKvGet) {
        kv_get(from, id, decode<WaitRequest>(message));
      } else if (method == method::kShutdown) {
        clients_.erase(from);
        release_owned_by(from, "its driver shut down");
        reply(from, id, std::string());
      } else if (method == method::kStatus) {
        reply(from, id, status());
      } else {
        reply_error(from, id, "UnknownMethod", "the head has no method \"" + method + "\"");
      }
    } catch (const WireFormatError& error) {
      reply_error(from, id, "WireFormatError", "malformed " + method + ": " + error.what());
    } catch (const PlacementError& error) {
      reply_error(from, id, "PlacementError", error.what());
    } catch (const std::exception& error) {
      reply_error(from, id, "Error", error.what());
    }
  }

  template <class T>
  static T decode(const Message& message) {
    T value{};
    from_wire(message.body, value);
    return value;
  }

  void touch(const std::string& routing_id) {
    auto now = Clock::now();
    for (auto& [id, node] : nodes_) {
      if (node.routing_id == routing_id) node.last_seen = now;
    }
    auto client = clients_.find(routing_id);
    if (client != clients_.end()) client->second.last_seen = now;
  }

  // ---- nodes and clients ------------------------------------------------------------------

  void register_node(const std::string& from, uint64_t id, const RegisterNode& request) {
    NodeRecord record;
    record.capacity = NodeCapacity::make(request.node_id, request.address, request.resources);
    record.routing_id = from;
    record.pid = request.pid;
    record.last_seen = Clock::now();
    nodes_[request.node_id] = std::move(record);
    OOZE_LOG(INFO) << "node " << request.node_id << " joined from " << request.address << " with "
                   << format_resources(request.resources);
    reply(from, id, std::string());
    retry_pending();
  }

  void register_client(const std::string& from, uint64_t id, const RegisterClient& request) {
    ClientRecord& client = clients_[from];
    client.routing_id = from;
    client.is_driver = request.is_driver;
    client.pid = request.pid;
    client.last_seen = Clock::now();
    reply(from, id, std::string());
  }

  void check_liveness() {
    auto now = Clock::now();
    for (auto& [node_id, node] : nodes_) {
      if (node.capacity.alive && now - node.last_seen > options_.node_timeout) {
        node.capacity.alive = false;
        OOZE_LOG(WARN) << "node " << node_id << " (" << node.capacity.address
                       << ") stopped heart-beating; its actors are dead";
        for (auto& [actor_id, actor] : actors_) {
          if (actor.info.node_id == node_id && actor.info.state != ActorState::kDead) {
            mark_dead(actor, "its node " + node_id + " (" + node.capacity.address +
                                 ") stopped heart-beating");
          }
        }
      }
    }
    std::vector<std::string> gone;
    for (auto& [routing_id, client] : clients_) {
      if (now - client.last_seen > options_.client_timeout) gone.push_back(routing_id);
    }
    for (const std::string& routing_id : gone) {
      clients_.erase(routing_id);
      release_owned_by(routing_id, "its owner stopped heart-beating (exited or was killed)");
    }
  }

  // Actors and placement groups owned by a client that is gone go with it.
  void release_owned_by(const std::string& owner, const std::string& reason) {
    for (auto& [actor_id, actor] : actors_) {
      if (actor.spec.owner_id == owner && actor.info.state != ActorState::kDead) {
        actor.killed = true;
        kill_worker(actor, reason);
        mark_dead(actor, reason, /*expected=*/true);
      }
    }
    std::vector<std::string> groups;
    for (auto& [group_id, group] : groups_) {
      if (group.spec.owner_id == owner) groups.push_back(group_id);
    }
    for (const std::string& group_id : groups) remove_placement_group(group_id);
  }

  // ---- actors -----------------------------------------------------------------------------

  void create_actor(const std::string& from, uint64_t id, ActorSpec spec) {
    if (!spec.name.empty()) {
      for (auto& [actor_id, actor] : actors_) {
        if (actor.spec.name == spec.name && actor.info.state != ActorState::kDead) {
          throw Error("an actor named \"" + spec.name + "\" already exists (" + actor_id + ")");
        }
      }
    }
    spec.actor_id = random_id();
    if (spec.owner_id.empty()) spec.owner_id = from;
    ActorRecord record;
    record.spec = spec;
    record.info.actor_id = spec.actor_id;
    record.info.name = spec.name;
    record.info.class_name = spec.class_name;
    record.info.label = spec.label;
    record.info.owner_id = spec.owner_id;
    if (!spec.placement_group_id.empty()) {
      auto group = groups_.find(spec.placement_group_id);
      if (group == groups_.end() || group->second.info.state == PlacementGroupState::kRemoved) {
        throw PlacementError("placement group " + spec.placement_group_id +
                             " does not exist or was removed");
      }
      int32_t bundles = static_cast<int32_t>(group->second.spec.bundles.size());
      if (spec.bundle_index >= bundles) {
        throw PlacementError("bundle index " + std::to_string(spec.bundle_index) +
                             " is out of range: placement group " + spec.placement_group_id +
                             " has " + std::to_string(bundles) + " bundles");
      }
      for (int32_t b = 0; b < bundles; ++b) {
        if ((spec.bundle_index < 0 || b == spec.bundle_index) &&
            fits_ever(bundle_capacity("", "", group->second.spec.bundles[b], 0), spec.resources)) {
          break;
        }
        if (b + 1 == bundles) {
          throw PlacementError("actor " + spec.class_name + " needs " +
                               format_resources(spec.resources) +
                               " which no bundle it may use of placement group " +
                               spec.placement_group_id + " holds");
        }
      }
    } else {
      std::vector<NodeCapacity> capacities = alive_capacities();
      PlacementDecision decision = place_actor(capacities, spec.resources, "");
      if (decision.outcome == PlacementOutcome::kNever) {
        throw PlacementError("actor " + spec.class_name +
                             " can never be placed: " + decision.reason);
      }
    }
    std::string actor_id = spec.actor_id;
    actors_[actor_id] = std::move(record);
    reply(from, id, actors_[actor_id].info);
    schedule(actors_[actor_id]);
  }

  // A placement decision mutated copies of the alive nodes: make it real.
  void commit(const std::vector<NodeCapacity>& capacities) {
    for (const NodeCapacity& capacity : capacities) nodes_.at(capacity.node_id).capacity = capacity;
  }

  std::vector<NodeCapacity> alive_capacities() const {
    std::vector<NodeCapacity> capacities;
    for (const auto& [node_id, node] : nodes_) {
      if (node.capacity.alive) capacities.push_back(node.capacity);
    }
    return capacities;
  }

  // Tries to give a pending actor its resources and a node; leaves it pending otherwise.
  void schedule(ActorRecord& actor) {
    if (actor.info.state != ActorState::kPending) return;
    if (!actor.spec.placement_group_id.empty()) {
      auto& group = groups_.at(actor.spec.placement_group_id);
      if (group.info.state != PlacementGroupState::kCreated) return;  // waits for the group
      for (size_t b = 0; b < group.bundles.size(); ++b) {
        if (actor.spec.bundle_index >= 0 && static_cast<int32_t>(b) != actor.spec.bundle_index) {
          continue;
        }
        std::optional<Allocation> allocation = try_allocate(group.bundles[b], actor.spec.resources);
        if (!allocation) continue;
        // Bundle-local GPU ids -> the node's GPU ids the bundle holds.
        std::vector<int> node_gpus;
        for (int local : allocation->gpu_ids)
          node_gpus.push_back(group.allocations[b].gpu_ids.at(local));
        allocation->gpu_ids = node_gpus;
        allocation->node_id = group.allocations[b].node_id;
        actor.allocation = allocation;
        actor.bundle = static_cast<int32_t>(b);
        start_on_node(actor);
        return;
      }
      return;
    }
    std::vector<NodeCapacity> capacities = alive_capacities();
    PlacementDecision decision = place_actor(capacities, actor.spec.resources, "");
    if (decision.outcome != PlacementOutcome::kPlaced) return;
    commit(capacities);
    actor.allocation = decision.allocations.at(0);
    start_on_node(actor);
  }

  void start_on_node(ActorRecord& actor) {
    actor.info.node_id = actor.allocation->node_id;
    actor.info.gpu_ids.assign(actor.allocation->gpu_ids.begin(), actor.allocation->gpu_ids.end());
    actor.info.state = ActorState::kStarting;
    StartWorker start;
    start.spec = actor.spec;
    start.gpu_ids = actor.info.gpu_ids;
    start.restarts = actor.info.restarts;
    start.head_address = endpoint_;
    event(nodes_.at(actor.info.node_id).routing_id, method::kStartWorker, start);
    broadcast(actor.info);
  }

  void free_resources(ActorRecord& actor) {
    if (!actor.allocation) return;
    if (actor.bundle >= 0) {
      auto group = groups_.find(actor.spec.placement_group_id);
      if (group != groups_.end() && group->second.info.state == PlacementGroupState::kCreated) {
        Allocation local = *actor.allocation;
        const auto& bundle_gpus = group->second.allocations[actor.bundle].gpu_ids;
        local.gpu_ids.clear();
        for (int gpu : actor.allocation->gpu_ids) {
          local.gpu_ids.push_back(static_cast<int>(
              std::find(bundle_gpus.begin(), bundle_gpus.end(), gpu) - bundle_gpus.begin()));
        }
        release(group->second.bundles[actor.bundle], local);
      }
    } else {
      auto node = nodes_.find(actor.allocation->node_id);
      if (node != nodes_.end()) release(node->second.capacity, *actor.allocation);
    }
    actor.allocation.reset();
    actor.bundle = -1;
  }

  // `expected`: the owner asked for it (shutdown, removal); not worth a log line.
  void mark_dead(ActorRecord& actor, const std::string& reason, bool expected = false) {
    if (actor.info.state == ActorState::kDead) return;
    actor.info.state = ActorState::kDead;
    actor.info.death_reason = reason;
    actor.info.endpoint.clear();
    free_resources(actor);
    broadcast(actor.info);
    if (!expected) {
      OOZE_LOG(INFO) << "actor " << actor.spec.label << " (" << actor.spec.actor_id
                     << ") is dead: " << reason;
    }
    // Actors this actor spawned go with it.
    release_owned_by(actor.spec.actor_id, "its owner actor " + actor.spec.label + " died");
    retry_pending();
  }

  void kill_worker(const ActorRecord& actor, const std::string& reason) {
    auto node = nodes_.find(actor.info.node_id);
    if (node == nodes_.end() || !node->second.capacity.alive) return;
    WorkerEvent kill;
    kill.actor_id = actor.spec.actor_id;
    kill.pid = actor.info.pid;
    kill.reason = reason;
    event(node->second.routing_id, method::kKillWorker, kill);
  }

  void get_actor(const std::string& from, uint64_t id, const std::string& name) {
    for (auto& [actor_id, actor] : actors_) {
      if ((actor.spec.name == name || actor_id == name) &&
          (actor.info.state != ActorState::kDead || actor_id == name)) {
        reply(from, id, actor.info);
        return;
      }
    }
    reply_error(from, id, "NotFound", "no live actor named \"" + name + "\"");
  }

  void kill_actor(const std::string& from, uint64_t id, const KillRequest& request) {
    auto actor = actors_.find(request.actor_id);
    if (actor == actors_.end()) {
      reply_error(from, id, "NotFound", "no actor " + request.actor_id);
      return;
    }
    ActorRecord& record = actor->second;
    if (!request.allow_restart) record.killed = true;
    if (record.info.state == ActorState::kPending) {
      mark_dead(record, "killed by ooze::actors::kill() before it started");
    } else if (record.info.state != ActorState::kDead) {
      kill_worker(record, "kill");
    }
    reply(from, id, std::string());
  }

  void actor_spec(const std::string& from, uint64_t id, const std::string& actor_id) {
    auto actor = actors_.find(actor_id);
    if (actor == actors_.end()) {
      reply_error(from, id, "NotFound", "no actor " + actor_id);
      return;
    }
    reply(from, id, actor->second.spec);
  }

  void worker_started(const WorkerEvent& started) {
    auto actor = actors_.find(started.actor_id);
    if (actor == actors_.end()) return;
    actor->second.info.pid = started.pid;
  }

  void actor_ready(const WorkerEvent& ready) {
    auto actor = actors_.find(ready.actor_id);
    if (actor == actors_.end() || actor->second.info.state == ActorState::kDead) return;
    actor->second.info.state = ActorState::kAlive;
    actor->second.info.endpoint = ready.endpoint;
    actor->second.info.pid = ready.pid;
    broadcast(actor->second.info);
  }

  void actor_failed(const WorkerEvent& failed) {
    auto actor = actors_.find(failed.actor_id);
    if (actor == actors_.end()) return;
    actor->second.killed = true;  // a constructor that throws would throw again
    mark_dead(actor->second, failed.reason);
  }

  void worker_exited(const WorkerEvent& exited) {
    auto found = actors_.find(exited.actor_id);
    if (found == actors_.end()) return;
    ActorRecord& actor = found->second;
    if (actor.info.state == ActorState::kDead) return;
    if (actor.info.pid != 0 && exited.pid != 0 && actor.info.pid != exited.pid) return;  // stale
    std::string reason = actor.killed ? "killed by ooze::actors::kill()" : exited.reason;
    if (!actor.killed && actor.info.restarts < actor.spec.max_restarts) {
      actor.info.restarts += 1;
      actor.info.state = ActorState::kRestarting;
      actor.info.endpoint.clear();
      actor.info.death_reason = exited.reason;
      OOZE_LOG(INFO) << "restarting actor " << actor.spec.label << " (" << exited.reason
                     << "), restart " << actor.info.restarts << " of " << actor.spec.max_restarts;
      broadcast(actor.info);
      StartWorker start;
      start.spec = actor.spec;
      start.gpu_ids = actor.info.gpu_ids;
      start.restarts = actor.info.restarts;
      start.head_address = endpoint_;
      actor.info.pid = 0;
      event(nodes_.at(actor.info.node_id).routing_id, method::kStartWorker, start);
      return;
    }
    mark_dead(actor, reason);
  }

  void forward_log(const LogLines& lines) {
    // To the driver that owns the actor, or up the chain of owners to one.
    std::string owner = lines.owner_id;
    for (int hops = 0; hops < 16; ++hops) {
      auto client = clients_.find(owner);
      if (client != clients_.end() && client->second.is_driver) {
        event(owner, topic::kLog, lines);
        return;
      }
      auto actor = actors_.find(owner);
      if (actor == actors_.end()) return;
      owner = actor->second.spec.owner_id;
    }
  }

  void broadcast(ActorInfo& info) {
    info.version += 1;
    for (const auto& [routing_id, client] : clients_) event(routing_id, topic::kActor, info);
  }

  // ---- placement groups -------------------------------------------------------------------

  void create_placement_group(const std::string& from, uint64_t id, PlacementGroupSpec spec) {
    PlacementStrategy strategy = parse_placement_strategy(spec.strategy);
    if (spec.bundles.empty()) throw PlacementError("a placement group needs at least one bundle");
    if (spec.owner_id.empty()) spec.owner_id = from;
    PlacementGroupRecord record;
    record.spec = spec;
    record.info.id = random_id();
    record.info.name = spec.name;
    record.info.strategy = placement_strategy_name(strategy);
    std::vector<NodeCapacity> capacities = alive_capacities();
    for (NodeCapacity& capacity : capacities)
      capacity = NodeCapacity::make(capacity.node_id, capacity.address, capacity.total);
    PlacementDecision empty_cluster = place_bundles(capacities, spec.bundles, strategy);
    if (empty_cluster.outcome == PlacementOutcome::kNever) {
      throw PlacementError("placement group can never be created: " + empty_cluster.reason);
    }
    std::string group_id = record.info.id;
    groups_[group_id] = std::move(record);
    try_create(groups_[group_id]);
    reply(from, id, groups_[group_id].info);
  }

  void try_create(PlacementGroupRecord& group) {
    if (group.info.state != PlacementGroupState::kPending) return;
    std::vector<NodeCapacity> capacities = alive_capacities();
    PlacementDecision decision = place_bundles(capacities, group.spec.bundles,
                                               parse_placement_strategy(group.spec.strategy));
    if (decision.outcome != PlacementOutcome::kPlaced) {
      group.info.reason = decision.reason;
      return;
    }
    commit(capacities);
    group.allocations = decision.allocations;
    for (size_t b = 0; b < group.allocations.size(); ++b) {
      const std::string& node_id = group.allocations[b].node_id;
      group.bundles.push_back(bundle_capacity(node_id, nodes_.at(node_id).capacity.address,
                                              group.spec.bundles[b],
                                              group.allocations[b].gpu_ids.size()));
    }
    group.info.state = PlacementGroupState::kCreated;
    group.info.reason.clear();
    std::map<std::string, std::string> addresses;
    for (const auto& [node_id, node] : nodes_) addresses[node_id] = node.capacity.address;
    group.info.bundles.clear();
    for (size_t index : bundle_report_order(group.allocations, addresses)) {
      BundleInfo bundle;
      bundle.index = static_cast<int32_t>(index);
      bundle.node_id = group.allocations[index].node_id;
      bundle.node_address = addresses[bundle.node_id];
      bundle.gpu_ids.assign(group.allocations[index].gpu_ids.begin(),
                            group.allocations[index].gpu_ids.end());
      bundle.resources = group.spec.bundles[index];
      group.info.bundles.push_back(bundle);
    }
    answer_waiters(group_waiters_, group.info.id, group.info);
    for (auto& [actor_id, actor] : actors_) {
      if (actor.spec.placement_group_id == group.info.id) schedule(actor);
    }
  }

  void wait_placement_group(const std::string& from, uint64_t id, const WaitRequest& request) {
    auto group = groups_.find(request.key);
    if (group == groups_.end()) {
      reply_error(from, id, "PlacementError", "no placement group " + request.key);
      return;
    }
    if (group->second.info.state != PlacementGroupState::kPending) {
      reply(from, id, group->second.info);
      return;
    }
    group_waiters_[request.key].push_back({from, id, deadline_after(request.timeout_ms)});
  }

  void remove_placement_group(const std::string& group_id) {
    auto found = groups_.find(group_id);
    if (found == groups_.end()) return;
    PlacementGroupRecord& group = found->second;
    for (auto& [actor_id, actor] : actors_) {
      if (actor.spec.placement_group_id == group_id && actor.info.state != ActorState::kDead) {
        actor.killed = true;
        kill_worker(actor, "placement group removed");
        mark_dead(actor, "its placement group was removed", /*expected=*/true);
      }
    }
    if (group.info.state == PlacementGroupState::kCreated) {
      for (const Allocation& allocation : group.allocations) {
        auto node = nodes_.find(allocation.node_id);
        if (node != nodes_.end()) release(node->second.capacity, allocation);
      }
    }
    group.info.state = PlacementGroupState::kRemoved;
    answer_waiters(group_waiters_, group_id, group.info);
    groups_.erase(found);
    retry_pending();
  }

  // Resources were freed or added: pending groups first (in creation order), then actors.
  void retry_pending() {
    for (auto& [group_id, group] : groups_) try_create(group);
    for (auto& [actor_id, actor] : actors_) schedule(actor);
  }

  // ---- key-value store --------------------------------------------------------------------

  void kv_put(const KeyValue& entry) {
    kv_[entry.key] = entry.value;
    answer_waiters(kv_waiters_, entry.key, entry);
  }

  void kv_get(const std::string& from, uint64_t id, const WaitRequest& request) {
    auto found = kv_.find(request.key);
    if (found != kv_.end()) {
      reply(from, id, KeyValue{found->first, found->second});
    } else if (request.timeout_ms <= 0) {
      reply_error(from, id, "NotFound", "no key \"" + request.key + "\"");
    } else {
      kv_waiters_[request.key].push_back({from, id, deadline_after(request.timeout_ms)});
    }
  }

  template <class T>
  void answer_waiters(std::map<std::string, std::vector<Waiter>>& waiters, const std::string& key,
                      const T& value) {
    auto found = waiters.find(key);
    if (found == waiters.end()) return;
    for (const Waiter& waiter : found->second) reply(waiter.routing_id, waiter.request_id, value);
    waiters.erase(found);
  }

  void expire_waiters() {
    auto now = Clock::now();
    for (auto* waiters : {&group_waiters_, &kv_waiters_}) {
      for (auto entry = waiters->begin(); entry != waiters->end();) {
        auto& list = entry->second;
        for (auto waiter = list.begin(); waiter != list.end();) {
          if (waiter->deadline <= now) {
            std::string what = waiters == &kv_waiters_ ? "key \"" + entry->first + "\""
                                                       : "placement group " + entry->first;
            std::string reason = waiters == &group_waiters_ && groups_.count(entry->first)
                                     ? ": " + groups_.at(entry->first).info.reason
                                     : "";
            reply_error(waiter->routing_id, waiter->request_id, "Timeout",
                        "timed out waiting for " + what + reason);
            waiter = list.erase(waiter);
          } else {
            ++waiter;
          }
        }
        entry = list.empty() ? waiters->erase(entry) : std::next(entry);
      }
    }
  }

  ClusterStatus status() const {
    ClusterStatus status;
    for (const auto& [node_id, node] : nodes_) {
      status.nodes.push_back({node_id, node.capacity.address, node.capacity.total,
                              node.capacity.available, node.capacity.alive, node.pid});
    }
    for (const auto& [actor_id, actor] : actors_) status.actors.push_back(actor.info);
    for (const auto& [group_id, group] : groups_) status.placement_groups.push_back(group.info);
    return status;
  }

  HeadOptions options_;
  zmq::socket_t socket_;
  std::string endpoint_;
  std::map<std::string, NodeRecord> nodes_;
  std::map<std::string, ClientRecord> clients_;  // by routing id (= client id)
  std::map<std::string, ActorRecord> actors_;
  std::map<std::string, PlacementGroupRecord> groups_;
  std::map<std::string, std::string> kv_;
  std::map<std::string, std::vector<Waiter>> group_waiters_;
  std::map<std::string, std::vector<Waiter>> kv_waiters_;
};

Head::Head(HeadOptions options) : loop_(std::make_unique<Loop>(std::move(options), &endpoint_)) {
  thread_ = std::thread([this] { loop_->run(stopping_); });
}

Head::~Head() { stop(); }

void Head::wait() {
  if (thread_.joinable()) thread_.join();
}

void Head::stop() {
  stopping_ = true;
  wait();
}

}  // namespace ooze::actors
