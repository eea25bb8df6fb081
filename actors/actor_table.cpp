#include "actors/actor_table.h"

#include "actors/errors.h"
#include "actors/placement.h"
#include "actors/transport.h"
#include "core/logging.h"

namespace ooze::actors {

ActorTable::ActorTable(NodeTable& nodes, PlacementGroupTable& groups, HeadOutbox& outbox,
                       std::string head_endpoint)
    : nodes_(nodes), groups_(groups), outbox_(outbox), head_endpoint_(std::move(head_endpoint)) {}

void ActorTable::create(const std::string& from, uint64_t id, ActorSpec spec) {
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
    groups_.check_could_ever_host(spec);
  } else {
    std::vector<NodeCapacity> capacities = nodes_.alive_capacities();
    PlacementDecision decision = place_actor(capacities, spec.resources, "");
    if (decision.outcome == PlacementOutcome::kNever) {
      throw PlacementError("actor " + spec.class_name + " can never be placed: " + decision.reason);
    }
  }
  std::string actor_id = spec.actor_id;
  actors_[actor_id] = std::move(record);
  outbox_.reply(from, id, actors_[actor_id].info);
  schedule(actors_[actor_id]);
}

void ActorTable::get(const std::string& from, uint64_t id, const std::string& name) {
  for (auto& [actor_id, actor] : actors_) {
    if ((actor.spec.name == name || actor_id == name) &&
        (actor.info.state != ActorState::kDead || actor_id == name)) {
      outbox_.reply(from, id, actor.info);
      return;
    }
  }
  outbox_.reply_error(from, id, "NotFound", "no live actor named \"" + name + "\"");
}

void ActorTable::kill(const std::string& from, uint64_t id, const KillRequest& request) {
  auto actor = actors_.find(request.actor_id);
  if (actor == actors_.end()) {
    outbox_.reply_error(from, id, "NotFound", "no actor " + request.actor_id);
    return;
  }
  ActorRecord& record = actor->second;
  if (!request.allow_restart) record.killed = true;
  if (record.info.state == ActorState::kPending) {
    mark_dead(record, std::string(kKilledOnRequest) + " before it started");
  } else if (record.info.state != ActorState::kDead) {
    kill_worker(record, "kill");
  }
  outbox_.reply(from, id, std::string());
}

void ActorTable::spec(const std::string& from, uint64_t id, const std::string& actor_id) {
  auto actor = actors_.find(actor_id);
  if (actor == actors_.end()) {
    outbox_.reply_error(from, id, "NotFound", "no actor " + actor_id);
    return;
  }
  outbox_.reply(from, id, actor->second.spec);
}

void ActorTable::worker_started(const WorkerEvent& started) {
  auto actor = actors_.find(started.actor_id);
  if (actor == actors_.end()) return;
  actor->second.info.pid = started.pid;
}

void ActorTable::actor_ready(const WorkerEvent& ready) {
  auto actor = actors_.find(ready.actor_id);
  if (actor == actors_.end() || actor->second.info.state == ActorState::kDead) return;
  actor->second.info.state = ActorState::kAlive;
  actor->second.info.endpoint = ready.endpoint;
  actor->second.info.pid = ready.pid;
  broadcast(actor->second.info);
}

void ActorTable::actor_failed(const WorkerEvent& failed) {
  auto actor = actors_.find(failed.actor_id);
  if (actor == actors_.end()) return;
  actor->second.killed = true;  // a constructor that throws would throw again
  mark_dead(actor->second, failed.reason);
}

void ActorTable::worker_exited(const WorkerEvent& exited) {
  auto found = actors_.find(exited.actor_id);
  if (found == actors_.end()) return;
  ActorRecord& actor = found->second;
  if (actor.info.state == ActorState::kDead) return;
  if (actor.info.pid != 0 && exited.pid != 0 && actor.info.pid != exited.pid) return;  // stale
  std::string reason = actor.killed ? kKilledOnRequest : exited.reason;
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
    start.head_address = head_endpoint_;
    actor.info.pid = 0;
    outbox_.event(nodes_.at(actor.info.node_id).routing_id, method::kStartWorker, start);
    return;
  }
  mark_dead(actor, reason);
}

void ActorTable::schedule_pending() {
  for (auto& [actor_id, actor] : actors_) schedule(actor);
}

