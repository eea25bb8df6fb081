// The head's placement groups: bundles of resources reserved on nodes together (PACK, SPREAD,
// STRICT_*), created as soon as the nodes have room, and the wait_placement_group requests
// parked until then. It is apart from the actor table because a group holds resources before
// any actor uses them, and outlives the actors placed in it; those actors draw on the bundles
// through this table, never on the nodes behind them (as Ray's GcsPlacementGroupManager is apart
// from its GcsActorManager).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/head_outbox.h"
#include "actors/keyed_waiters.h"
#include "actors/node_table.h"
#include "actors/protocol.h"

namespace ooze::actors {

struct PlacementGroupRecord {
  PlacementGroupSpec spec;
  PlacementGroupInfo info;
  std::vector<Allocation> allocations;  // per bundle, request order (on the nodes)
  std::vector<NodeCapacity> bundles;    // what is left of each bundle for actors
};

// An actor's share of one bundle, with the node's GPU ids.
struct BundleAllocation {
  int32_t bundle = -1;
  Allocation allocation;
};

class PlacementGroupTable {
 public:
  PlacementGroupTable(NodeTable& nodes, HeadOutbox& outbox) : nodes_(nodes), outbox_(outbox) {}

  // Records a group that could be placed on the alive nodes were they empty (PlacementError
  // otherwise) and reserves its bundles when they fit now. Owned by `from` unless the spec names
  // an owner.
  const PlacementGroupInfo& create(const std::string& from, PlacementGroupSpec spec);
  // Tries again to reserve the bundles of every pending group, in table order; `on_created`
  // runs for each group that got them, before the next one is tried.
  void create_pending(const std::function<void(const std::string& group_id)>& on_created);
  // Answers with the group's info once it is no longer pending (at once if it is not).
  void wait(const std::string& from, uint64_t id, const WaitRequest& request);
  // Gives the group's reservations back to the nodes, answers its waiters (REMOVED) and forgets
  // it. The actors placed in it must be dead by then.
  void remove(const std::string& group_id);

  bool contains(const std::string& group_id) const { return groups_.count(group_id) != 0; }
  std::vector<std::string> owned_by(const std::string& owner) const;

  // Throws PlacementError unless `spec`'s group exists and one of the bundles the actor may use
  // could ever hold its resources.
  void check_could_ever_host(const ActorSpec& spec) const;
  // Room for `resources` in bundle `bundle_index` (or the first bundle with room when it is
  // negative) of a created group; nullopt while the group is pending or full. Throws
  // std::out_of_range for an unknown group.
  std::optional<BundleAllocation> allocate(const std::string& group_id, int32_t bundle_index,
                                           const ResourceSet& resources);
  // Gives an actor's share back to its bundle (nothing when the group is gone or not created).
  void release(const std::string& group_id, const BundleAllocation& share);

  // Fails waiters past their deadline, saying why their group is still pending.
  void expire_waiters(std::chrono::steady_clock::time_point now);
  std::vector<PlacementGroupInfo> infos() const;

 private:
  // Reserves a pending group's bundles when they fit now; true when it did.
  bool try_create(PlacementGroupRecord& group);

  NodeTable& nodes_;
  HeadOutbox& outbox_;
  std::map<std::string, PlacementGroupRecord> groups_;
  KeyedWaiters waiters_;
};

}  // namespace ooze::actors
