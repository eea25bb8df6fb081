#include "actors/placement.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <optional>
#include <tuple>

#include "core/error.h"

namespace ooze::actors {
namespace {

using Allocations = std::vector<Allocation>;

// The four dotted parts of an IPv4 address, or nullopt when `address` is not one.
std::optional<std::vector<int>> ipv4_parts(const std::string& address) {
  std::vector<int> parts(1, 0);
  int digits = 0;
  for (char c : address) {
    if (c == '.') {
      if (digits == 0) return std::nullopt;
      parts.push_back(0);
      digits = 0;
    } else if (c >= '0' && c <= '9' && digits < 3) {
      parts.back() = parts.back() * 10 + (c - '0');
      ++digits;
    } else {
      return std::nullopt;
    }
  }
  if (parts.size() != 4 || digits == 0) return std::nullopt;
  return parts;
}

bool node_less(const NodeCapacity& a, const NodeCapacity& b) {
  if (address_less(a.address, b.address)) return true;
  if (address_less(b.address, a.address)) return false;
  return a.node_id < b.node_id;
}

ResourceSet sum_of(const std::vector<ResourceSet>& sets) {
  ResourceSet sum;
  for (const ResourceSet& set : sets) {
    for (const auto& [name, amount] : set) sum[name] += amount;
  }
  return sum;
}

ResourceSet sum_over(const std::vector<NodeCapacity>& nodes, ResourceSet NodeCapacity::*field) {
  ResourceSet sum;
  for (const NodeCapacity& node : nodes) {
    for (const auto& [name, amount] : node.*field) sum[name] += amount;
  }
  return sum;
}

// The names of the resources `need` has more of than `have`, e.g. "GPU" or "CPU, GPU".
std::string short_names(const ResourceSet& need, const ResourceSet& have) {
  std::string names;
  for (const auto& [name, amount] : need) {
    if (amount <= amount_of(have, name) + kResourceEpsilon) continue;
    names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

std::string count_of(size_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// How much of the wanted resources a node has free, each relative to the amount wanted: the
// PACK order (fill the freest node first).
double free_score(const NodeCapacity& node, const ResourceSet& wanted) {
  double score = 0;
  for (const auto& [name, amount] : wanted) {
    if (amount > kResourceEpsilon) score += amount_of(node.available, name) / amount;
  }
  return score;
}

// Indices of `nodes` (already in node order) from freest to least free; ties keep node order.
std::vector<size_t> freest_first(const std::vector<NodeCapacity>& nodes, const ResourceSet& want) {
  std::vector<size_t> order(nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return free_score(nodes[a], want) > free_score(nodes[b], want);
  });
  return order;
}

// Each strategy allocates every bundle on `nodes` (copies, in node order) and returns the
// allocations in bundle order, or returns nullopt leaving `nodes` partly used (callers discard).
std::optional<Allocations> place_pack(std::vector<NodeCapacity>& nodes,
                                      const std::vector<ResourceSet>& bundles) {
  std::vector<size_t> order = freest_first(nodes, sum_of(bundles));
  Allocations allocations;
  for (const ResourceSet& bundle : bundles) {
    std::optional<Allocation> allocation;
    for (size_t i = 0; i < order.size() && !allocation; ++i) {
      allocation = try_allocate(nodes[order[i]], bundle);
    }
    if (!allocation) return std::nullopt;
    allocations.push_back(*allocation);
  }
  return allocations;
}

std::optional<Allocations> place_spread(std::vector<NodeCapacity>& nodes,
                                        const std::vector<ResourceSet>& bundles) {
  std::vector<int> bundles_on(nodes.size(), 0);
  Allocations allocations;
  for (const ResourceSet& bundle : bundles) {
    int best = -1;  // fewest bundles of this group, then node order
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (fits_now(nodes[i], bundle) && (best < 0 || bundles_on[i] < bundles_on[best])) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) return std::nullopt;
    allocations.push_back(*try_allocate(nodes[best], bundle));
    ++bundles_on[best];
  }
  return allocations;
}

std::optional<Allocations> place_strict_pack(std::vector<NodeCapacity>& nodes,
                                             const std::vector<ResourceSet>& bundles) {
  for (size_t i : freest_first(nodes, sum_of(bundles))) {
    NodeCapacity trial = nodes[i];
    Allocations allocations;
    for (const ResourceSet& bundle : bundles) {
      std::optional<Allocation> allocation = try_allocate(trial, bundle);
      if (!allocation) break;
      allocations.push_back(*allocation);
    }
    if (allocations.size() < bundles.size()) continue;
    nodes[i] = trial;
    return allocations;
  }
  return std::nullopt;
}

// A maximum matching of bundles to distinct nodes on which each fits now (Kuhn's augmenting
// paths; a node holds one bundle, so fitting alone is exact). Returns the number matched and
// fills node_of_bundle (-1 when unmatched).
size_t match_to_distinct_nodes(const std::vector<NodeCapacity>& nodes,
                               const std::vector<ResourceSet>& bundles,
                               std::vector<int>& node_of_bundle) {
  std::vector<int> bundle_of_node(nodes.size(), -1);
  std::vector<bool> visited;
  std::function<bool(size_t)> augment = [&](size_t b) {
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (visited[n] || !fits_now(nodes[n], bundles[b])) continue;
      visited[n] = true;
      if (bundle_of_node[n] < 0 || augment(bundle_of_node[n])) {
        bundle_of_node[n] = static_cast<int>(b);
        return true;
      }
    }
    return false;
  };
  size_t matched = 0;
  for (size_t b = 0; b < bundles.size(); ++b) {
    visited.assign(nodes.size(), false);
    if (augment(b)) ++matched;
  }
  node_of_bundle.assign(bundles.size(), -1);
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (bundle_of_node[n] >= 0) node_of_bundle[bundle_of_node[n]] = static_cast<int>(n);
  }
  return matched;
}

std::optional<Allocations> place_strict_spread(std::vector<NodeCapacity>& nodes,
                                               const std::vector<ResourceSet>& bundles) {
  std::vector<int> node_of_bundle;
  if (match_to_distinct_nodes(nodes, bundles, node_of_bundle) < bundles.size()) {
    return std::nullopt;
  }
  Allocations allocations;
  for (size_t b = 0; b < bundles.size(); ++b) {
    allocations.push_back(*try_allocate(nodes[node_of_bundle[b]], bundles[b]));
  }
  return allocations;
}

std::optional<Allocations> place_with(PlacementStrategy strategy, std::vector<NodeCapacity>& nodes,
                                      const std::vector<ResourceSet>& bundles) {
  switch (strategy) {
    case PlacementStrategy::kPack:
      return place_pack(nodes, bundles);
    case PlacementStrategy::kSpread:
      return place_spread(nodes, bundles);
    case PlacementStrategy::kStrictPack:
      return place_strict_pack(nodes, bundles);
    case PlacementStrategy::kStrictSpread:
      return place_strict_spread(nodes, bundles);
  }
  return std::nullopt;
}

// The node with the most of the first resource in `short_of` (a name list from short_names).
const NodeCapacity& largest_in(const std::vector<NodeCapacity>& nodes, const std::string& short_of,
                               ResourceSet NodeCapacity::*field) {
  std::string name = short_of.substr(0, short_of.find(", "));
  size_t best = 0;
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (amount_of(nodes[i].*field, name) > amount_of(nodes[best].*field, name)) best = i;
  }
  return nodes[best];
}

