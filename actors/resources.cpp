#include "actors/resources.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"

namespace ooze::actors {
namespace {

const char* const kGpu = "GPU";

bool is_whole(double amount) { return std::fabs(amount - std::round(amount)) < kResourceEpsilon; }

// Whole amounts without ".0" (exact up to 2^53, so byte counts survive); fractions with 15
// significant digits, which round-trips any decimal of up to 15 digits and hides float drift.
std::string format_amount(double amount) {
  char number[64];
  if (amount == std::floor(amount) && std::fabs(amount) < 9e15) {
    std::snprintf(number, sizeof(number), "%lld", static_cast<long long>(amount));
  } else {
    std::snprintf(number, sizeof(number), "%.15g", amount);
  }
  return number;
}

// Throws ConfigError when `amount` cannot be an amount of resource `name`; `where` names the
// source for the message.
void check_amount(const std::string& where, const std::string& name, double amount) {
  if (name.empty()) throw ConfigError(where + ": a resource name is empty");
  if (!std::isfinite(amount) || amount < 0) {
    throw ConfigError(where + ": " + name + " = " + format_amount(amount) +
                      "; resource amounts must be finite and non-negative");
  }
  if (name == kGpu && amount > 1 + kResourceEpsilon && !is_whole(amount)) {
    throw ConfigError(where + ": GPU = " + format_amount(amount) +
                      "; ask for a fraction of one device (below 1) or a whole number of devices");
  }
}

void check_request(const ResourceSet& request) {
  for (const auto& [name, amount] : request) check_amount("resource request", name, amount);
}

// Arithmetic on fractions drifts (1 - 0.1 * 10 != 0); values within epsilon of an end of the
// range snap to it, which is what makes release() restore the initial state exactly.
double snap(double value, double total) {
  if (std::fabs(value) < kResourceEpsilon) return 0.0;
  if (std::fabs(value - total) < kResourceEpsilon) return total;
  return value;
}

void update_available_gpus(NodeCapacity& node) {
  if (node.total.count(kGpu) == 0) return;
  double sum = std::accumulate(node.gpu_free.begin(), node.gpu_free.end(), 0.0);
  node.available[kGpu] = snap(sum, node.total[kGpu]);
}

bool fits(const ResourceSet& have, const std::vector<double>& gpu_free, const ResourceSet& request,
          bool count_free_devices) {
  check_request(request);
  for (const auto& [name, amount] : request) {
    if (amount < kResourceEpsilon) continue;
    if (name != kGpu) {
      if (amount_of(have, name) + kResourceEpsilon < amount) return false;
      continue;
    }
    if (!count_free_devices) {  // totals: every device counts as free
      if (amount_of(have, kGpu) + kResourceEpsilon < std::max(amount, 1.0)) return false;
      continue;
    }
    // A whole count needs that many fully free devices; a fraction needs one device with enough.
    double per_device = is_whole(amount) ? 1.0 : amount;
    long needed = is_whole(amount) ? std::lround(amount) : 1;
    long usable = std::count_if(gpu_free.begin(), gpu_free.end(),
                                [&](double free) { return free + kResourceEpsilon >= per_device; });
    if (usable < needed) return false;
  }
  return true;
}

}  // namespace

double amount_of(const ResourceSet& resources, const std::string& name) {
  auto it = resources.find(name);
  return it == resources.end() ? 0.0 : it->second;
}

ResourceSet parse_resources(const std::string& json_text) {
  const std::string where = "resources '" + json_text + "'";
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(where + " are not valid JSON (" + e.what() +
                      "); write an object of finite non-negative numbers like {\"CPU\":1}");
  }
  if (!json.is_object()) {
    throw ConfigError(where + " are not a JSON object; write e.g. {\"CPU\":1,\"GPU\":0.5}");
  }
  ResourceSet resources;
  for (const auto& [name, value] : json.items()) {
    if (!value.is_number()) {
      throw ConfigError(where + ": " + name + " is " + value.dump() + ", not a number");
    }
    double amount = value.get<double>();
    check_amount(where, name, amount);
    if (amount > 0) resources[name] = amount;
  }
  return resources;
}

