// The head's actors: each one's spec (everything needed to start it again) and its life:
// scheduling onto a node or into a placement-group bundle, starting its worker, restarts after
// unexpected exits, kills, deaths, every change broadcast to the clients. Apart from the node
// and placement-group tables, which only hold the resources it draws on, as Ray's
// GcsActorManager is apart from its node and placement-group managers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/head_outbox.h"
#include "actors/node_table.h"
#include "actors/placement_group_table.h"
#include "actors/protocol.h"

namespace ooze::actors {

struct ActorRecord {
  ActorSpec spec;
  ActorInfo info;
  std::optional<Allocation> allocation;  // on its node, or inside its bundle
  int32_t bundle = -1;                   // the bundle it runs in
  bool killed = false;                   // by kill(): never restarted
};

class ActorTable {
 public:
  // `head_endpoint` is passed on to the workers it starts.
  ActorTable(NodeTable& nodes, PlacementGroupTable& groups, HeadOutbox& outbox,
             std::string head_endpoint);

  // Runs after each death (the actor's resources freed, the clients told): what the actor owned
  // goes with it, and what it held may let pending work run. The head sees to both, since they
  // reach into the placement groups too.
  void on_death(std::function<void(const ActorRecord& actor)> hook) { on_death_ = std::move(hook); }

  // Checks that the actor could ever be placed (PlacementError, or ooze::Error for a name in
  // use), records it, replies to `from` with its info, then schedules it.
  void create(const std::string& from, uint64_t id, ActorSpec spec);
  // Replies with the live actor named `name` (or the actor with that id, dead or alive).
  void get(const std::string& from, uint64_t id, const std::string& name);
  void kill(const std::string& from, uint64_t id, const KillRequest& request);
  // Replies with the spec a starting worker constructs its actor from.
  void spec(const std::string& from, uint64_t id, const std::string& actor_id);

  // What node agents and workers report.
  void worker_started(const WorkerEvent& started);
  void actor_ready(const WorkerEvent& ready);
  void actor_failed(const WorkerEvent& failed);
  void worker_exited(const WorkerEvent& exited);

  // Gives pending actors resources and a node when there is room (every actor, in table order;
  // or those placed in one group).
  void schedule_pending();
  void schedule_in_group(const std::string& group_id);
  // Kills the actors `owner` spawned, or those placed in a group, as their owner asked: not
  // restarted, no log line.
  void kill_owned_by(const std::string& owner, const std::string& reason);
  void kill_in_group(const std::string& group_id);
  // The actors on a node that died are dead.
  void node_died(const std::string& node_id, const std::string& reason);

  const ActorRecord* find(const std::string& actor_id) const;
  std::vector<ActorInfo> infos() const;

 private:
  void schedule(ActorRecord& actor);
  void start_on_node(ActorRecord& actor);
  void free_resources(ActorRecord& actor);
  // `expected`: the owner asked for it (shutdown, removal); not worth a log line.
  void mark_dead(ActorRecord& actor, const std::string& reason, bool expected = false);
  void kill_worker(const ActorRecord& actor, const std::string& reason);
  void broadcast(ActorInfo& info);

  NodeTable& nodes_;
  PlacementGroupTable& groups_;
  HeadOutbox& outbox_;
  std::string head_endpoint_;
  std::function<void(const ActorRecord& actor)> on_death_;
  std::map<std::string, ActorRecord> actors_;
};

}  // namespace ooze::actors