// How messages name the request: one actor, or bundle b / all bundles of a group.
std::string bundle_label(bool actor, size_t b) {
  return actor ? "the actor needs" : "bundle " + std::to_string(b) + " needs";
}
std::string group_label(bool actor, size_t bundles) {
  return actor ? "the actor needs" : "the " + count_of(bundles, "bundle") + " need";
}

// Why `bundles` cannot be placed on `nodes` (alive, in node order) even when they are empty.
std::string never_reason(const std::vector<NodeCapacity>& nodes,
                         const std::vector<ResourceSet>& bundles, PlacementStrategy strategy,
                         bool actor) {
  if (nodes.empty()) return "the cluster has no alive nodes";
  ResourceSet largest = sum_over(nodes, &NodeCapacity::total);  // per resource, the largest node
  for (auto& [name, amount] : largest) {
    amount = 0;
    for (const NodeCapacity& node : nodes) amount = std::max(amount, amount_of(node.total, name));
  }
  for (size_t b = 0; b < bundles.size(); ++b) {
    if (std::any_of(nodes.begin(), nodes.end(),
                    [&](auto& n) { return fits_ever(n, bundles[b]); })) {
      continue;
    }
    std::string what = bundle_label(actor, b) + " " + format_resources(bundles[b]);
    for (const auto& [name, amount] : bundles[b]) {
      if (amount > kResourceEpsilon && amount_of(largest, name) < kResourceEpsilon) {
        return what + " but no alive node has " + name;
      }
    }
    std::string short_of = short_names(bundles[b], largest);
    if (short_of.empty()) return what + " but no alive node has all of it together";
    return what + " but the largest node has " +
           format_resources(largest_in(nodes, short_of, &NodeCapacity::total).total) +
           " (short of " + short_of + ")";
  }
  ResourceSet need = sum_of(bundles);
  if (strategy == PlacementStrategy::kStrictSpread) {
    std::string what = "STRICT_SPREAD of " + count_of(bundles.size(), "bundle") + " needs " +
                       count_of(bundles.size(), "node") + " that can each hold a bundle; ";
    if (bundles.size() > nodes.size()) {
      return what + "the cluster has " + count_of(nodes.size(), "alive node");
    }
    std::vector<int> unused;
    return what + "at most " + std::to_string(match_to_distinct_nodes(nodes, bundles, unused)) +
           " of them fit on distinct alive nodes";
  }
  if (strategy == PlacementStrategy::kStrictPack) {
    std::string what = "STRICT_PACK needs " + format_resources(need) + " on one node; ";
    std::string short_of = short_names(need, largest);
    if (short_of.empty()) return what + "no alive node can hold all of its bundles together";
    return what + "the largest node has " +
           format_resources(largest_in(nodes, short_of, &NodeCapacity::total).total) +
           " (short of " + short_of + ")";
  }
  ResourceSet cluster = sum_over(nodes, &NodeCapacity::total);
  std::string short_of = short_names(need, cluster);
  std::string what =
      group_label(actor, bundles.size()) + " " + format_resources(need) + " together";
  if (short_of.empty()) return what + "; each fits a node alone but they do not fit all at once";
  return what + " but the alive nodes have " + format_resources(cluster) + " in all (short of " +
         short_of + ")";
}