std::string format_resources(const ResourceSet& resources) {
  std::string out = "{";
  for (const auto& [name, amount] : resources) {
    if (std::fabs(amount) < kResourceEpsilon) continue;
    if (out.size() > 1) out += ",";
    out += nlohmann::json(name).dump() + ":" + format_amount(amount);
  }
  return out + "}";
}

NodeCapacity NodeCapacity::make(std::string node_id, std::string address, ResourceSet total) {
  const std::string where = "node " + node_id + " (" + address + ")";
  for (const auto& [name, amount] : total) check_amount(where, name, amount);
  double gpus = amount_of(total, kGpu);
  if (!is_whole(gpus)) {
    throw ConfigError(where + " declares GPU = " + format_amount(gpus) +
                      "; a node has a whole number of GPUs");
  }
  NodeCapacity node;
  node.node_id = std::move(node_id);
  node.address = std::move(address);
  node.total = std::move(total);
  node.available = node.total;
  node.gpu_free.assign(static_cast<size_t>(std::lround(gpus)), 1.0);
  return node;
}

bool fits_now(const NodeCapacity& node, const ResourceSet& request) {
  return fits(node.available, node.gpu_free, request, /*count_free_devices=*/true);
}

bool fits_ever(const NodeCapacity& node, const ResourceSet& request) {
  return fits(node.total, node.gpu_free, request, /*count_free_devices=*/false);
}

std::optional<Allocation> try_allocate(NodeCapacity& node, const ResourceSet& request) {
  if (!fits_now(node, request)) return std::nullopt;
  Allocation allocation;
  allocation.node_id = node.node_id;
  for (const auto& [name, amount] : request) {
    if (amount < kResourceEpsilon) continue;
    allocation.resources[name] = amount;
    if (name != kGpu) {
      node.available[name] = snap(node.available[name] - amount, node.total[name]);
      continue;
    }
    std::vector<double>& free = node.gpu_free;
    if (is_whole(amount)) {  // lowest fully free ids
      long needed = std::lround(amount);
      for (size_t id = 0; id < free.size() && needed > 0; ++id) {
        if (free[id] + kResourceEpsilon < 1.0) continue;
        free[id] = 0.0;
        allocation.gpu_ids.push_back(static_cast<int>(id));
        --needed;
      }
    } else {  // the most-used device that still has room: pack fractions together
      int best = -1;
      for (size_t id = 0; id < free.size(); ++id) {
        if (free[id] + kResourceEpsilon < amount) continue;
        if (best < 0 || free[id] < free[best]) best = static_cast<int>(id);
      }
      free[best] = snap(free[best] - amount, 1.0);
      allocation.gpu_ids.push_back(best);
    }
    update_available_gpus(node);
  }
  return allocation;
}

void release(NodeCapacity& node, const Allocation& allocation) {
  if (allocation.node_id != node.node_id) {
    throw Error("release: an allocation of node " + allocation.node_id + " given back to node " +
                node.node_id);
  }
  for (const auto& [name, amount] : allocation.resources) {
    if (node.total.count(name) == 0) {
      throw Error("release: node " + node.node_id + " has no " + name + " to give back");
    }
    if (name != kGpu) {
      node.available[name] = snap(node.available[name] + amount, node.total[name]);
      continue;
    }
    double per_device = is_whole(amount) ? 1.0 : amount;
    for (int id : allocation.gpu_ids) {
      if (id < 0 || static_cast<size_t>(id) >= node.gpu_free.size()) {
        throw Error("release: node " + node.node_id + " has no GPU " + std::to_string(id));
      }
      node.gpu_free[id] = snap(node.gpu_free[id] + per_device, 1.0);
    }
    update_available_gpus(node);
  }
}

}  // namespace ooze::actors
