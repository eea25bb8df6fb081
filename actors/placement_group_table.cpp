#include "actors/placement_group_table.h"

#include <algorithm>
#include <cmath>

#include "actors/errors.h"
#include "actors/placement.h"
#include "actors/transport.h"

namespace ooze::actors {
namespace {

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

}  // namespace

const PlacementGroupInfo& PlacementGroupTable::create(const std::string& from,
                                                      PlacementGroupSpec spec) {
  PlacementStrategy strategy = parse_placement_strategy(spec.strategy);
  if (spec.bundles.empty()) throw PlacementError("a placement group needs at least one bundle");
  if (spec.owner_id.empty()) spec.owner_id = from;
  PlacementGroupRecord record;
  record.spec = spec;
  record.info.id = random_id();
  record.info.name = spec.name;
  record.info.strategy = placement_strategy_name(strategy);
  std::vector<NodeCapacity> capacities = nodes_.alive_capacities();
  for (NodeCapacity& capacity : capacities)
    capacity = NodeCapacity::make(capacity.node_id, capacity.address, capacity.total);
  PlacementDecision empty_cluster = place_bundles(capacities, spec.bundles, strategy);
  if (empty_cluster.outcome == PlacementOutcome::kNever) {
    throw PlacementError("placement group can never be created: " + empty_cluster.reason);
  }
  std::string group_id = record.info.id;
  groups_[group_id] = std::move(record);
  // No actor can be waiting for a group that did not exist: nothing to schedule here.
  try_create(groups_[group_id]);
  return groups_[group_id].info;
}

void PlacementGroupTable::create_pending(
    const std::function<void(const std::string& group_id)>& on_created) {
  for (auto& [group_id, group] : groups_) {
    if (try_create(group)) on_created(group_id);
  }
}

bool PlacementGroupTable::try_create(PlacementGroupRecord& group) {
  if (group.info.state != PlacementGroupState::kPending) return false;
  std::vector<NodeCapacity> capacities = nodes_.alive_capacities();
  PlacementDecision decision =
      place_bundles(capacities, group.spec.bundles, parse_placement_strategy(group.spec.strategy));
  if (decision.outcome != PlacementOutcome::kPlaced) {
    group.info.reason = decision.reason;
    return false;
  }
  nodes_.commit(capacities);
  group.allocations = decision.allocations;
  for (size_t b = 0; b < group.allocations.size(); ++b) {
    const std::string& node_id = group.allocations[b].node_id;
    group.bundles.push_back(bundle_capacity(node_id, nodes_.at(node_id).capacity.address,
                                            group.spec.bundles[b],
                                            group.allocations[b].gpu_ids.size()));
  }
  group.info.state = PlacementGroupState::kCreated;
  group.info.reason.clear();
  std::map<std::string, std::string> addresses = nodes_.addresses();
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
  waiters_.answer(group.info.id, group.info, outbox_);
  return true;
}

void PlacementGroupTable::wait(const std::string& from, uint64_t id, const WaitRequest& request) {
  auto group = groups_.find(request.key);
  if (group == groups_.end()) {
    outbox_.reply_error(from, id, "PlacementError", "no placement group " + request.key);
    return;
  }
  if (group->second.info.state != PlacementGroupState::kPending) {
    outbox_.reply(from, id, group->second.info);
    return;
  }
  waiters_.add(request.key, from, id, request.timeout_ms);
}

void PlacementGroupTable::remove(const std::string& group_id) {
  auto found = groups_.find(group_id);
  if (found == groups_.end()) return;
  PlacementGroupRecord& group = found->second;
  if (group.info.state == PlacementGroupState::kCreated) {
    for (const Allocation& allocation : group.allocations) nodes_.release_allocation(allocation);
  }
  group.info.state = PlacementGroupState::kRemoved;
  waiters_.answer(group_id, group.info, outbox_);
  groups_.erase(found);
}

std::vector<std::string> PlacementGroupTable::owned_by(const std::string& owner) const {
  std::vector<std::string> owned;
  for (const auto& [group_id, group] : groups_) {
    if (group.spec.owner_id == owner) owned.push_back(group_id);
  }
  return owned;
}

void PlacementGroupTable::check_could_ever_host(const ActorSpec& spec) const {
  auto group = groups_.find(spec.placement_group_id);
  if (group == groups_.end() || group->second.info.state == PlacementGroupState::kRemoved) {
    throw PlacementError("placement group " + spec.placement_group_id +
                         " does not exist or was removed");
  }
  int32_t bundles = static_cast<int32_t>(group->second.spec.bundles.size());
  if (spec.bundle_index >= bundles) {
    throw PlacementError("bundle index " + std::to_string(spec.bundle_index) +
                         " is out of range: placement group " + spec.placement_group_id + " has " +
                         std::to_string(bundles) + " bundles");
  }
  for (int32_t b = 0; b < bundles; ++b) {
    if ((spec.bundle_index < 0 || b == spec.bundle_index) &&
        fits_ever(bundle_capacity("", "", group->second.spec.bundles[b], 0), spec.resources)) {
      break;
    }
    if (b + 1 == bundles) {
      throw PlacementError(
          "actor " + spec.class_name + " needs " + format_resources(spec.resources) +
          " which no bundle it may use of placement group " + spec.placement_group_id + " holds");
    }
  }
}

std::optional<BundleAllocation> PlacementGroupTable::allocate(const std::string& group_id,
                                                              int32_t bundle_index,
                                                              const ResourceSet& resources) {
  PlacementGroupRecord& group = groups_.at(group_id);
  if (group.info.state != PlacementGroupState::kCreated) return std::nullopt;  // waits for it
  for (size_t b = 0; b < group.bundles.size(); ++b) {
    if (bundle_index >= 0 && static_cast<int32_t>(b) != bundle_index) continue;
    std::optional<Allocation> allocation = try_allocate(group.bundles[b], resources);
    if (!allocation) continue;
    // Bundle-local GPU ids -> the node's GPU ids the bundle holds.
    std::vector<int> node_gpus;
    for (int local : allocation->gpu_ids)
      node_gpus.push_back(group.allocations[b].gpu_ids.at(local));
    allocation->gpu_ids = node_gpus;
    allocation->node_id = group.allocations[b].node_id;
    return BundleAllocation{static_cast<int32_t>(b), *allocation};
  }
  return std::nullopt;
}

void PlacementGroupTable::release(const std::string& group_id, const BundleAllocation& share) {
  auto group = groups_.find(group_id);
  if (group == groups_.end() || group->second.info.state != PlacementGroupState::kCreated) return;
  // The node's GPU ids -> bundle-local ones.
  Allocation local = share.allocation;
  const auto& bundle_gpus = group->second.allocations[share.bundle].gpu_ids;
  local.gpu_ids.clear();
  for (int gpu : share.allocation.gpu_ids) {
    local.gpu_ids.push_back(static_cast<int>(
        std::find(bundle_gpus.begin(), bundle_gpus.end(), gpu) - bundle_gpus.begin()));
  }
  actors::release(group->second.bundles[share.bundle], local);
}

void PlacementGroupTable::expire_waiters(std::chrono::steady_clock::time_point now) {
  waiters_.expire(now, outbox_, [this](const std::string& group_id) {
    auto group = groups_.find(group_id);
    return "placement group " + group_id +
           (group != groups_.end() ? ": " + group->second.info.reason : "");
  });
}

std::vector<PlacementGroupInfo> PlacementGroupTable::infos() const {
  std::vector<PlacementGroupInfo> infos;
  for (const auto& [group_id, group] : groups_) infos.push_back(group.info);
  return infos;
}

}  // namespace ooze::actors