void ActorTable::schedule_in_group(const std::string& group_id) {
  for (auto& [actor_id, actor] : actors_) {
    if (actor.spec.placement_group_id == group_id) schedule(actor);
  }
}

void ActorTable::kill_owned_by(const std::string& owner, const std::string& reason) {
  for (auto& [actor_id, actor] : actors_) {
    if (actor.spec.owner_id == owner && actor.info.state != ActorState::kDead) {
      actor.killed = true;
      kill_worker(actor, reason);
      mark_dead(actor, reason, /*expected=*/true);
    }
  }
}

void ActorTable::kill_in_group(const std::string& group_id) {
  for (auto& [actor_id, actor] : actors_) {
    if (actor.spec.placement_group_id == group_id && actor.info.state != ActorState::kDead) {
      actor.killed = true;
      kill_worker(actor, "placement group removed");
      mark_dead(actor, "its placement group was removed", /*expected=*/true);
    }
  }
}

void ActorTable::node_died(const std::string& node_id, const std::string& reason) {
  for (auto& [actor_id, actor] : actors_) {
    if (actor.info.node_id == node_id && actor.info.state != ActorState::kDead) {
      mark_dead(actor, reason);
    }
  }
}

const ActorRecord* ActorTable::find(const std::string& actor_id) const {
  auto actor = actors_.find(actor_id);
  return actor == actors_.end() ? nullptr : &actor->second;
}

std::vector<ActorInfo> ActorTable::infos() const {
  std::vector<ActorInfo> infos;
  for (const auto& [actor_id, actor] : actors_) infos.push_back(actor.info);
  return infos;
}

// Tries to give a pending actor its resources and a node; leaves it pending otherwise.
void ActorTable::schedule(ActorRecord& actor) {
  if (actor.info.state != ActorState::kPending) return;
  if (!actor.spec.placement_group_id.empty()) {
    std::optional<BundleAllocation> share = groups_.allocate(
        actor.spec.placement_group_id, actor.spec.bundle_index, actor.spec.resources);
    if (!share) return;
    actor.allocation = share->allocation;
    actor.bundle = share->bundle;
    start_on_node(actor);
    return;
  }
  std::vector<NodeCapacity> capacities = nodes_.alive_capacities();
  PlacementDecision decision = place_actor(capacities, actor.spec.resources, "");
  if (decision.outcome != PlacementOutcome::kPlaced) return;
  nodes_.commit(capacities);
  actor.allocation = decision.allocations.at(0);
  start_on_node(actor);
}

void ActorTable::start_on_node(ActorRecord& actor) {
  actor.info.node_id = actor.allocation->node_id;
  actor.info.gpu_ids.assign(actor.allocation->gpu_ids.begin(), actor.allocation->gpu_ids.end());
  actor.info.state = ActorState::kStarting;
  StartWorker start;
  start.spec = actor.spec;
  start.gpu_ids = actor.info.gpu_ids;
  start.restarts = actor.info.restarts;
  start.head_address = head_endpoint_;
  outbox_.event(nodes_.at(actor.info.node_id).routing_id, method::kStartWorker, start);
  broadcast(actor.info);
}

void ActorTable::free_resources(ActorRecord& actor) {
  if (!actor.allocation) return;
  if (actor.bundle >= 0) {
    groups_.release(actor.spec.placement_group_id,
                    BundleAllocation{actor.bundle, *actor.allocation});
  } else {
    nodes_.release_allocation(*actor.allocation);
  }
  actor.allocation.reset();
  actor.bundle = -1;
}

void ActorTable::mark_dead(ActorRecord& actor, const std::string& reason, bool expected) {
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
  if (on_death_) on_death_(actor);
}

void ActorTable::kill_worker(const ActorRecord& actor, const std::string& reason) {
  const NodeRecord* node = nodes_.find(actor.info.node_id);
  if (node == nullptr || !node->capacity.alive) return;
  WorkerEvent kill;
  kill.actor_id = actor.spec.actor_id;
  kill.pid = actor.info.pid;
  kill.reason = reason;
  outbox_.event(node->routing_id, method::kKillWorker, kill);
}

void ActorTable::broadcast(ActorInfo& info) {
  info.version += 1;
  for (const auto& [routing_id, client] : nodes_.clients()) {
    outbox_.event(routing_id, topic::kActor, info);
  }
}

}  // namespace ooze::actors
