// Where actors and placement-group bundles go, Ray style. The head calls these with its node
// table; they decide, and reserve on success, but never block: a request that fits an empty
// cluster but not the current one comes back kNotNow and the head retries it when resources are
// freed; one that no emptying of the cluster could satisfy comes back kNever with the reason.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "actors/resources.h"

namespace ooze::actors {

enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };

// "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD" (Ray's names); ooze::ConfigError listing them
// otherwise.
PlacementStrategy parse_placement_strategy(const std::string& name);
const char* placement_strategy_name(PlacementStrategy strategy);

enum class PlacementOutcome { kPlaced, kNotNow, kNever };

struct PlacementDecision {
  PlacementOutcome outcome;
  std::vector<Allocation> allocations;  // kPlaced: one per bundle, in the request's bundle order
  std::string reason;                   // kNotNow / kNever: what is missing, naming the resource
};

// Places all bundles atomically on alive nodes: on kPlaced the nodes' available resources are
// reduced, otherwise `nodes` is unchanged. kNever means the bundles would not fit even if every
// alive node were empty (the same strategy run on the nodes' totals fails); kNotNow means they
// would. Nodes are ordered by (address, node_id), with dotted IPv4 addresses compared
// numerically.
//   PACK: first fit over nodes sorted by most available of the requested resources, so few
//     nodes are used; spills onto more nodes when needed.
//   SPREAD: each bundle on the node holding the fewest bundles of this group so far; shares
//     nodes when there are more bundles than nodes.
//   STRICT_PACK: all bundles on one node, or not at all.
//   STRICT_SPREAD: every bundle on a different node, or not at all (an exact matching).
PlacementDecision place_bundles(std::vector<NodeCapacity>& nodes,
                                const std::vector<ResourceSet>& bundles,
                                PlacementStrategy strategy);

// One actor outside any placement group: on `preferred_node_id` when it is non-empty, alive and
// the request fits there now; otherwise on the alive node with the most available of the
// requested resources. Same outcome rules as place_bundles.
PlacementDecision place_actor(std::vector<NodeCapacity>& nodes, const ResourceSet& request,
                              const std::string& preferred_node_id);

// The order in which a placement group's bundles are reported to users (trainer ranks and engine
// GPUs are lined up by it, as in Slime): indices of `allocations` sorted by node address, then
// lowest GPU id (bundles without GPUs after those with), then bundle index. `node_address` maps
// node_id -> address; an unknown node_id throws ooze::Error.
std::vector<size_t> bundle_report_order(const std::vector<Allocation>& allocations,
                                        const std::map<std::string, std::string>& node_address);

// The node order used above: dotted IPv4 addresses numerically, other addresses as strings.
bool address_less(const std::string& a, const std::string& b);

}  // namespace ooze::actors