// Why `bundles` do not fit `nodes` (alive, in node order) now, when they would fit them empty.
std::string not_now_reason(const std::vector<NodeCapacity>& nodes,
                           const std::vector<ResourceSet>& bundles, PlacementStrategy strategy,
                           bool actor) {
  ResourceSet need = sum_of(bundles);
  if (strategy == PlacementStrategy::kStrictSpread) {
    std::vector<int> unused;
    return "STRICT_SPREAD of " + count_of(bundles.size(), "bundle") + " needs " +
           count_of(bundles.size(), "node") + " with a bundle's resources free; only " +
           std::to_string(match_to_distinct_nodes(nodes, bundles, unused)) + " can be matched now";
  }
  if (strategy == PlacementStrategy::kStrictPack) {
    const NodeCapacity& freest = nodes[freest_first(nodes, need).front()];
    std::string short_of = short_names(need, freest.available);
    return "STRICT_PACK needs " + format_resources(need) + " on one node; the freest node has " +
           format_resources(freest.available) + " free now" +
           (short_of.empty() ? " (fragmented)" : " (short of " + short_of + ")");
  }
  ResourceSet free = sum_over(nodes, &NodeCapacity::available);
  std::string short_of = short_names(need, free);
  return group_label(actor, bundles.size()) + " " + format_resources(need) +
         " but the alive nodes have " + format_resources(free) + " free now" +
         (short_of.empty() ? ", too fragmented" : " (short of " + short_of + ")");
}

