// Placement groups: reserve bundles of resources across nodes, then place actors into them.
//
//   PlacementGroup group = PlacementGroup::create({{{"GPU", 1}}, {{"GPU", 1}}}, "PACK");
//   group.ready();                       // waits; PlacementError names what is missing
//   for (const BundleInfo& b : group.bundles()) ...  // ordered by (node address, GPU id)
//   spawn<TrainActor>({.placement_group_id = group.id(), .bundle_index = b.index}, ...);
//   group.remove();                      // kills its actors, frees the resources
//
// A group that no cluster of the current nodes could hold fails at create(); one that only
// has to wait for resources to be freed stays pending until ready() times out.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "actors/protocol.h"

namespace ooze::actors {

class PlacementGroup {
 public:
  // Strategy: "PACK", "SPREAD", "STRICT_PACK" or "STRICT_SPREAD".
  static PlacementGroup create(const std::vector<ResourceSet>& bundles,
                               const std::string& strategy = "PACK", const std::string& name = "");

  // Blocks until every bundle is reserved; throws PlacementError (with what is missing) when
  // that does not happen within `timeout`, or when the group was removed.
  void ready(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  bool is_ready() const { return info_.state == PlacementGroupState::kCreated; }

  // After ready(): the bundles ordered by (node address, first GPU id); BundleInfo::index is
  // the bundle's position in the create() request, for ActorOptions::bundle_index.
  const std::vector<BundleInfo>& bundles() const { return info_.bundles; }
  const std::string& id() const { return info_.id; }
  const PlacementGroupInfo& info() const { return info_; }

  void remove();

 private:
  explicit PlacementGroup(PlacementGroupInfo info) : info_(std::move(info)) {}
  PlacementGroupInfo info_;
};

}  // namespace ooze::actors
