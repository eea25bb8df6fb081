#include "actors/protocol.h"

#include <sstream>

namespace ooze::actors {

const char* actor_state_name(ActorState state) {
  switch (state) {
    case ActorState::kPending:
      return "PENDING";
    case ActorState::kStarting:
      return "STARTING";
    case ActorState::kAlive:
      return "ALIVE";
    case ActorState::kRestarting:
      return "RESTARTING";
    case ActorState::kDead:
      return "DEAD";
  }
  return "UNKNOWN";
}

const char* placement_group_state_name(PlacementGroupState state) {
  switch (state) {
    case PlacementGroupState::kPending:
      return "PENDING";
    case PlacementGroupState::kCreated:
      return "CREATED";
    case PlacementGroupState::kRemoved:
      return "REMOVED";
  }
  return "UNKNOWN";
}

}  // namespace ooze::actors

namespace ooze::actors {

std::string format_status(const ClusterStatus& status) {
  std::ostringstream out;
  int alive = 0;
  for (const NodeInfo& node : status.nodes) alive += node.alive ? 1 : 0;
  out << "nodes (" << alive << " alive of " << status.nodes.size() << "):\n";
  for (const NodeInfo& node : status.nodes) {
    out << "  " << node.node_id << "  " << node.address << "  " << (node.alive ? "ALIVE" : "DEAD")
        << "  available " << format_resources(node.available) << " of "
        << format_resources(node.total) << "\n";
  }
  out << "actors (" << status.actors.size() << "):\n";
  for (const ActorInfo& actor : status.actors) {
    out << "  " << actor.actor_id << "  " << actor.label << "  " << actor_state_name(actor.state)
        << "  node " << (actor.node_id.empty() ? "-" : actor.node_id) << "  pid " << actor.pid;
    if (!actor.name.empty()) out << "  name " << actor.name;
    if (actor.restarts > 0) out << "  restarts " << actor.restarts;
    if (!actor.gpu_ids.empty()) {
      out << "  gpus";
      for (int gpu : actor.gpu_ids) out << " " << gpu;
    }
    if (actor.state == ActorState::kDead) out << "  (" << actor.death_reason << ")";
    out << "\n";
  }
  out << "placement groups (" << status.placement_groups.size() << "):\n";
  for (const PlacementGroupInfo& group : status.placement_groups) {
    out << "  " << group.id << "  " << group.strategy << "  "
        << placement_group_state_name(group.state);
    if (!group.name.empty()) out << "  name " << group.name;
    if (!group.reason.empty()) out << "  (" << group.reason << ")";
    out << "\n";
    for (const BundleInfo& bundle : group.bundles) {
      out << "    bundle " << bundle.index << "  " << format_resources(bundle.resources) << "  on "
          << bundle.node_id << " (" << bundle.node_address << ")";
      if (!bundle.gpu_ids.empty()) {
        out << "  gpus";
        for (int gpu : bundle.gpu_ids) out << " " << gpu;
      }
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace ooze::actors