PlacementDecision place(std::vector<NodeCapacity>& nodes, const std::vector<ResourceSet>& bundles,
                        PlacementStrategy strategy, bool actor) {
  // Work on copies of the alive nodes in node order, so a failure leaves `nodes` untouched.
  std::vector<size_t> alive;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].alive) alive.push_back(i);
  }
  std::sort(alive.begin(), alive.end(),
            [&](size_t a, size_t b) { return node_less(nodes[a], nodes[b]); });
  std::vector<NodeCapacity> now, empty;
  for (size_t i : alive) {
    now.push_back(nodes[i]);
    empty.push_back(NodeCapacity::make(nodes[i].node_id, nodes[i].address, nodes[i].total));
  }
  if (std::optional<Allocations> allocations = place_with(strategy, now, bundles)) {
    for (size_t k = 0; k < alive.size(); ++k) nodes[alive[k]] = now[k];
    return {PlacementOutcome::kPlaced, std::move(*allocations), ""};
  }
  std::vector<NodeCapacity> scratch = empty;
  if (!place_with(strategy, scratch, bundles)) {
    return {PlacementOutcome::kNever, {}, never_reason(empty, bundles, strategy, actor)};
  }
  return {PlacementOutcome::kNotNow, {}, not_now_reason(now, bundles, strategy, actor)};
}

}  // namespace

bool address_less(const std::string& a, const std::string& b) {
  std::optional<std::vector<int>> ip_a = ipv4_parts(a), ip_b = ipv4_parts(b);
  if (ip_a && ip_b) return *ip_a < *ip_b;
  if (ip_a || ip_b) return ip_a.has_value();  // IPv4 addresses before host names
  return a < b;
}

PlacementStrategy parse_placement_strategy(const std::string& name) {
  for (PlacementStrategy strategy :
       {PlacementStrategy::kPack, PlacementStrategy::kSpread, PlacementStrategy::kStrictPack,
        PlacementStrategy::kStrictSpread}) {
    if (name == placement_strategy_name(strategy)) return strategy;
  }
  throw ConfigError("unknown placement strategy '" + name +
                    "'; use one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD");
}

const char* placement_strategy_name(PlacementStrategy strategy) {
  switch (strategy) {
    case PlacementStrategy::kPack:
      return "PACK";
    case PlacementStrategy::kSpread:
      return "SPREAD";
    case PlacementStrategy::kStrictPack:
      return "STRICT_PACK";
    case PlacementStrategy::kStrictSpread:
      return "STRICT_SPREAD";
  }
  return "?";
}

PlacementDecision place_bundles(std::vector<NodeCapacity>& nodes,
                                const std::vector<ResourceSet>& bundles,
                                PlacementStrategy strategy) {
  return place(nodes, bundles, strategy, /*actor=*/false);
}

PlacementDecision place_actor(std::vector<NodeCapacity>& nodes, const ResourceSet& request,
                              const std::string& preferred_node_id) {
  for (NodeCapacity& node : nodes) {
    if (preferred_node_id.empty() || node.node_id != preferred_node_id || !node.alive) continue;
    if (std::optional<Allocation> allocation = try_allocate(node, request)) {
      return {PlacementOutcome::kPlaced, {*allocation}, ""};
    }
  }
  return place(nodes, {request}, PlacementStrategy::kPack, /*actor=*/true);
}

std::vector<size_t> bundle_report_order(const std::vector<Allocation>& allocations,
                                        const std::map<std::string, std::string>& node_address) {
  std::vector<std::string> address(allocations.size());
  for (size_t i = 0; i < allocations.size(); ++i) {
    auto it = node_address.find(allocations[i].node_id);
    if (it == node_address.end()) {
      throw Error("bundle_report_order: bundle " + std::to_string(i) + " is on node " +
                  allocations[i].node_id + ", which node_address does not list");
    }
    address[i] = it->second;
  }
  auto lowest_gpu = [&](size_t i) {
    const std::vector<int>& ids = allocations[i].gpu_ids;
    return ids.empty() ? INT_MAX : *std::min_element(ids.begin(), ids.end());
  };
  std::vector<size_t> order(allocations.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (address_less(address[a], address[b])) return true;
    if (address_less(address[b], address[a])) return false;
    return std::make_tuple(lowest_gpu(a), a) < std::make_tuple(lowest_gpu(b), b);
  });
  return order;
}

}  // namespace ooze::actors
