// Resource accounting of one node, Ray style: named amounts ("CPU", "GPU", "memory", custom
// names) with GPUs tracked per device id, so an allocation knows which devices it was granted
// (the node agent turns them into CUDA_VISIBLE_DEVICES). Pure bookkeeping: the head owns one
// NodeCapacity per node and placement.h decides where requests go.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ooze::actors {

using ResourceSet = std::map<std::string, double>;  // resource name -> amount

// Amounts closer than this are equal, so ten allocations of 0.1 GPU fill exactly one device.
constexpr double kResourceEpsilon = 1e-9;

// Parses a JSON object of non-negative finite numbers, e.g. {"CPU":1,"GPU":0.5}. A GPU amount
// is either a fraction of one device (below 1) or a whole number of devices. Zero amounts are
// dropped. Throws ooze::ConfigError naming the problem.
ResourceSet parse_resources(const std::string& json_text);

// resources[name], or 0 when the set has none of it.
double amount_of(const ResourceSet& resources, const std::string& name);

// Compact JSON with sorted keys and zero amounts omitted; whole amounts print without ".0" and
// fractions with 15 significant digits, so parse_resources(format_resources(r)) == r for every
// amount a person writes.
std::string format_resources(const ResourceSet& resources);

// What one node has. available["GPU"] is always the sum of gpu_free.
struct NodeCapacity {
  std::string node_id;
  std::string address;           // host (IP or name) of the node; used for stable ordering
  ResourceSet total;             // declared resources; "GPU" = number of devices
  ResourceSet available;         // total minus what allocations hold
  std::vector<double> gpu_free;  // per GPU id: 1.0 = whole device free
  bool alive = true;

  // available = total and every device free. Throws ooze::ConfigError when an amount is
  // negative or not finite, or "GPU" is not a whole number.
  static NodeCapacity make(std::string node_id, std::string address, ResourceSet total);
};

// What try_allocate granted; release() gives it back.
struct Allocation {
  std::string node_id;
  ResourceSet resources;     // the request, zero amounts dropped
  std::vector<int> gpu_ids;  // devices granted, ascending (empty when no GPU asked)
};

// Whether `request` fits in `node` now (available) / ever (total). Resources only: callers skip
// dead nodes. A request with a GPU amount above 1 that is not whole throws ooze::ConfigError.
bool fits_now(const NodeCapacity& node, const ResourceSet& request);
bool fits_ever(const NodeCapacity& node, const ResourceSet& request);

// Takes `request` out of node.available. A whole GPU count takes that many fully free devices,
// lowest ids first; a fraction takes its share of ONE device, the most-used one that has enough
// left (so two 0.5 requests share a device and whole devices stay whole). Returns nullopt, with
// the node unchanged, when the request does not fit now.
std::optional<Allocation> try_allocate(NodeCapacity& node, const ResourceSet& request);

// The exact inverse of try_allocate: once every allocation is released the node equals its
// NodeCapacity::make state bit for bit. Throws ooze::Error when the allocation is not this node's.
void release(NodeCapacity& node, const Allocation& allocation);

}  // namespace ooze::actors
